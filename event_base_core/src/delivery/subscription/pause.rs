//! [`PauseSwitch`]: whether a subscription starts new work.
//!
//! A paused subscription's workers take nothing new (they finish what they hold), and its
//! router claims nothing new from a queue that needs acks; its messages wait where they are
//! (the queue, the WAL, the backend's stream), sends go on as long as the queue has room,
//! and the topic's other handlers are not affected. A pause lasts until
//! [`EventBus::resume`](crate::EventBus::resume) or the end of the process: a restart starts
//! every subscription running.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// The pause state of one subscription.
#[derive(Debug, Default)]
pub(crate) struct PauseSwitch {
    paused: AtomicBool,
    resumed: Notify,
}

impl PauseSwitch {
    /// Whether the subscription is paused now.
    #[inline]
    pub(crate) fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    /// Pauses; `false` if it was paused already.
    pub(crate) fn pause(&self) -> bool {
        !self.paused.swap(true, Ordering::AcqRel)
    }

    /// Resumes, waking every worker and router that waits; `false` if it was running.
    pub(crate) fn resume(&self) -> bool {
        let was = self.paused.swap(false, Ordering::AcqRel);
        self.resumed.notify_waiters();
        was
    }

    /// Returns once the subscription is not paused (at once if it is not).
    pub(crate) async fn running(&self) {
        crate::delivery::subscription::bell::wait_until(&self.resumed, || !self.is_paused()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn a_waiter_wakes_on_resume_and_not_before() {
        let switch = Arc::new(PauseSwitch::default());
        assert!(switch.pause());
        assert!(!switch.pause(), "paused already");
        let waiter = tokio::spawn({
            let switch = switch.clone();
            async move { switch.running().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        assert!(switch.resume());
        waiter.await.unwrap();
        assert!(!switch.resume(), "running already");
        switch.running().await;
    }
}
