//! [`LoggerMiddleware`]: a tracing span per delivery.

use std::time::Instant;

use async_trait::async_trait;
use event_base_core::{Ack, EMessage, Middleware, Next};
use tracing::{field, Instrument};

/// Wraps each delivery in a span `event_base.message` with the fields `id`, `topic`,
/// `attempt`, `outcome` (`ack`, `no_ack`, `dead`) and `duration_us`, and emits one event when
/// it ends: INFO for an ack, WARN for a retry, ERROR for a dead letter.
///
/// ```
/// use event_base_core::{handler_fn, Ack, EMessage, HandlerSpec};
/// use event_base_middleware::LoggerMiddleware;
/// let spec = HandlerSpec::new("h", "orders", handler_fn(|_m: EMessage| async { Ack::Ack }))
///     .middleware(LoggerMiddleware);
/// # let _ = spec;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct LoggerMiddleware;

#[async_trait]
impl Middleware for LoggerMiddleware {
    async fn handle(&self, msg: &EMessage, next: Next<'_>) -> Ack {
        let span = tracing::info_span!(
            "event_base.message",
            id = %msg.id,
            topic = %msg.topic,
            attempt = msg.attempts,
            outcome = field::Empty,
            duration_us = field::Empty,
        );
        let started = Instant::now();
        let ack = next.run(msg).instrument(span.clone()).await;
        let took = started.elapsed().as_micros() as u64;
        span.record("outcome", ack.kind());
        span.record("duration_us", took);
        span.in_scope(|| match &ack {
            Ack::Ack => tracing::info!(outcome = "ack", duration_us = took, "message handled"),
            Ack::NoAck { retry_after, .. } => {
                tracing::warn!(outcome = "no_ack", ?retry_after, duration_us = took, "message will be retried")
            }
            Ack::Dead { dead_reason } => {
                tracing::error!(outcome = "dead", reason = %dead_reason, duration_us = took, "message dead-lettered")
            }
        });
        ack
    }
}
