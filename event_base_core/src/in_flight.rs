//! Counting accepted messages that have not reached a final state, so `wait_idle` can wait on
//! an event instead of polling.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::error::CoreError;

#[derive(Debug, Default)]
pub(crate) struct InFlight {
    count: AtomicU64,
    idle: Notify,
    /// Of the messages in flight, how many wait on a timer (delayed delivery, retry backoff).
    timers: AtomicU64,
    /// Tasks waiting in `wait_until`; only then does every change notify `changed`.
    watchers: AtomicUsize,
    changed: Notify,
}

impl InFlight {
    #[inline]
    pub(crate) fn add(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    #[inline]
    pub(crate) fn done(&self) {
        if self.count.fetch_sub(1, Ordering::AcqRel) == 1 {
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
        if self.watchers.load(Ordering::Acquire) > 0 {
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
        self.watchers.fetch_add(1, Ordering::AcqRel);
        let held = loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if ready(self.get(), self.timers()) {
                break true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                break ready(self.get(), self.timers());
            }
        };
        self.watchers.fetch_sub(1, Ordering::AcqRel);
        held
    }

    pub(crate) fn get(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    pub(crate) async fn wait_idle(&self, timeout: Duration) -> Result<(), CoreError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let n = self.get();
            if n == 0 {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(CoreError::Timeout {
                    operation: format!("wait_idle ({} messages still in flight)", self.get()),
                    after: timeout,
                });
            }
        }
    }
}
