//! Counting accepted messages that have not reached a final state, so `wait_idle` can wait on
//! an event instead of polling.
//!
//! Senders count what they add and workers count what they finish, each on a cache line of
//! its own: one shared counter would travel between the sender's core and the workers' on
//! every message. The number in flight is the difference. Only while somebody waits does a
//! finishing worker also look at the senders' count, to tell the waiters the bus went idle.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::bus::cache_padded::CachePadded;
use crate::error::CoreError;

/// Accepted messages not yet final (complete or dead): what `wait_idle`, `Drain` and
/// `Timeout` wait on, without polling.
///
/// Senders bump `added` and workers `done`, each on a cache line of its own; the number in
/// flight is the difference. Waiters register first, so a finishing worker looks for
/// idleness, and notifies, only while somebody waits.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    /// Messages accepted (bumped by senders).
    added: CachePadded<AtomicU64>,
    /// Messages that reached a final state (bumped by workers).
    done: CachePadded<AtomicU64>,
    /// Tasks waiting in `wait_idle`; only then does a finishing worker check for idleness.
    idle_waiters: AtomicUsize,
    idle: Notify,
    /// Of the messages in flight, how many wait on a timer (delayed delivery, retry backoff).
    timers: AtomicU64,
    /// Tasks waiting in `wait_until`; only then does every change notify `changed`.
    watchers: AtomicUsize,
    changed: Notify,
}

/// Counts a waiter for as long as it waits, dropped future included.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        // SeqCst pairs with the load in `done`/`changed_if_watched`: either the waiter's
        // next read of the counts sees the change, or the changer sees the waiter.
        count.fetch_add(1, Ordering::SeqCst);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl InFlight {
    #[inline]
    pub(crate) fn add(&self) {
        self.added.fetch_add(1, Ordering::SeqCst);
    }

    #[inline]
    pub(crate) fn done(&self) {
        let done = self.done.fetch_add(1, Ordering::SeqCst) + 1;
        // Whoever finishes the last message added so far sees the two counts meet.
        if self.idle_waiters.load(Ordering::SeqCst) > 0 && self.added.load(Ordering::SeqCst) == done
        {
            self.idle.notify_waiters();
        }
        self.changed_if_watched();
    }

    /// Lets waiters re-check their condition (something they read besides the counts changed).
    pub(crate) fn poke(&self) {
        self.changed_if_watched();
    }

    #[inline]
    fn changed_if_watched(&self) {
        if self.watchers.load(Ordering::SeqCst) > 0 {
            self.changed.notify_waiters();
        }
    }

    pub(crate) fn timer_added(&self) {
        self.timers.fetch_add(1, Ordering::AcqRel);
        self.changed_if_watched();
    }

    pub(crate) fn timer_fired(&self) {
        self.timers.fetch_sub(1, Ordering::AcqRel);
        self.changed_if_watched();
    }

    /// Messages in flight that wait on a timer.
    pub(crate) fn timers(&self) -> u64 {
        self.timers.load(Ordering::Acquire)
    }

    /// Waits until `ready(in_flight, waiting_on_timers)` holds or `deadline` passes; returns
    /// whether it held.
    pub(crate) async fn wait_until(
        &self,
        ready: impl Fn(u64, u64) -> bool,
        deadline: tokio::time::Instant,
    ) -> bool {
        let _watching = Waiting::new(&self.watchers);
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if ready(self.get(), self.timers()) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return ready(self.get(), self.timers());
            }
        }
    }

    pub(crate) fn get(&self) -> u64 {
        // Done first: a message is added before it is done, so this order never reads
        // more done than added.
        let done = self.done.load(Ordering::SeqCst);
        self.added.load(Ordering::SeqCst).saturating_sub(done)
    }

    pub(crate) async fn wait_idle(&self, timeout: Duration) -> Result<(), CoreError> {
        if self.get() == 0 {
            return Ok(());
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(CoreError::NoRuntime);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let _waiting = Waiting::new(&self.idle_waiters);
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let n = self.get();
            if n == 0 {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(CoreError::IdleTimeout {
                    in_flight: self.get(),
                    after: timeout,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn wait_idle_returns_only_once_everything_is_done() {
        let f = Arc::new(InFlight::default());
        f.add();
        f.add();
        let waiter = tokio::spawn({
            let f = f.clone();
            async move { f.wait_idle(Duration::from_secs(10)).await }
        });
        tokio::task::yield_now().await;
        f.done();
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one message is still in flight");
        assert_eq!(f.get(), 1);
        f.done();
        waiter.await.expect("joined").expect("idle");
        assert_eq!(f.get(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_finishers_and_a_waiter_never_miss_the_last_one() {
        for _ in 0..200 {
            let f = Arc::new(InFlight::default());
            for _ in 0..64 {
                f.add();
            }
            let waiter = tokio::spawn({
                let f = f.clone();
                async move { f.wait_idle(Duration::from_secs(10)).await }
            });
            let finishers: Vec<_> = (0..4)
                .map(|_| {
                    let f = f.clone();
                    tokio::spawn(async move {
                        for _ in 0..16 {
                            f.done();
                            tokio::task::yield_now().await;
                        }
                    })
                })
                .collect();
            for t in finishers {
                t.await.expect("joined");
            }
            waiter
                .await
                .expect("joined")
                .expect("the waiter saw the bus go idle");
        }
    }

    #[tokio::test]
    async fn wait_idle_times_out_saying_how_many_are_left() {
        let f = InFlight::default();
        f.add();
        let err = f
            .wait_idle(Duration::from_millis(10))
            .await
            .expect_err("one is in flight");
        assert!(
            matches!(err, CoreError::IdleTimeout { in_flight: 1, .. }),
            "{err:?}"
        );
    }
}
