//! [`GroupCommit`]: how long the writer waits for company before an `fdatasync` under
//! [`SyncPolicy::Always`](crate::SyncPolicy::Always).
//!
//! With `Always` the writer syncs as soon as it holds a record someone waits on, so one sender
//! never waits for anything but its own `fdatasync`. With many senders that alone shares
//! syncs badly: the moment a sync returns, the writer answers everyone, and the first of them
//! to send again wakes it at once. It then syncs that one or two records while the rest
//! arrive, and the senders settle into two or more groups taking turns, each sync carrying a
//! fraction of them.
//!
//! The cure is to remember how many waiters the last sync answered. When fewer than that are
//! waiting, the writer waits a little for the rest, at most as long as the last sync took
//! (the same order as the wait it saves, so the worst case is one sync's worth of latency).
//! A lone sender is never delayed: its last group was one. When senders go away the
//! group shrinks to what came within the wait, so the delay does not stick.

use std::time::{Duration, Instant};

/// The shortest wait worth making: below this a wake-up costs more than it gains.
const MIN_WAIT: Duration = Duration::from_micros(20);
/// The longest: a very slow disk should not stall a small group for long.
const MAX_WAIT: Duration = Duration::from_millis(2);

/// What the last synced group looked like.
#[derive(Debug, Default)]
pub(crate) struct GroupCommit {
    /// Waiters answered by the last sync.
    last_group: usize,
    /// How long that sync took.
    last_sync: Duration,
}

impl GroupCommit {
    /// How many waiters to gather before syncing, and until when to wait for them; `None`
    /// when `have` waiters need no company.
    pub(crate) fn wait_for(&self, have: usize) -> Option<(usize, Instant)> {
        if have == 0 || have >= self.last_group {
            return None;
        }
        let wait = self.last_sync.clamp(MIN_WAIT, MAX_WAIT);
        Some((self.last_group, Instant::now() + wait))
    }

    /// Waiters answered by the last sync.
    pub(crate) fn last_group(&self) -> usize {
        self.last_group
    }

    /// Remembers a sync that answered `waiters` and took `took`.
    pub(crate) fn synced(&mut self, waiters: usize, took: Duration) {
        self.last_group = waiters;
        self.last_sync = took;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_sender_never_waits() {
        let mut g = GroupCommit::default();
        assert!(g.wait_for(1).is_none());
        g.synced(1, Duration::from_millis(4));
        assert!(g.wait_for(1).is_none());
    }

    #[test]
    fn a_smaller_group_than_last_time_waits_at_most_one_sync() {
        let mut g = GroupCommit::default();
        g.synced(64, Duration::from_micros(300));
        let (target, until) = g.wait_for(3).expect("waits");
        assert_eq!(target, 64);
        assert!(until <= Instant::now() + Duration::from_micros(300));
        assert!(g.wait_for(64).is_none());
        assert!(
            g.wait_for(0).is_none(),
            "nothing to sync, nothing to wait for"
        );
    }

    #[test]
    fn the_wait_is_bounded_on_a_slow_disk() {
        let mut g = GroupCommit::default();
        g.synced(8, Duration::from_secs(1));
        let (_, until) = g.wait_for(1).expect("waits");
        assert!(until <= Instant::now() + MAX_WAIT);
    }
}
