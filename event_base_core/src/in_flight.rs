//! Counting accepted messages that have not reached a final state, so `wait_idle` can wait on
//! an event instead of polling.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::error::CoreError;

#[derive(Debug, Default)]
pub(crate) struct InFlight {
    count: AtomicU64,
    idle: Notify,
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
