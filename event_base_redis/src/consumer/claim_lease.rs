//! The leases of a lane's claims: renewed while held (script `EXTEND`, from a task of its
//! own), known fresh from memory, and confirmed with Redis when in doubt.

use std::sync::{Arc, Weak};
use std::time::Duration;

use event_base_core::backend::{ClaimStatus, Receipt};
use tokio::time::Instant;

use super::lane_consumer::LaneConsumer;
use crate::error::RedisError;
use crate::reply;
use crate::scripts;

impl LaneConsumer {
    /// Renews the leases of everything held; drops what was taken over.
    async fn extend(&self) -> Result<(), RedisError> {
        let sent = Instant::now();
        let held: Vec<Receipt> = self.held().keys().copied().collect();
        self.renew(&held, sent).await.map(drop)
    }

    /// Script `EXTEND` over `receipts`, sent at `sent`: those this consumer still owns are
    /// renewed (their leases confirmed at `sent`), the others are no longer held. Returns
    /// how many were lost.
    async fn renew(&self, receipts: &[Receipt], sent: Instant) -> Result<usize, RedisError> {
        if receipts.is_empty() {
            return Ok(0);
        }
        let mut lost = Vec::new();
        for v in self.settle("EXTEND", &scripts::EXTEND, receipts).await? {
            for id in reply::array("EXTEND", &v)? {
                if let Some(r) = self.receipt(&reply::string("EXTEND", id)?) {
                    lost.push(r);
                }
            }
        }
        let mut held = self.held();
        for r in &lost {
            held.remove(r);
        }
        for r in receipts {
            // Only those still held: one settled meanwhile is not taken back.
            if let Some(at) = held.get_mut(r) {
                *at = (*at).max(sent);
            }
        }
        Ok(lost.len())
    }

    /// Whether the lease of `receipt` is known to be this consumer's now, without asking
    /// Redis: held, and confirmed less than half a visibility timeout ago with this node
    /// beating since (see [`fresh`](Self::fresh)).
    pub(super) fn lease_fresh(&self, receipt: &Receipt) -> bool {
        let confirmed = self.held().get(receipt).copied();
        confirmed.is_some_and(|at| self.fresh(at, Instant::now()))
    }

    /// Whether a lease confirmed at `at` cannot have been taken over by `now`. Another
    /// consumer takes an entry over once it is idle for a visibility timeout (its sweep,
    /// `XAUTOCLAIM`), or at once after the janitor evicted this node for three silent beats;
    /// `at` is never later than Redis reset the entry's idle time. Half the timeout leaves
    /// the other half for clocks and for the handler to start after the check: past it, a
    /// claim is confirmed before its handler starts. The extender renews every third of the
    /// timeout, so a process that is not paused (or starved) never gets there.
    fn fresh(&self, at: Instant, now: Instant) -> bool {
        if let Some(lease) = &self.lease {
            // Nobody takes a keyed entry over by its idle time: only a new lease holder.
            return lease.fresh(at, now);
        }
        now.saturating_duration_since(at) < self.q.visibility / 2
            && self.q.node.unevicted_since(at, now)
    }

    /// Confirms with Redis that `receipt`, a claim in doubt, is still this consumer's. One
    /// call confirms every claim held in doubt (one `EXTEND` per [`CHUNK`](super::settle::CHUNK)), renewing those
    /// still owned and dropping the lost ones: after a pause every worker of the process
    /// asks, and all but the first find their claims decided (they wait for it on
    /// `confirming`). After a failed one (Redis away), the next is tried no sooner than a
    /// claim's block time later: meanwhile every delivery would pay a timeout for nothing.
    ///
    /// Not on a keyed lane: its claims are confirmed by its lease (`keyed::confirm`).
    pub(super) async fn confirm(&self, receipt: Receipt) -> Result<ClaimStatus, RedisError> {
        let asked = Instant::now();
        let mut failed = self.confirming.lock().await;
        let sent = Instant::now();
        let doubt: Vec<Receipt> = {
            let held = self.held();
            match held.get(&receipt) {
                // Found lost by a confirmation or a renewal meanwhile.
                None => return Ok(ClaimStatus::Lost),
                Some(&at) if self.fresh(at, sent) => return Ok(ClaimStatus::Held),
                Some(_) => {}
            }
            if let Some((began, ended, reason)) = &*failed {
                if *began >= asked || ended.elapsed() < self.q.block {
                    return Err(RedisError::LeaseUnconfirmed {
                        reason: reason.clone(),
                    });
                }
            }
            held.iter()
                .filter(|(_, &at)| !self.fresh(at, sent))
                .map(|(r, _)| *r)
                .collect()
        };
        let lost = match self.renew(&doubt, sent).await {
            Ok(lost) => {
                *failed = None;
                lost
            }
            Err(e) => {
                // Logged here, once per attempt: the bus hears of it for every delivery.
                tracing::warn!(target: "event_base::redis", topic = %self.q.topic, consumer = %self.name, claims = doubt.len(), error = %e, "could not confirm that old claims (held since a pause or a stall) are still this consumer's; their handlers run anyway, so a message another consumer took over meanwhile may be handled twice");
                *failed = Some((sent, Instant::now(), e.to_string()));
                return Err(e);
            }
        };
        if lost > 0 {
            let total = self
                .lost
                .fetch_add(lost as u64, std::sync::atomic::Ordering::Relaxed)
                + lost as u64;
            tracing::warn!(target: "event_base::redis", topic = %self.q.topic, consumer = %self.name, lost, total, "claims were taken over by another consumer before their handlers started here (their leases ran out: was this process paused?); they are dropped here unhandled, their new owner handles them");
        }
        Ok(if self.held().contains_key(&receipt) {
            ClaimStatus::Held
        } else {
            ClaimStatus::Lost
        })
    }

    pub(super) fn start_extender(self: &Arc<Self>) {
        self.extender.call_once(|| {
            let weak = Arc::downgrade(self);
            let every = self.q.visibility / 3;
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(extend_loop(weak, every));
            }
        });
    }
}

async fn extend_loop(inner: Weak<LaneConsumer>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        if let Err(e) = inner.extend().await {
            tracing::warn!(target: "event_base::redis", topic = %inner.q.topic, error = %e, "could not renew the leases of held entries; another consumer may take them over");
        }
    }
}
