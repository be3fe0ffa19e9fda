//! # event_base
//!
//! An embeddable, in-process event bus for async Rust. Handlers are plain async functions;
//! every message is written to a write-ahead log before it is queued, so what `send` accepted
//! is delivered at least once: through failing, panicking and hanging handlers, through
//! shutdown, and (with the file WAL) through a crash.
//!
//! ```
//! use event_base::prelude::*;
//! use std::time::Duration;
//!
//! #[handler(topic = "order.created", workers = 4)]
//! async fn handle_order(msg: &EMessage) -> Ack {
//!     println!("order {} ({} bytes)", msg.id, msg.payload.0.len());
//!     Ack::Ack
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let bus = start_system!().await?;                      // MemoryWal + bounded flume queues
//!     send_msg!("order.created", b"hello".to_vec()).await?;  // payload form
//!     let msg = EMessage::new("order.created", b"x".to_vec(), DeliveryMode::Broadcast, None);
//!     TopicRouter::global().send("order.created", msg, Some(true), None).await?;
//!     bus.wait_idle(Duration::from_secs(5)).await?;         // every accepted message is final
//!     assert_eq!(bus.metrics().topic("order.created").unwrap().acked, 5); // 1 + 4 broadcast copies
//!     bus.shutdown(ShutdownStrategy::Force).await?;
//!     Ok(())
//! }
//! ```
//!
//! ## What is where
//!
//! - Everything of [`event_base_core`] is re-exported here: [`EMessage`], [`Ack`],
//!   [`EHandler`], [`EventBus`], [`TopicRouter`], the [`Wal`] and [`QueueFactory`] traits.
//! - [`wal`]: WAL backends ([`MemoryWal`]). [`queue`]: queue backends ([`FlumeQueueFactory`],
//!   [`MpmcQueueFactory`]).
//! - Macros: [`handler`], [`send_msg!`], [`start_system!`].
//! - [`builder`]: an [`EventBusBuilder`] with the default backends, for isolated systems
//!   (tests, several buses in one process).
//!
//! ## Handlers in another crate
//!
//! `#[handler]` registers through a linker section. The linker keeps a library's handlers only
//! if the binary names the library, so write `use my_handlers as _;` in the binary. The bus
//! logs every handler it registers at start (`handler registered`, with topic and workers).
//!
//! The guide in `docs/` covers the concepts, handlers, sending and more.

#![deny(unsafe_code)]

pub use event_base_core::*;
pub use event_base_macro_attr::handler;
pub use event_base_macro_func::{send_msg, start_system};
pub use event_base_queue::{FlumeQueueFactory, MpmcQueueFactory};
pub use event_base_wal::MemoryWal;
#[cfg(feature = "persistent")]
pub use event_base_wal::{PersistentWal, SyncPolicy};

/// WAL backends.
pub mod wal {
    pub use event_base_wal::*;
}

pub mod testing;

/// Built-in middleware.
pub mod middleware {
    pub use event_base_middleware::*;
}

pub use event_base_middleware::{
    LoggerMiddleware, MetricsMiddleware, RetryPolicyMiddleware, TimeoutMiddleware,
};

/// Audit writers.
pub mod audit {
    pub use event_base_audit::*;
}

/// Queue backends.
pub mod queue {
    pub use event_base_queue::*;
}

/// The names most programs need: `use event_base::prelude::*;`.
pub mod prelude {
    pub use crate::{
        handler, send_msg, start_system, Ack, DeadLetterMessage, DeadReason, DeliveryMode,
        EHandler, EMessage, EventBus, FlumeQueueFactory, HandlerSpec, JsonPayload,
        LoggerMiddleware, MemoryWal, MessagePayload, MessageTopic, Middleware, Next,
        ShutdownStrategy, TopicRouter,
    };
    pub use event_base_core::CoreError;
}

/// A builder with the default backends (`MemoryWal`, bounded flume queues) and no handlers;
/// add handlers by value, or every `#[handler]` with `.with_registered_handlers()`.
///
/// ```
/// use event_base::prelude::*;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), CoreError> {
/// let bus = event_base::builder()
///     .handler(HandlerSpec::new("echo", "echo", event_base::handler_fn(|_m: EMessage| async { Ack::Ack })))
///     .build()
///     .await?;
/// bus.send("echo", b"hi".to_vec()).await?;
/// bus.wait_idle(Duration::from_secs(5)).await?;
/// assert_eq!(bus.metrics().topic("echo").unwrap().acked, 1);
/// # Ok(()) }
/// ```
pub fn builder() -> EventBusBuilder {
    EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::default())
}

#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
    pub use linkme;

    use crate::{
        CoreError, EMessage, EventBus, EventBusBuilder, IntoMessage, MessageId, TopicRouter,
    };
    use std::time::Duration;

    /// Builds the system from `start_system!` and installs it as the global one.
    pub async fn start_global(builder: EventBusBuilder) -> Result<EventBus, CoreError> {
        if EventBus::global().is_some_and(|g| g.is_accepting()) {
            return Err(CoreError::AlreadyStarted);
        }
        let bus = builder.build().await?;
        bus.install_global()?;
        Ok(bus)
    }

    /// `send_msg!(topic, msg_or_payload)`.
    pub async fn send_msg(
        topic: impl AsRef<str>,
        message: impl IntoMessage,
    ) -> Result<MessageId, CoreError> {
        TopicRouter::global().publish(topic, message).await
    }

    /// `send_msg!(topic, msg, try_send, timeout)`.
    pub async fn send_msg_with(
        topic: impl AsRef<str>,
        message: EMessage,
        try_send: Option<bool>,
        timeout: Option<Duration>,
    ) -> Result<MessageId, CoreError> {
        TopicRouter::global()
            .send(topic, message, try_send, timeout)
            .await
    }
}

/// The guide from `docs/guide/`, included here so every example in it is compiled and run as
/// a doctest.
pub mod guide {
    #[doc = include_str!("../../docs/guide/quick-start.md")]
    pub mod quick_start {}
    #[doc = include_str!("../../docs/guide/core-concepts.md")]
    pub mod core_concepts {}
    #[doc = include_str!("../../docs/guide/handler.md")]
    pub mod handler {}
    #[doc = include_str!("../../docs/guide/middleware.md")]
    pub mod middleware {}
    #[doc = include_str!("../../docs/guide/sending.md")]
    pub mod sending {}
    #[doc = include_str!("../../docs/guide/testing.md")]
    pub mod testing {}
    #[doc = include_str!("../../docs/guide/shutdown.md")]
    pub mod shutdown {}
    #[doc = include_str!("../../docs/guide/observability.md")]
    pub mod observability {}
    #[cfg(feature = "persistent")]
    #[doc = include_str!("../../docs/guide/persistence.md")]
    pub mod persistence {}
}
