//! [`LoggerMiddleware`]: one log line per delivery, recorded into the delivery's span.

use std::time::Instant;

use async_trait::async_trait;
use event_base_core::constant::target;
use event_base_core::{Ack, EMessage, Middleware, Next};

/// The name of the span the worker opens around every delivery.
const DELIVERY_SPAN: &str = "event_base.handle";

/// Logs one event per delivery, with its outcome and duration, and records them into the
/// delivery's span.
///
/// The worker already runs every delivery inside one span, `event_base.handle` (target
/// `event_base::delivery`, fields `id`, `topic`, `attempt`, `trace_id`, `correlation_id`).
/// This middleware opens no second span: it records `outcome` (`ack`, `no_ack`, `dead`) and
/// `duration_us` into that span, and emits one INFO event, target `event_base::middleware`,
/// carrying `id`, `topic`, `attempt`, `outcome` and `duration_us` itself (so the line is
/// complete even where the span is filtered out).
///
/// Every outcome is logged at INFO: a `NoAck` is a normal path (the bus retries it), and a
/// dead letter is logged once by the bus itself, at WARN, target `event_base::delivery`.
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
        let started = Instant::now();
        let ack = next.run(msg).await;
        let took = started.elapsed().as_micros() as u64;
        let outcome = ack.kind();
        let span = tracing::Span::current();
        if span.metadata().is_some_and(|m| m.name() == DELIVERY_SPAN) {
            span.record("outcome", outcome);
            span.record("duration_us", took);
        }
        let (id, topic, attempt) = (&*msg.id, msg.topic.as_str(), msg.attempts);
        match &ack {
            Ack::Ack => {
                tracing::info!(target: target::MIDDLEWARE, id, topic, attempt, outcome, duration_us = took, "message handled")
            }
            Ack::NoAck { retry_after, .. } => {
                tracing::info!(target: target::MIDDLEWARE, id, topic, attempt, outcome, ?retry_after, duration_us = took, "handler answered NoAck")
            }
            Ack::Dead { dead_reason } => {
                tracing::info!(target: target::MIDDLEWARE, id, topic, attempt, outcome, reason = %dead_reason, duration_us = took, "handler answered Dead")
            }
        }
        ack
    }
}
