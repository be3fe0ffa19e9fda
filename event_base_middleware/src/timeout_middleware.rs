//! [`TimeoutMiddleware`]: a time limit on the rest of the chain.

use std::time::Duration;

use async_trait::async_trait;
use event_base_core::constant::MAX_WAIT;
use event_base_core::{Ack, EMessage, Middleware, Next};

/// Cancels the rest of the chain (inner middleware and handler) after `limit` and answers
/// `on_timeout` instead (default: `Ack::retry()`, so the handler's retry policy applies).
///
/// The handler's own `timeout` setting does the same inside the worker and ends in
/// `DeadReason::Timeout`; use this middleware to bound only part of a chain, or to choose the
/// answer.
///
/// ```
/// use event_base_core::{Ack, DeadReason};
/// use event_base_middleware::TimeoutMiddleware;
/// use std::time::Duration;
/// let strict = TimeoutMiddleware::new(Duration::from_secs(2))
///     .on_timeout(Ack::Dead { dead_reason: DeadReason::Timeout });
/// # let _ = strict;
/// ```
#[derive(Debug, Clone)]
pub struct TimeoutMiddleware {
    limit: Duration,
    on_timeout: Ack,
}

impl TimeoutMiddleware {
    /// Limits the chain to `limit`. A limit of
    /// [`MAX_WAIT`](event_base_core::constant::MAX_WAIT) (30 years) or more is none: the chain
    /// runs unbounded.
    pub fn new(limit: Duration) -> Self {
        TimeoutMiddleware {
            limit,
            on_timeout: Ack::retry(),
        }
    }

    /// The answer when the limit passes.
    pub fn on_timeout(mut self, ack: Ack) -> Self {
        self.on_timeout = ack;
        self
    }
}

#[async_trait]
impl Middleware for TimeoutMiddleware {
    async fn handle(&self, msg: &EMessage, next: Next<'_>) -> Ack {
        // Checked: a limit the clock cannot reach is none (`Instant + Duration::MAX` panics).
        let deadline = (self.limit < MAX_WAIT)
            .then(|| tokio::time::Instant::now().checked_add(self.limit))
            .flatten();
        let Some(deadline) = deadline else {
            return next.run(msg).await;
        };
        match tokio::time::timeout_at(deadline, next.run(msg)).await {
            Ok(ack) => ack,
            Err(_) => {
                tracing::info!(target: event_base_core::constant::target::MIDDLEWARE, id = %msg.id, topic = %msg.topic, limit = ?self.limit, "handler timed out (TimeoutMiddleware)");
                self.on_timeout.clone()
            }
        }
    }
}
