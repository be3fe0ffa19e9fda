//! Built-in middleware for event_base.
//!
//! Each is a value implementing [`Middleware`](event_base_core::Middleware): attach it to one
//! handler (`#[handler(middleware = [LoggerMiddleware])]`, `HandlerSpec::middleware`) or to
//! every handler (`EventBusBuilder::middleware`). The first listed is the outermost.
//!
//! | middleware | does |
//! |---|---|
//! | [`LoggerMiddleware`] | a tracing span per delivery (id, topic, attempt, outcome, duration) and one event when it ends |
//! | [`TimeoutMiddleware`] | bounds the rest of the chain; past the limit it answers a configurable `Ack` (default: retry) |
//! | [`MetricsMiddleware`] | counts deliveries and outcomes and times them, per instance; readable with `snapshot()`, exported to the `metrics` facade with the `metrics` feature |
//! | [`RetryPolicyMiddleware`] | gives `NoAck` without `retry_after` a wait from a [`Backoff`](event_base_core::Backoff) |

#![deny(unsafe_code)]

mod logger_middleware;
mod metrics_middleware;
mod retry_policy_middleware;
mod timeout_middleware;

pub use logger_middleware::LoggerMiddleware;
pub use metrics_middleware::{MetricsMiddleware, MiddlewareMetrics};
pub use retry_policy_middleware::RetryPolicyMiddleware;
pub use timeout_middleware::TimeoutMiddleware;
