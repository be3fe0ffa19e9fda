//! # event_base
//!
//! An embeddable, in-process event bus for async Rust. Handlers are plain async functions;
//! every message is written to a write-ahead log before it is queued, so what `send` accepted
//! is delivered at least once: through failing, panicking and hanging handlers, through
//! shutdown, and (with the file WAL) through a crash.
//!
// The example needs the default features; without them it is shown but not compiled.
#![cfg_attr(all(feature = "memory", feature = "macro"), doc = "```")]
#![cfg_attr(not(all(feature = "memory", feature = "macro")), doc = "```ignore")]
//! use event_base::prelude::*;
//! use std::time::Duration;
//!
//! #[handler(topic = "order.created", workers = 4)]
//! async fn handle_order(msg: &EMessage) -> Ack {
//!     println!("order {} ({} bytes)", msg.id, msg.payload.as_bytes().len());
//!     Ack::Ack
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let bus = start_system!().await?;                      // MemoryWal + bounded flume queues
//!     send_msg!("order.created", b"hello".to_vec()).await?;  // payload form
//!     let msg = EMessage::new("order.created", b"x".to_vec(), DeliveryMode::Broadcast, None);
//!     // Some(true): try_send (fail at once if the queue is full); None: no send timeout.
//!     TopicRouter::global().send("order.created", msg, Some(true), None).await?;
//!     bus.wait_idle(Duration::from_secs(5)).await?;         // every accepted message is final
//!     assert_eq!(bus.metrics().topic("order.created").unwrap().acked, 5); // 1 + 4 broadcast copies
//!     bus.shutdown(ShutdownStrategy::Force).await?;
//!     Ok(())
//! }
//! ```
//!
//! ## Start here
//!
//! New to it? Read the [guide](crate::guide), in order, starting with its quick start. The
//! names most programs need are in [`prelude`]: `use event_base::prelude::*;`.
//!
//! ## What you do, and where it is
//!
//! **Send.** [`send_msg!`](crate::send_msg) on the global system, [`EventBus::send`],
//! [`EventBus::send_with`] with [`SendOptions`] (try-send, timeout), [`EventBus::send_json`],
//! [`EventBus::send_batch`]; [`TopicRouter`] for the same from anywhere. A message is an
//! [`EMessage`] (payload [`MessagePayload`], [`MessageMetadata`], [`DeliveryMode`]); sends
//! answer a [`MessageId`] or a [`CoreError`].
//!
//! **Handle.** [`#[handler]`](crate::handler) on an `async fn`, or a [`HandlerSpec`] built
//! from [`handler_fn`] or your own [`EHandler`] ([`EBatchHandler`] for batches). A handler
//! answers an [`Ack`]; a message it gives up on becomes a [`DeadLetterMessage`] with a
//! [`DeadReason`]. Typed payloads: [`Json`]. Code around every delivery: [`Middleware`],
//! [`Next`], and the built-in layers in `middleware` (feature `middleware`).
//!
//! **Configure and start.** [`start_system!`](crate::start_system) for the process-wide
//! system; [`builder()`] or [`EventBus::builder`] ([`EventBusBuilder`]) for isolated ones. The
//! backends: a WAL (`MemoryWal`, `PersistentWal` with feature `persistent`,
//! `RedisWal` with `redis`, `PostgresQueueWal` and `PostgresWal` with `postgres`) and a queue
//! factory (`FlumeQueueFactory`, `MpmcQueueFactory`, `RedisQueueFactory`,
//! `PostgresQueueFactory`). Node identity: [`set_node_name`], [`NodeType`]. Defaults:
//! [`constant`].
//!
//! **Operate.** [`EventBus::wait_idle`], [`EventBus::shutdown`] with a [`ShutdownStrategy`]
//! (and its [`ShutdownReport`]), [`EventBus::run_until_signal`]; dead letters with
//! [`EventBus::dead_letters`] and [`EventBus::replay_dead_letter`]; scaling with
//! [`EventBus::add_workers`]; what is going on with [`EventBus::metrics`]
//! ([`MetricsSnapshot`]), [`EventBus::audit`] ([`AuditLog`]), [`EventBus::workers`]
//! ([`WorkerInfo`]) and [`EventBus::wal_stats`]. Over the network: the gRPC API and `ebctl`
//! (`grpc`, feature `gRPC`).
//!
//! **Test.** `testing::TestBus` (feature `memory`): publish to your handlers, settle without
//! sleeps, and assert on acks, retries and dead letters.
//!
//! **Write a backend.** [`backend`]: the [`Wal`](backend::Wal) and
//! [`QueueFactory`](backend::QueueFactory) contracts and the types that cross them, kept out
//! of the names above.
//!
//! ## Features
//!
//! Each feature is a real gate: what it names is compiled only when it is on.
//!
//! | feature | turns on |
//! |---|---|
//! | `memory` (default) | `MemoryWal`; the in-memory queues `FlumeQueueFactory` and `MpmcQueueFactory` (the `queue` module); the default backends of `start_system!()` and `event_base::builder()`; `testing::TestBus` |
//! | `macro` (default) | `#[handler]`, `send_msg!`, `start_system!` |
//! | `persistent` | `PersistentWal`, `PersistentWalBuilder`, `RecoveryReport`, `SyncPolicy`: the file-backed, crash-safe WAL |
//! | `middleware` | the `middleware` module: `LoggerMiddleware`, `MetricsMiddleware`, `RetryPolicyMiddleware`, `TimeoutMiddleware` (the `Middleware` trait itself is always there) |
//! | `audit` | the `audit` module: the writers `JsonLinesWriter`, `TracingWriter` (the in-memory audit ring, `bus.audit()`, is always there) |
//! | `redis` | the `redis` module and `RedisQueueFactory`, `RedisWal`, `RedisError`: Redis Streams backends, so that many processes share one bus |
//! | `postgres` | the `postgres` module and `PostgresQueueFactory`, `PostgresQueueWal`, `PostgresWal`, `PostgresError`: PostgreSQL backends, so that many processes share one bus on one database, with a send inside the application's transaction |
//! | `gRPC` | the `grpc` module (`event_base_grpc`): the gRPC management server (`GrpcServer`), its client, and the `ebctl` binary in that crate |
//! | `gRPC-tls` | `gRPC` with TLS (rustls): `GrpcServerBuilder::tls`, `ClientOptions::tls_ca` and `https://` addresses |
//! | `metrics` | export of counters and latencies to the `metrics` facade (and the metrics middleware's, with `middleware`) |
//! | `trace` | `TraceLayer`: tracing events as `TraceRecord`s on `_system.trace` |
//! | `otel` | W3C trace context: a send writes the current OpenTelemetry span into the message's `traceparent`/`tracestate` headers, and its delivery's span is that span's child (with `tracing-opentelemetry`'s layer) |
//! | `config` | the `config` module: a TOML file with `EB_…` environment variables into the builder (`event_base::builder().config(path)`, `start_system!(config: path)`); turns on `memory` |
//! | `full` | all of the above |
//!
//! Without `memory` there are no default backends: `start_system!` needs both `wal:` and
//! `queue:` (leaving one out is a compile error that says so), and `event_base::builder()`
//! and `testing` are absent; use `EventBus::builder().wal(..).queue(..)`.
//!
//! ## Handlers in another crate
//!
//! `#[handler]` registers through a linker section. The linker keeps a library's handlers only
//! if the binary names the library, so write `use my_handlers as _;` in the binary. The bus
//! logs every handler it registers at start (`handler registered`, with topic and workers).
//!
//! The guide covers the concepts, handlers, sending and more: the `guide` module here (its pages
//! are the `guide/` folder of this package; in the repository, `docs/README.md` is the index).
//!
//! ## Documentation with every feature
//!
//! Items behind a feature appear in the API docs only when it is on. To read them all locally:
//! `cargo doc -p event_base --features full --no-deps --open`.

#![deny(unsafe_code)]
// docs.rs (`--cfg docsrs`, nightly) marks what each feature adds; stable builds ignore it.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use event_base_core::*;
// Named as well as globbed, so that readers of this file see where it comes from.
pub use event_base_core::backend;
// Named too, so that its docs say which feature it needs (a glob re-export carries no badge).
#[cfg(feature = "trace")]
#[cfg_attr(docsrs, doc(cfg(feature = "trace")))]
pub use event_base_core::TraceLayer;
#[cfg(feature = "macro")]
#[cfg_attr(docsrs, doc(cfg(feature = "macro")))]
pub use event_base_macro_attr::handler;
#[cfg(feature = "macro")]
#[cfg_attr(docsrs, doc(cfg(feature = "macro")))]
pub use event_base_macro_func::{send_msg, start_system};
#[cfg(feature = "memory")]
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
pub use event_base_queue::{FlumeQueueFactory, MpmcQueueFactory};
#[cfg(feature = "memory")]
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
pub use event_base_wal::MemoryWal;
#[cfg(feature = "persistent")]
#[cfg_attr(docsrs, doc(cfg(feature = "persistent")))]
pub use event_base_wal::{PersistentWal, PersistentWalBuilder, RecoveryReport, SyncPolicy};

/// WAL backends: `MemoryWal` (feature `memory`), `PersistentWal` (feature `persistent`).
///
/// With `persistent` alone the module holds the whole `event_base_wal` crate, `MemoryWal`
/// included: the crate has no switch of its own for it. Only the crate root's re-export of
/// `MemoryWal` follows `memory`.
#[cfg(any(feature = "memory", feature = "persistent"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "memory", feature = "persistent"))))]
pub mod wal {
    pub use event_base_wal::*;
}

/// Queue backends (feature `memory`): bounded in-memory channels per topic.
#[cfg(feature = "memory")]
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
pub mod queue {
    pub use event_base_queue::*;
}

#[cfg(feature = "memory")]
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
pub mod testing;

/// Built-in middleware (feature `middleware`).
#[cfg(feature = "middleware")]
#[cfg_attr(docsrs, doc(cfg(feature = "middleware")))]
pub mod middleware {
    pub use event_base_middleware::*;
}

#[cfg(feature = "middleware")]
#[cfg_attr(docsrs, doc(cfg(feature = "middleware")))]
pub use event_base_middleware::{
    LoggerMiddleware, MetricsMiddleware, RetryPolicyMiddleware, TimeoutMiddleware,
};

/// Audit writers (feature `audit`). The in-memory audit ring ([`AuditLog`], `bus.audit()`)
/// is part of the core and always there.
#[cfg(feature = "audit")]
#[cfg_attr(docsrs, doc(cfg(feature = "audit")))]
pub mod audit {
    pub use event_base_audit::*;
}

/// The Redis Streams backends (feature `redis`): many processes, on one machine or many,
/// share one bus. See the `distributed` page of the guide.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis {
    pub use event_base_redis::*;
}

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use event_base_redis::{RedisError, RedisQueueFactory, RedisWal};

/// The PostgreSQL backends (feature `postgres`): many processes share one bus on one
/// database, and a send can commit inside the application's own transaction. See the
/// "Distributed on PostgreSQL" page of the guide.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres {
    pub use event_base_postgres::*;
}

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use event_base_postgres::{PostgresError, PostgresQueueFactory, PostgresQueueWal, PostgresWal};

/// The gRPC management API (feature `gRPC`): the `event_base_grpc` crate. `GrpcServer`
/// serves a bus (`event_base.admin.v1.AdminService`, health, reflection, bearer tokens);
/// `client` connects to one. See the guide's gRPC page.
#[cfg(feature = "gRPC")]
#[cfg_attr(docsrs, doc(cfg(feature = "gRPC")))]
pub use event_base_grpc as grpc;

#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
pub mod config;

/// The names most programs need: `use event_base::prelude::*;`. Every name the guide's
/// examples use without another import; the macros, backends and middleware are in it when
/// their features are on.
pub mod prelude {
    #[cfg(feature = "config")]
    pub use crate::config::ConfigExt;
    #[cfg(feature = "middleware")]
    pub use crate::LoggerMiddleware;
    pub use crate::{
        async_trait, set_node_name, set_node_type, Ack, BatchAck, CoreError, DeadLetterMessage,
        DeadReason, DeliveryMode, EBatchHandler, EHandler, EMessage, EventBus, HandlerSpec, Json,
        JsonPayload, MessageHeaders, MessageMetadata, MessagePayload, MessageTopic, Middleware,
        Next, NodeType, Rate, SendOptions, ShutdownStrategy, TopicRouter,
    };
    #[cfg(feature = "macro")]
    pub use crate::{handler, send_msg, start_system};
    pub use crate::{reply, reply_json, CatchUp, Schedule};
    #[cfg(feature = "memory")]
    pub use crate::{FlumeQueueFactory, MemoryWal};
    #[cfg(feature = "persistent")]
    pub use crate::{PersistentWal, SyncPolicy};
}

/// A builder with the default backends (`MemoryWal`, bounded flume queues) and no handlers;
/// add handlers by value, or every `#[handler]` with `.with_registered_handlers()`.
///
/// Feature `memory`. Without it, give the backends yourself:
/// `EventBus::builder().wal(..).queue(..)`.
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
#[cfg(feature = "memory")]
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
pub fn builder() -> EventBusBuilder {
    EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::default())
}

/// What the macros' expansions call; not part of the API.
#[cfg(feature = "macro")]
#[doc(hidden)]
pub mod __private {
    pub use crate::__event_base_backends as backends;
    pub use crate::__event_base_config as config;
    pub use event_base_core::__private::{check_rate, decode_param, linkme, one_of_batch};
    pub use event_base_core::async_trait;

    use crate::{
        CoreError, EMessage, EventBus, EventBusBuilder, MessageId, TopicRouter, TryIntoMessage,
    };
    use std::time::Duration;

    /// Builds the system of `start_system!(config: ..)` and installs it as the global one.
    #[cfg(feature = "config")]
    pub async fn start_global_config(
        builder: EventBusBuilder,
        config: impl crate::config::IntoConfig + Send,
    ) -> Result<EventBus, CoreError> {
        use crate::config::ConfigExt;
        start_global(builder.config(config).await?).await
    }

    /// Builds the system from `start_system!` and installs it as the global one.
    pub async fn start_global(builder: EventBusBuilder) -> Result<EventBus, CoreError> {
        if EventBus::global().is_some_and(|g| g.is_accepting()) {
            return Err(CoreError::AlreadyStarted);
        }
        let bus = builder.build().await?;
        bus.install_global()?;
        Ok(bus)
    }

    /// `send_msg!(topic, msg_or_payload)`, also `send_msg!(topic, Json(&value))`.
    pub async fn send_msg(
        topic: impl AsRef<str>,
        message: impl TryIntoMessage,
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

/// `start_system!`'s backends when a key is left out: `(wal, queue)`, each the given
/// expression or, with `memory`, the default (`MemoryWal`, `FlumeQueueFactory`). Without
/// `memory` a left-out key is a compile error that names the keys to give.
#[cfg(all(feature = "macro", feature = "memory"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __event_base_backends {
    (wal = [], queue = []) => {
        (
            $crate::MemoryWal::new(),
            $crate::FlumeQueueFactory::default(),
        )
    };
    (wal = [$wal:expr], queue = []) => {
        ($wal, $crate::FlumeQueueFactory::default())
    };
    (wal = [], queue = [$queue:expr]) => {
        ($crate::MemoryWal::new(), $queue)
    };
    (wal = [$wal:expr], queue = [$queue:expr]) => {
        ($wal, $queue)
    };
}

/// `start_system!`'s backends when a key is left out: `(wal, queue)`, each the given
/// expression or, with `memory`, the default (`MemoryWal`, `FlumeQueueFactory`). Without
/// `memory` a left-out key is a compile error that names the keys to give.
#[cfg(all(feature = "macro", not(feature = "memory")))]
#[doc(hidden)]
#[macro_export]
macro_rules! __event_base_backends {
    (wal = [], queue = []) => {
        ::core::compile_error!(
            "start_system!() has no default backends without the `memory` feature of event_base: \
             give both `wal:` and `queue:`, e.g. \
             `start_system!(wal: PersistentWal::open(dir)?, queue: my_queue_factory)`, \
             or turn on `memory`"
        )
    };
    (wal = [$wal:expr], queue = []) => {
        ::core::compile_error!(
            "start_system! has no default queue without the `memory` feature of event_base: \
             give `queue:` too (any `QueueFactory`), e.g. \
             `start_system!(wal: .., queue: my_queue_factory)`, or turn on `memory`"
        )
    };
    (wal = [], queue = [$queue:expr]) => {
        ::core::compile_error!(
            "start_system! has no default WAL without the `memory` feature of event_base: \
             give `wal:` too (any `Wal`), e.g. \
             `start_system!(wal: PersistentWal::open(dir)?, queue: ..)`, or turn on `memory`"
        )
    };
    (wal = [$wal:expr], queue = [$queue:expr]) => {
        ($wal, $queue)
    };
}

/// `start_system!(config: ..)`: the call that builds from a config file, or, without the
/// `config` feature, a compile error that says to turn it on.
#[cfg(all(feature = "macro", feature = "config"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __event_base_config {
    ($builder:expr, $config:expr) => {
        $crate::__private::start_global_config($builder, $config)
    };
}

/// `start_system!(config: ..)`: the call that builds from a config file, or, without the
/// `config` feature, a compile error that says to turn it on.
#[cfg(all(feature = "macro", not(feature = "config")))]
#[doc(hidden)]
#[macro_export]
macro_rules! __event_base_config {
    ($builder:expr, $config:expr) => {
        ::core::compile_error!(
            "start_system!(config: ..) needs the `config` feature of event_base: \
             event_base = { version = \"0.1\", features = [\"config\"] }"
        )
    };
}

/// The guide, in reading order: start with [`ch01_quick_start`](crate::guide::ch01_quick_start), then the concepts, handlers
/// and sending; the later pages each cover one subject and can be read when it comes up.
///
/// | page | what it covers |
/// |---|---|
/// | [`ch01_quick_start`](crate::guide::ch01_quick_start) | the dependency, a first handler, `start_system!`, `send_msg!`, `wait_idle`, shutdown, isolated systems, the `quickstart` demo |
/// | [`ch02_core_concepts`](crate::guide::ch02_core_concepts) | the message, topics, delivery modes, the WAL-first send path, workers, the at-least-once guarantee, system topics, metrics |
/// | [`ch03_handler`](crate::guide::ch03_handler) | `#[handler]` and its parameters, `HandlerSpec`, `Ack`, retries, panics, timeouts, dead letters |
/// | `ch04_middleware` | code around every delivery, the four built-in layers (feature `middleware`) |
/// | [`ch05_sending`](crate::guide::ch05_sending) | every way to send, payload types, JSON, delays, backpressure, send errors |
/// | [`ch06_testing`](crate::guide::ch06_testing) | `TestBus`: publish, settle, and assert on what handlers did |
/// | [`ch07_shutdown`](crate::guide::ch07_shutdown) | the seven shutdown strategies, signals, shutdown by message, workers and scaling |
/// | `ch08_observability` | metrics, the audit trail, tracing (feature `audit`) |
/// | `ch09_persistence` | `PersistentWal`: sync policies, replay, the on-disk format, recovery (feature `persistent`) |
/// | `ch10_grpc` | the management API and `ebctl` (feature `gRPC`) |
/// | `ch11_distributed` | many processes on Redis Streams (feature `redis`) |
/// | `ch12_config` | the configuration file: every key, its default, the `EB_…` variables (feature `config`) |
/// | [`ch13_ordering`](crate::guide::ch13_ordering) | subscriptions: order per key (`with_key`) across workers, retries and restarts, pause and resume, lag |
/// | [`ch14_operating`](crate::guide::ch14_operating) | running it: a config file, the dashboard, `ebctl`, Prometheus and its alerts, traces, and what to do when an alert fires |
/// | [`ch15_requests`](crate::guide::ch15_requests) | request/reply: `EventBus::request`, `reply`, timeouts, late replies, what a request is |
/// | [`ch16_schedules`](crate::guide::ch16_schedules) | recurring schedules: `every` and `cron`, once per slot across nodes and restarts, missed slots, where they are kept |
/// | [`ch17_rate_limits`](crate::guide::ch17_rate_limits) | a handler's rate (`rate = "100/s"`): starts spaced evenly across workers and, on Redis, nodes |
/// | `ch18_postgres` | many processes on one PostgreSQL database, and a send inside the application's transaction (feature `postgres`) |
///
/// The pages are the `guide/` folder of this package, included here so that every example in
/// them is compiled and run as a doctest. Their examples use the default features (`memory`,
/// `macro`); a page that needs more is included only with those features (`full` includes
/// every page).
#[cfg(all(feature = "memory", feature = "macro"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "memory", feature = "macro"))))]
pub mod guide {
    // The pages as `build.rs` leaves them: links between pages point at these modules.
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/quick-start.md"))]
    pub mod ch01_quick_start {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/core-concepts.md"))]
    pub mod ch02_core_concepts {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/handler.md"))]
    pub mod ch03_handler {}
    #[cfg(feature = "middleware")]
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/middleware.md"))]
    pub mod ch04_middleware {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/sending.md"))]
    pub mod ch05_sending {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/testing.md"))]
    pub mod ch06_testing {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/shutdown.md"))]
    pub mod ch07_shutdown {}
    #[cfg(feature = "audit")]
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/observability.md"))]
    pub mod ch08_observability {}
    #[cfg(feature = "persistent")]
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/persistence.md"))]
    pub mod ch09_persistence {}
    #[cfg(feature = "gRPC")]
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/grpc.md"))]
    pub mod ch10_grpc {}
    #[cfg(feature = "redis")]
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/distributed.md"))]
    pub mod ch11_distributed {}
    #[cfg(feature = "config")]
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/config.md"))]
    pub mod ch12_config {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/ordering.md"))]
    pub mod ch13_ordering {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/operating.md"))]
    pub mod ch14_operating {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/requests.md"))]
    pub mod ch15_requests {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/schedules.md"))]
    pub mod ch16_schedules {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/rate-limits.md"))]
    pub mod ch17_rate_limits {}
    #[cfg(feature = "postgres")]
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/postgres.md"))]
    pub mod ch18_postgres {}
}
