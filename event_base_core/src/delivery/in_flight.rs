//! Counting what this process holds and has not finished, so `wait_idle` can wait on an
//! event instead of polling.
//!
//! What counts is what *this process* holds: sends in progress, messages on its in-process
//! queues (counted by the sender when accepted, done when final), and entries it claimed
//! from a queue shared by several processes (counted at the claim, done once the entry is
//! settled or given back: [`Held`]). A copy a shared queue holds is not in flight here: the
//! process that claims it counts it, and `bus/idle.rs` asks the backend about those.
//!
//! Senders count what they add and workers count what they finish, each on a cache line of
//! its own: one shared counter would travel between the sender's core and the workers' on
//! every message. The number in flight is the difference. Only while somebody waits does a
//! finishing worker also look at the senders' count, to tell the waiters the bus went idle.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use crate::delivery::cache_padded::CachePadded;

/// What this process holds and has not finished (see the module docs): accepted messages
/// of its in-process queues not yet final (complete or dead), sends in progress, and
/// entries claimed from shared queues not yet settled. What `wait_idle`, `Drain` and
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

    /// Waits until nothing is in flight here, or `deadline` passes; returns whether nothing
    /// is. Needs a runtime (the caller checks).
    pub(crate) async fn wait_idle_until(&self, deadline: tokio::time::Instant) -> bool {
        if self.get() == 0 {
            return true;
        }
        let _waiting = Waiting::new(&self.idle_waiters);
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.get() == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.get() == 0;
            }
        }
    }
}

/// One entry claimed from a queue shared by several processes, counted in flight while this
/// process holds it: from the claim until the entry is settled (acked, or given back) and
/// every delivery made of it has ended. Shared (`Arc`) by the claim ticket and the
/// settler's message, so the last of the two to go counts it done.
#[derive(Debug)]
pub(crate) struct Held(Arc<InFlight>);

impl Held {
    /// Counts one claimed entry in flight until the returned guard is dropped.
    pub(crate) fn new(in_flight: &Arc<InFlight>) -> Arc<Held> {
        in_flight.add();
        Arc::new(Held(in_flight.clone()))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.done();
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
            async move { f.wait_idle_until(in_secs(10)).await }
        });
        tokio::task::yield_now().await;
        f.done();
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one message is still in flight");
        assert_eq!(f.get(), 1);
        f.done();
        assert!(waiter.await.expect("joined"), "idle");
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
                async move { f.wait_idle_until(in_secs(10)).await }
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
            assert!(
                waiter.await.expect("joined"),
                "the waiter saw the bus go idle"
            );
        }
    }

    #[tokio::test]
    async fn wait_idle_until_gives_up_at_the_deadline() {
        let f = InFlight::default();
        f.add();
        assert!(!f.wait_idle_until(tokio::time::Instant::now()).await);
        assert_eq!(f.get(), 1);
    }

    #[tokio::test]
    async fn a_held_entry_counts_until_its_last_holder_lets_go() {
        let f = Arc::new(InFlight::default());
        let held = Held::new(&f);
        let settling = held.clone();
        assert_eq!(f.get(), 1);
        drop(held);
        assert_eq!(f.get(), 1, "the settler still holds it");
        drop(settling);
        assert_eq!(f.get(), 0);
    }

    fn in_secs(s: u64) -> tokio::time::Instant {
        tokio::time::Instant::now() + std::time::Duration::from_secs(s)
    }
}
