//! [`KeyedLease`]: which consumer reads a subscription's keyed stream.
//!
//! Order per key across processes rests on one reader: a subscription's keyed messages
//! (`ordering_key`) go to its keyed stream, `<prefix>:{<topic>}:k:<handler>`, and only the
//! consumer holding the subscription's keyed lease, `<prefix>:{<topic>}:kl:<handler>`,
//! reads it. Its router puts them in their keys' lines in stream order, so within that
//! process the workers run different keys in parallel and each key in order
//! (`event_base_core`'s `key_order.rs`).
//!
//! - **Taking** (script `TAKE_LEASE`): `SET … NX PX <ttl>` with a value new at each taking,
//!   `<consumer>#<n>`: the fencing token. A consumer that does not hold it tries again when
//!   the holder's time to live runs out (at most a heartbeat later).
//! - **Holding**: renewed with every heartbeat of the node (`node.rs`, script
//!   `RENEW_LEASE`, only while it holds the same value); its time to live is three
//!   heartbeats, as a node's. Every read of the keyed stream is fenced by it (script
//!   `READ_KEYED`: the lease checked, then a non-blocking `XREADGROUP` in the same script;
//!   waiting for more is a plain `XREAD BLOCK`, which claims nothing), so a read sent
//!   before the lease lapsed cannot deliver after another consumer took it.
//! - **Taking over**: a consumer that has just taken the lease first claims the keyed
//!   stream's pending entries it does not hold (its predecessor's, in id order: script
//!   `TAKE_KEYED`, fenced the same way) before it reads new ones: every pending entry is
//!   older than every unread one, so stream order is kept across the change.
//! - **Giving up**: once its subscription closed and it holds no keyed claim, a consumer
//!   deletes the lease (script `DROP_LEASE`), and the next reader takes over at once
//!   rather than after the time to live.
//! - **Losing it** (a process paused or cut off past the time to live): its renewal or a
//!   fenced read finds another value. Claims it made before are then in doubt
//!   ([`fresh`](KeyedLease::fresh)): the bus confirms each before its handler starts, and
//!   drops those another consumer took over.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::RedisError;
use crate::link::Link;
use crate::reply;
use crate::scripts;

/// What the holder of the lease knows (behind [`KeyedLease::lock`]: the keyed stream is
/// read, and the lease taken, renewed and found lost, one at a time).
#[derive(Debug)]
pub(crate) struct LeaseState {
    /// The value the lease is held with; `None` while not held.
    pub(crate) value: Option<String>,
    /// Set when the lease is taken (or an entry given back): the pending entries this
    /// consumer does not hold are claimed, in id order, before new ones are read.
    pub(crate) rescan: bool,
    /// Where that pass goes on from (`-`: the start).
    pub(crate) cursor: String,
}

/// A subscription's keyed lease as one consumer sees it (see the module docs).
pub(crate) struct KeyedLease {
    link: Link,
    /// The lease's key.
    pub(crate) key: String,
    /// The consumer that takes it.
    consumer: String,
    /// Its time to live: three heartbeats.
    ttl: Duration,
    /// How long a waiting consumer sleeps at most before it tries again: a heartbeat.
    retry: Duration,
    /// Takings so far, for the next value.
    taken: AtomicU64,
    state: tokio::sync::Mutex<LeaseState>,
    /// Until when claims made under the current holding need no confirmation: half the
    /// time to live after its last renewal was sent (`None`: not held).
    fresh_until: Mutex<Option<Instant>>,
    /// When the lease was last found lost: a claim made before may be another's now.
    lost_at: Mutex<Option<Instant>>,
    /// Given up for good (the subscription closed): not taken again.
    released: AtomicBool,
}

/// What [`KeyedLease::take`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taking {
    /// This consumer holds it now.
    Taken,
    /// Another one holds it: look again after this long.
    Busy(Duration),
}

impl KeyedLease {
    pub(crate) fn new(
        link: Link,
        key: String,
        consumer: String,
        heartbeat: Duration,
        beats: u32,
    ) -> Self {
        KeyedLease {
            link,
            key,
            consumer,
            ttl: heartbeat * beats,
            retry: heartbeat,
            taken: AtomicU64::new(0),
            state: tokio::sync::Mutex::new(LeaseState {
                value: None,
                rescan: false,
                cursor: "-".to_owned(),
            }),
            fresh_until: Mutex::new(None),
            lost_at: Mutex::new(None),
            released: AtomicBool::new(false),
        }
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    fn fresh_until(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.fresh_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lost_at(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.lost_at.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The holder's state, one user at a time.
    pub(crate) async fn lock(&self) -> tokio::sync::MutexGuard<'_, LeaseState> {
        self.state.lock().await
    }

    /// Whether it was given up for good.
    pub(crate) fn released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// Takes the lease if nobody holds it (`st.value` is `None`).
    pub(crate) async fn take(&self, st: &mut LeaseState) -> Result<Taking, RedisError> {
        if self.released() {
            return Ok(Taking::Busy(self.retry));
        }
        let n = self.taken.fetch_add(1, Ordering::Relaxed) + 1;
        let value = format!("{}#{n}", self.consumer);
        let cmd = scripts::evalsha(
            &scripts::TAKE_LEASE,
            &[&self.key],
            (value.as_str(), self.ttl_ms()),
        );
        let sent = Instant::now();
        let v = self.link.run("TAKE_LEASE", cmd).await?;
        let r = reply::ints("TAKE_LEASE", &v)?;
        if r.first() == Some(&1) {
            tracing::info!(target: "event_base::redis", lease = %self.key, holder = %value, "took the keyed lease: this consumer reads the subscription's keyed messages now, after the pending ones it does not hold");
            st.value = Some(value);
            st.rescan = true;
            st.cursor = "-".to_owned();
            *self.fresh_until() = Some(sent + self.ttl / 2);
            return Ok(Taking::Taken);
        }
        // The holder's time left (-1: no expiry, set by hand; -2: just gone).
        let wait = match r.get(1).copied().unwrap_or(-1) {
            -2 => Duration::from_millis(1),
            ms if ms >= 0 => Duration::from_millis(ms as u64 + 1).min(self.retry),
            _ => self.retry,
        };
        Ok(Taking::Busy(wait))
    }

    /// The lease was found lost (another value, or none): claims made before are in doubt,
    /// and a next taking starts with a takeover pass.
    pub(crate) fn lost(&self, st: &mut LeaseState) {
        if let Some(value) = st.value.take() {
            tracing::warn!(target: "event_base::redis", lease = %self.key, holder = %value, "lost the keyed lease (not renewed in time: was this process paused or cut off?); its keyed claims are confirmed before their handlers start");
        }
        st.rescan = true;
        st.cursor = "-".to_owned();
        *self.fresh_until() = None;
        *self.lost_at() = Some(Instant::now());
    }

    /// Renews the lease if held (with every heartbeat, and to confirm claims in doubt).
    /// Returns whether it is held now.
    pub(crate) async fn renew(&self) -> Result<bool, RedisError> {
        let mut st = self.lock().await;
        self.renew_locked(&mut st).await
    }

    /// [`renew`](Self::renew) with the state already locked.
    pub(crate) async fn renew_locked(&self, st: &mut LeaseState) -> Result<bool, RedisError> {
        let Some(value) = st.value.clone() else {
            return Ok(false);
        };
        let cmd = scripts::evalsha(
            &scripts::RENEW_LEASE,
            &[&self.key],
            (value.as_str(), self.ttl_ms()),
        );
        let sent = Instant::now();
        let v = self.link.run("RENEW_LEASE", cmd).await?;
        if reply::int("RENEW_LEASE", &v)? == 1 {
            *self.fresh_until() = Some(sent + self.ttl / 2);
            Ok(true)
        } else {
            self.lost(st);
            Ok(false)
        }
    }

    /// Whether a keyed claim made at `at` is known to be this consumer's at `now` without
    /// asking Redis: the lease was not lost since, and was renewed less than half its time
    /// to live ago (renewed every heartbeat, a third of it, it always is while the process
    /// runs).
    pub(crate) fn fresh(&self, at: Instant, now: Instant) -> bool {
        self.lost_at().is_none_or(|lost| at > lost) && self.fresh_until().is_some_and(|u| now < u)
    }

    /// Whether the lease was lost after a claim made at `at`.
    pub(crate) fn lost_since(&self, at: Instant) -> bool {
        self.lost_at().is_some_and(|lost| at <= lost)
    }

    /// Gives the lease up for good: the subscription closed and holds no keyed claim.
    pub(crate) async fn release(&self) {
        if self.released.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut st = self.lock().await;
        *self.fresh_until() = None;
        let Some(value) = st.value.take() else {
            return;
        };
        let cmd = scripts::evalsha(&scripts::DROP_LEASE, &[&self.key], value.as_str());
        match self.link.run("DROP_LEASE", cmd).await {
            Ok(_) => {
                tracing::info!(target: "event_base::redis", lease = %self.key, holder = %value, "gave up the keyed lease; another consumer takes over the keyed messages");
            }
            Err(e) => {
                tracing::warn!(target: "event_base::redis", lease = %self.key, error = %e, "could not give up the keyed lease; another consumer takes over once it expires");
            }
        }
    }

    /// The lease's value if held, without waiting (for a drop, which cannot wait).
    pub(crate) fn release_detached(&self) {
        if self.released.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(mut st) = self.state.try_lock() else {
            return; // in use: it expires
        };
        if let Some(value) = st.value.take() {
            let cmd = scripts::evalsha(&scripts::DROP_LEASE, &[&self.key], value.as_str());
            let _ = self.link.push("DROP_LEASE", cmd, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease() -> KeyedLease {
        let link = Link::open(
            "redis://127.0.0.1:1",
            crate::link::Timeouts {
                connect: Duration::from_millis(10),
                response: Duration::from_millis(10),
            },
        )
        .unwrap();
        KeyedLease::new(
            link,
            "eb:{t}:kl:h".into(),
            "c".into(),
            Duration::from_secs(1),
            3,
        )
    }

    #[test]
    fn a_claim_made_before_the_lease_was_lost_is_in_doubt_one_made_after_a_new_taking_is_not() {
        let l = lease();
        let t0 = Instant::now();
        *l.fresh_until() = Some(t0 + Duration::from_millis(1500));
        assert!(l.fresh(t0, t0 + Duration::from_millis(10)));
        assert!(
            !l.fresh(t0, t0 + Duration::from_millis(1600)),
            "not renewed for half the time to live"
        );
        let mut st = LeaseState {
            value: Some("c#1".into()),
            rescan: false,
            cursor: "-".into(),
        };
        l.lost(&mut st);
        assert!(st.rescan && st.value.is_none());
        assert!(l.lost_since(t0));
        // Taken again: fresh for claims made after the loss only.
        let after = Instant::now() + Duration::from_millis(1);
        *l.fresh_until() = Some(after + Duration::from_millis(1500));
        assert!(!l.fresh(t0, after));
        assert!(l.fresh(after, after + Duration::from_millis(10)));
    }
}
