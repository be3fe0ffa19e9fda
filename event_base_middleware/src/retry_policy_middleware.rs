//! [`RetryPolicyMiddleware`]: backoff for retries the handler did not time itself.

use async_trait::async_trait;
use event_base_core::{Ack, Backoff, EMessage, Middleware, Next};

/// Gives every `Ack::NoAck { retry_after: None, .. }` a wait from `backoff` (by attempt), so
/// a handler can just answer `Ack::retry()`. Answers with their own `retry_after` pass
/// through unchanged. The *decision* to retry stays the handler's; this only says how long.
///
/// ```
/// use event_base_core::Backoff;
/// use event_base_middleware::RetryPolicyMiddleware;
/// use std::time::Duration;
/// let policy = RetryPolicyMiddleware::new(
///     Backoff::exponential(Duration::from_millis(50)).max_delay(Duration::from_secs(5)).jitter(0.2),
/// );
/// # let _ = policy;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicyMiddleware {
    backoff: Backoff,
}

impl RetryPolicyMiddleware {
    /// Uses `backoff` for untimed retries.
    pub fn new(backoff: Backoff) -> Self {
        RetryPolicyMiddleware { backoff }
    }
}

#[async_trait]
impl Middleware for RetryPolicyMiddleware {
    async fn handle(&self, msg: &EMessage, next: Next<'_>) -> Ack {
        match next.run(msg).await {
            Ack::NoAck {
                retry_after: None,
                max_retries,
            } => Ack::NoAck {
                retry_after: Some(self.backoff.delay(msg.attempts)),
                max_retries,
            },
            other => other,
        }
    }
}
