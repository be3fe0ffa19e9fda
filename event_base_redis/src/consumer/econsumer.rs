//! The bus's consumer contract (`EConsumer`) over a consumer's lanes: claims from all of
//! them, and each settlement sent to the lane its receipt names.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use event_base_core::backend::{ClaimStatus, Claimed, EConsumer, QueuedRetry};
use event_base_core::{EMessage, QueueError};
use tokio::time::Instant;

use super::keyed;
use super::lane_consumer::LaneConsumer;
use super::RedisConsumer;
use crate::error::RedisError;
use crate::lane::Lane;
use crate::scripts;

fn queue_error(e: RedisError) -> QueueError {
    e.into()
}

#[async_trait]
impl EConsumer for RedisConsumer {
    async fn claim_batch(&self, max: usize, out: &mut Vec<Claimed>) -> Result<usize, QueueError> {
        let inner = &self.inner;
        let mut reader = inner.reader.lock().await;
        loop {
            if inner.q.is_closed() {
                let closed = || QueueError::Closed(inner.q.topic.0.clone());
                // Drain: what the streams held when it began, not what other processes
                // send since (the nodes still running take that). A side lane's read in
                // flight ends at once (it wakes on the close).
                let mut n = 0;
                let mut done = true;
                for side in self.sides() {
                    let (got, drained) = side.drain(max, n, out).await.map_err(queue_error)?;
                    n += got;
                    done &= drained;
                }
                if n < max {
                    let (got, drained) = inner
                        .drain_step(&mut reader, max - n, out)
                        .await
                        .map_err(queue_error)?;
                    n += got;
                    done &= drained;
                } else {
                    done = false;
                }
                if n > 0 {
                    return Ok(n);
                }
                if done {
                    if let Some(k) = &self.keyed {
                        k.inner.release_if_idle().await;
                    }
                    return Err(closed());
                }
                continue;
            }
            if let Some(b) = &self.bcast {
                // Before anything is read: once this node's handler is registered, its
                // group on the broadcast stream exists.
                b.inner.ensure_group().await.map_err(queue_error)?;
            }
            let next_look = inner.promote().await.map_err(queue_error)?;
            let block = match inner.sweep_due() {
                None => {
                    let mut n = inner
                        .claim_stale(inner.q.visibility, max, out)
                        .await
                        .map_err(queue_error)?;
                    if let Some(b) = &self.bcast {
                        n += b
                            .inner
                            .claim_stale(inner.q.visibility, max, out)
                            .await
                            .map_err(queue_error)?;
                    }
                    if n > 0 {
                        return Ok(n);
                    }
                    inner.q.block.min(inner.q.visibility / 2)
                }
                Some(until_sweep) => inner.q.block.min(until_sweep),
            };
            let block = block.min(next_look.saturating_duration_since(Instant::now()));
            let mut n = 0;
            for side in self.sides() {
                n += side
                    .collect((max, max.saturating_sub(n)), out, (false, true))
                    .await
                    .map_err(queue_error)?;
            }
            if n > 0 {
                return Ok(n);
            }
            let wake = self.sides().next().map(|s| &*s.ended);
            let sent = Instant::now();
            let entries = inner
                .read(&mut reader, max, Some(block), wake)
                .await
                .map_err(queue_error)?;
            let mut n = inner.accept(entries, out, sent).await;
            for side in self.sides() {
                // Woken by a side lane's read, or it ended meanwhile: its entries too, as
                // many as fit.
                n += side
                    .collect((max, max.saturating_sub(n)), out, (false, false))
                    .await
                    .map_err(queue_error)?;
            }
            if n > 0 {
                return Ok(n);
            }
        }
    }

    /// Claims nothing without waiting (every claim is a round trip), but reports `Closed`
    /// once a claim found the closed queue drained.
    fn try_claim(&self, _max: usize, _out: &mut Vec<Claimed>) -> Result<usize, QueueError> {
        use std::sync::atomic::Ordering;
        let drained = |i: &LaneConsumer| i.drained.load(Ordering::Acquire);
        if drained(&self.inner) && self.sides().all(|s| drained(&s.inner)) {
            return Err(QueueError::Closed(self.inner.q.topic.0.clone()));
        }
        Ok(0)
    }

    fn requires_ack(&self) -> bool {
        true
    }

    /// A drain with nothing left to read: every lane counts as drained, and the close wakes
    /// the reads that block (each returns what it had got, `CLIENT UNBLOCK`), so the next
    /// claims return what those reads claimed, then `Closed`. What the streams hold stays
    /// there, for the other consumers of the group (or this node's next start); the keyed
    /// lease is given up once this consumer holds no keyed claim.
    fn stop_claiming(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.inner.drained.store(true, Ordering::Release);
        for side in self.sides() {
            side.inner.drained.store(true, Ordering::Release);
        }
        self.inner.q.close();
        true
    }

    async fn ack(&self, claimed: &[Claimed]) -> Result<(), QueueError> {
        if let Some(lanes) = self.split(claimed) {
            let mut r = Ok(());
            for lane in lanes {
                r = r.and(Box::pin(self.ack(&lane)).await);
            }
            return r;
        }
        let Some(first) = claimed.first() else {
            return Ok(());
        };
        let inner = self.lane_of(first);
        let script = match inner.q.lane {
            Lane::Work | Lane::Keyed => &scripts::ACK,
            Lane::Broadcast => &scripts::ACK_ONLY,
        };
        let r = inner
            .settle_counted("ACK", script, claimed)
            .await
            .map(|_| ())
            .map_err(queue_error);
        inner.release_if_idle().await;
        r
    }

    async fn nack(&self, claimed: &[Claimed]) -> Result<(), QueueError> {
        if let Some(lanes) = self.split(claimed) {
            let mut r = Ok(());
            for lane in lanes {
                r = r.and(Box::pin(self.nack(&lane)).await);
            }
            return r;
        }
        let Some(first) = claimed.first() else {
            return Ok(());
        };
        let inner = self.lane_of(first);
        match inner.q.lane {
            Lane::Broadcast => {
                // A copy would go to every node again: leave the entry pending instead (no
                // longer renewed), for this node's own sweep to take again.
                let mut held = inner.held();
                for c in claimed {
                    held.remove(&c.receipt);
                }
                Ok(())
            }
            Lane::Keyed => {
                // A copy at the stream's end would lose its place in its key's order: left
                // pending, it is claimed again by the lease holder's next pass, in id order.
                keyed::give_back(inner, claimed).await;
                Ok(())
            }
            Lane::Work => inner
                .settle_counted("REQUEUE", &scripts::REQUEUE, claimed)
                .await
                .map(|_| ())
                .map_err(queue_error),
        }
    }

    /// On a work lane: the delayed retries of its entries wait in the subscription's delayed
    /// set. (A cluster-wide system topic's broadcast stream is every node's: no.)
    fn keeps_retries(&self) -> bool {
        self.inner.q.lane == Lane::Work
    }

    async fn retry_later(
        &self,
        claimed: &Claimed,
        next: &Arc<EMessage>,
        delay: Duration,
    ) -> Result<QueuedRetry, QueueError> {
        let inner = self.lane_of(claimed);
        if inner.q.lane != Lane::Work {
            // A broadcast entry is every node's; this node's copy retries in the process.
            // A keyed one keeps its place in its key's order only claimed here.
            return Err(QueueError::Backend(
                "a broadcast or keyed stream's entry retries in the process that holds it".into(),
            ));
        }
        inner
            .retry_later(claimed.receipt, next, delay)
            .await
            .map_err(queue_error)
    }

    /// A claim whose lease was confirmed less than half a visibility timeout ago, with this
    /// node beating since, is not in doubt (see `LaneConsumer::fresh`): a lookup in memory.
    fn claim_in_doubt(&self, claimed: &Claimed) -> bool {
        !self.lane_of(claimed).lease_fresh(&claimed.receipt)
    }

    /// Script `EXTEND` over every claim of the lane that is in doubt, at most one such
    /// confirmation at a time (see `LaneConsumer::confirm`); on the keyed lane, a renewal of its
    /// lease (see `keyed::confirm`).
    async fn confirm_claim(&self, claimed: &Claimed) -> Result<ClaimStatus, QueueError> {
        let lane = self.lane_of(claimed);
        let status = match &lane.lease {
            Some(lease) => keyed::confirm(lane, lease, claimed.receipt).await,
            None => lane.confirm(claimed.receipt).await,
        };
        status.map_err(queue_error)
    }

    async fn claim_stale(
        &self,
        min_idle: Duration,
        max: usize,
        out: &mut Vec<Claimed>,
    ) -> Result<usize, QueueError> {
        let mut n = self
            .inner
            .claim_stale(min_idle, max, out)
            .await
            .map_err(queue_error)?;
        if let Some(b) = &self.bcast {
            n += b
                .inner
                .claim_stale(min_idle, max.saturating_sub(n).max(1), out)
                .await
                .map_err(queue_error)?;
        }
        Ok(n)
    }
}
