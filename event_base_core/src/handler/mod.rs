//! Handlers and what wraps them: the [`EHandler`](crate::EHandler) trait, a handler with
//! its settings ([`HandlerSpec`](crate::HandlerSpec)) and the `#[handler]` registry,
//! middleware, the pipeline a worker runs, retry backoff, and what a running bus keeps of
//! each handler.
//!
//! May import: `message/`, `constant`, `error`. Nothing here knows a backend or a running bus.
//!
//! | file | holds |
//! |---|---|
//! | `ehandler.rs` | `EHandler`, `handler_fn`, `FnHandler` |
//! | `batch.rs` | `EBatchHandler`, `BatchAck`, `BatchSpec`, `batch_fn`: handlers that take several messages per call |
//! | `into_ack.rs` | `IntoAck`: what a handler function returns (`Ack`, `Result<(), E>`, `Result<Ack, E>`) as an `Ack` |
//! | `spec.rs` | `HandlerSpec`, `HandlerRegistration`, `HANDLER_REGISTRY` |
//! | `handler_override.rs` | `HandlerOverride`: settings that replace a handler's own, by name, when a bus is built |
//! | `middleware.rs` | `Middleware`, `Next`, `BoxAckFuture` |
//! | `pipeline.rs` | `Pipeline`: a handler inside its middleware |
//! | `backoff.rs` | `Backoff`: how long to wait before a failed message's next delivery |
//! | `runtime.rs` | `HandlerRuntime`: a handler as a running bus keeps it, to start workers from |

pub(crate) mod backoff;
pub(crate) mod batch;
pub(crate) mod ehandler;
pub(crate) mod handler_override;
pub(crate) mod into_ack;
pub(crate) mod middleware;
pub(crate) mod pipeline;
pub(crate) mod rate;
pub(crate) mod runtime;
pub(crate) mod spec;
