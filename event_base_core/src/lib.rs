//! Core of event_base: messages, handlers, routing, workers, and the WAL and queue contracts.
//!
//! Applications normally use the `event_base` umbrella crate, which re-exports everything here
//! together with the default backends and the macros. This crate knows no backend: WALs and
//! queues plug in through the [`Wal`](backend::Wal) and [`QueueFactory`](backend::QueueFactory)
//! traits of the [`backend`] module, which is for backend authors only.
//!
//! # Where things are
//!
//! Modules are private and every public name is re-exported here, so paths stay short
//! (`event_base_core::EMessage`) while the files nest by concern; the one exception is
//! [`backend`], public so that what only backend authors need (the WAL and queue contracts) is
//! not mixed into the names applications use. Each folder's `mod.rs` says
//! what it holds and what it may import; no file imports a file that imports it back
//! (`event_base_test/tests/module_graph.rs` checks it).
//!
//! | folder | concern | main types |
//! |---|---|---|
//! | `message/` | what travels | [`EMessage`], [`Ack`], [`DeadReason`], [`DeadLetterMessage`] |
//! | `handler/` | handlers and what wraps them | [`EHandler`], [`HandlerSpec`], [`Middleware`], [`Pipeline`], [`Backoff`], [`Rate`] |
//! | `backend/` | the contracts backends implement (public: `event_base_core::backend`) | [`Wal`](backend::Wal), [`QueueFactory`](backend::QueueFactory) |
//! | `delivery/` | a message's path, send to final state | [`TopicRouter`], [`ConsumerRouter`] |
//! | `worker/` | running handlers | [`Worker`], [`WorkerRegistry`] |
//! | `bus/` | one running bus, how it stops (`bus/stop/`), the readers of its recordings (`bus/observe/`) | [`EventBus`], [`EventBusBuilder`], [`MetricsStore`], [`TraceRecord`] |
//! | `shutdown/` | stopping, the words: strategies and reports (`bus/stop/` carries them out) | [`ShutdownStrategy`], [`ShutdownReport`] |
//! | `system_topics/` | the bus's own `_system.` topics | [`WorkerDiscovery`], [`TopicSync`] |
//! | `observe/` | metrics, audit, tracing: the recorders and what they record (the readers of a running bus are `bus/observe/`) | [`MetricsSnapshot`], [`AuditLog`] |
//! | `patterns/` | request/reply, recurring schedules, cancel of a delayed message, on the bus's API | [`reply`], [`Schedule`], [`CatchUp`] |
//!
//! `constant` (public), `error` ([`CoreError`] and the per-concern errors) and `node`
//! ([`NodeType`], [`set_node_name`]: which node this process is) are the leaves every folder
//! may import.
//!
//! # How a message travels
//!
//! ```text
//! send ─▶ WAL append (Pending) ─▶ topic queue ─▶ ConsumerRouter (claims ≤ 64) ─▶ worker
//!                                                                                 │
//!           Complete ◀── Ack ◀── handler ◀── middleware ◀── WAL: Processing ◀────┘
//!           retry (Pending, via the scheduler) ◀── NoAck / panic / timeout / Err
//!           Failed (dead letter) ◀── Dead / retries used up
//! ```
//!
//! # Choosing a delivery mode
//!
//! - [`DeliveryMode::Standard`] for work items: exactly one worker handles each message, and
//!   adding workers adds throughput.
//! - [`DeliveryMode::Broadcast`] when every worker must see the message (each keeps a cache,
//!   say). One WAL record; it completes when every worker's copy has.
//! - [`DeliveryMode::Repeated`] when a message should be handled `n` times in all.
//! - `to_worker: Some(name)` pins a message to one worker (see [`EventBus::workers`]).
//!
//! # Choosing what a handler answers
//!
//! - `Ack::Ack`: done.
//! - `Ack::NoAck`: a transient failure; deliver again later (`retry_after`), at most
//!   `1 + max_retries` deliveries, then a dead letter. `Ack::retry()` fills in the handler's
//!   `retries` (default 3).
//! - `Ack::Dead`: a permanent failure (bad input); a dead letter now, kept for inspection and
//!   replay.
//!
//! Panics, timeouts and a typed handler's `Err` ([`IntoAck`]) are failed deliveries too:
//! retried with backoff (100 ms, doubling) up to the handler's `retries` (default 3), then
//! dead-lettered. The worker keeps serving.
//!
//! # Choosing a WAL
//!
//! - `MemoryWal` (crate `event_base_wal`): the fastest; survives handler failures, panics and
//!   orderly shutdown, not a process crash. Completed records are dropped at once.
//! - `PersistentWal`: segment files with checksums; with `SyncPolicy::Always` a send that
//!   returned `Ok` survives `kill -9`.
//!
//! # Delivery guarantee
//!
//! At least once. A handler may see a message again after a crash (its completion had not
//! reached the WAL) or after a queue backend lost an ack; make handlers idempotent where that
//! matters, for example by remembering `msg.id`.

#![deny(unsafe_code)]
// docs.rs (`--cfg docsrs`, nightly) marks what each feature adds; stable builds ignore it.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backend;
mod bus;
mod clock;
mod delivery;
mod error;
mod handler;
mod message;
mod node;
mod observe;
mod patterns;
mod shutdown;
mod system_topics;
mod worker;

pub mod constant;

pub use bus::builder::EventBusBuilder;
pub use bus::event_bus::EventBus;
pub use delivery::send::topic_router::{SendOptions, TopicRouter};
pub use delivery::subscription::consumer_router::ConsumerRouter;
pub use error::{BoxError, ConfigError, CoreError, QueueError, WalError};
pub use handler::backoff::Backoff;
pub use handler::batch::{batch_fn, BatchAck, BatchSpec, EBatchHandler, FnBatchHandler};
pub use handler::ehandler::{handler_fn, EHandler, FnHandler};
pub use handler::handler_override::HandlerOverride;
pub use handler::into_ack::IntoAck;
pub use handler::middleware::{BoxAckFuture, Middleware, Next};
pub use handler::pipeline::Pipeline;
pub use handler::rate::Rate;
pub use handler::spec::HandlerSpec;
// What `#[handler]`'s expansion names: public so that it can, hidden from the docs because no
// program writes it.
pub use bus::observe::metrics_manager::MetricsManager;
pub use bus::observe::metrics_store::{MetricsStore, TopicLatencies};
#[cfg(feature = "trace")]
#[cfg_attr(docsrs, doc(cfg(feature = "trace")))]
pub use bus::observe::trace_layer::TraceLayer;
pub use bus::observe::trace_layer::TraceRecord;
#[doc(hidden)]
pub use handler::spec::{BatchRegistration, HandlerRegistration, HANDLER_REGISTRY};
pub use message::ack::{Ack, DeadReason};
pub use message::context::current_message;
pub use message::dead_letter::DeadLetterMessage;
pub use message::delivery_mode::DeliveryMode;
pub use message::emessage::{EMessage, IntoMessage, JsonPayload, TryIntoMessage, MESSAGE_VERSION};
pub use message::headers::MessageHeaders;
pub use message::id::{new_message_id, MessageId};
pub use message::json::Json;
pub use message::metadata::MessageMetadata;
pub use message::payload::MessagePayload;
pub use message::topic::MessageTopic;
pub use node::{node_name, node_type, set_node_name, set_node_type, NodeType};
pub use observe::audit_log::AuditLog;
pub use observe::audit_record::{AuditError, AuditEvent, AuditOutcome, AuditRecord, AuditWriter};
pub use observe::latency_histogram::{LatencyHistogram, LatencySummary};
pub use observe::snapshot::{
    MetricsSnapshot, NodeMetrics, SubscriptionMetrics, TopicMetrics, WorkerMetrics,
};
pub use patterns::request::{reply, reply_json, REPLY_TO};
pub use patterns::schedule::{ScheduleInfo, MAX_SCHEDULE_NAME_BYTES, SCHEDULE_HEADER, SLOT_HEADER};
pub use patterns::slots::{CatchUp, Schedule, MAX_CATCH_UP};
pub use shutdown::strategy::{
    ShutdownAck, ShutdownCommand, ShutdownReport, ShutdownStrategy, WorkerOutcome, WorkerShutdown,
};
pub use system_topics::discovery::{TopicDiscovery, TopicInfo, TopicSync, WorkerDiscovery};
pub use worker::registry::{DiscoveryEvent, WorkerInfo, WorkerRegistry, WorkerStatus};
pub use worker::Worker;

// For `impl EHandler` blocks (it is in the prelude); hidden here, where it would list as one
// of this crate's own attributes.
#[doc(hidden)]
pub use async_trait::async_trait;
pub use bytes::Bytes;
pub use uuid::Uuid;

#[doc(hidden)]
pub mod __private {
    pub use crate::handler::rate::check_rate;
    pub use crate::message::json::decode_param;
    pub use linkme;

    /// A batch handler as the one-message handler a `HandlerRegistration` also names.
    pub fn one_of_batch(
        handler: std::sync::Arc<dyn crate::EBatchHandler>,
    ) -> std::sync::Arc<dyn crate::EHandler> {
        std::sync::Arc::new(crate::handler::batch::OneOfBatch(handler))
    }
}
