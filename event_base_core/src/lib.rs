//! Core of event_base: messages, handlers, routing, workers, and the WAL and queue contracts.
//!
//! Applications normally use the `event_base` umbrella crate, which re-exports everything here
//! together with the default backends and the macros. This crate knows no backend: WALs and
//! queues plug in through the [`Wal`] and [`QueueFactory`] traits.
//!
//! # How a message travels
//!
//! ```text
//! send ─▶ WAL append (Pending) ─▶ topic queue ─▶ ConsumerRouter (claims ≤ 64) ─▶ worker
//!                                                                                 │
//!           Complete ◀── Ack ◀── handler ◀── middleware ◀── WAL: Processing ◀────┘
//!           retry (Pending, via the scheduler) ◀── NoAck / panic / timeout
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
//!   `1 + max_retries` deliveries, then a dead letter.
//! - `Ack::Dead`: a permanent failure (bad input); a dead letter now, kept for inspection and
//!   replay.
//!
//! Panics and timeouts are failed deliveries too: retried with backoff (100 ms, doubling) up to
//! the handler's `retries` (default 3), then dead-lettered. The worker keeps serving.
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

// The folders (see the table above); the `use` lines keep the old flat module names
// resolving until the paths are rewritten.
mod message {
    pub(crate) mod ack;
    pub(crate) mod context;
    pub(crate) mod dead_letter;
    pub(crate) mod emessage;
    pub(crate) mod id;
    pub(crate) use emessage::*;
}
mod handler {
    pub(crate) mod backoff;
    pub(crate) mod middleware;
    pub(crate) mod runtime;
    pub(crate) mod spec;
    pub(crate) use spec::*;
}
mod backend {
    pub(crate) mod queue;
    pub(crate) mod wal;
}
mod delivery {
    pub(crate) mod accept;
    pub(crate) mod consumer_router;
    pub(crate) mod job;
    pub(crate) mod job_channel;
    pub(crate) mod scheduler;
    pub(crate) mod topic_hasher;
    pub(crate) mod topic_router;
    pub(crate) mod topic_table;
}
mod worker;
mod bus {
    pub(crate) mod builder;
    pub(crate) mod cache_padded;
    pub(crate) mod event_bus;
    pub(crate) mod in_flight;
    pub(crate) mod tasks;
}
mod shutdown {
    pub(crate) mod coordinator;
    pub(crate) mod signal;
    pub(crate) mod strategy;
    pub(crate) use strategy::*;
}
mod system_topics {
    pub(crate) mod discovery;
    pub(crate) mod handlers;
}
mod observe {
    pub(crate) mod audit_log;
    pub(crate) mod latency_histogram;
    pub(crate) mod metrics_store;
    pub(crate) mod trace_layer;
}
mod error;

use backend::{queue, wal};
use bus::builder as event_bus_builder;
use bus::tasks as system_tasks;
use bus::{cache_padded, event_bus, in_flight};
use delivery::accept as system;
use delivery::topic_table as topic_entry;
use delivery::{consumer_router, job, job_channel, scheduler, topic_hasher, topic_router};
use handler::middleware;
use handler::runtime as handler_runtime;
use handler::backoff;
use message::context as message_context;
use message::id as message_id;
use message::{ack, dead_letter};
use observe::audit_log as audit;
use observe::metrics_store as metrics;
use observe::{latency_histogram, trace_layer};
use shutdown::coordinator as shutdown_coordinator;
use shutdown::signal;
use system_topics::discovery;
use system_topics::handlers as system_handlers;
use worker::catch_unwind;
use worker::monitor as worker_monitor;
use worker::registry as worker_registry;

pub mod constant;

pub use ack::{Ack, DeadReason};
pub use audit::{AuditError, AuditEvent, AuditLog, AuditOutcome, AuditRecord, AuditWriter};
pub use backoff::Backoff;
pub use consumer_router::ConsumerRouter;
pub use dead_letter::DeadLetterMessage;
pub use discovery::{DiscoveryEvent, TopicDiscovery, TopicInfo, TopicSync, WorkerDiscovery};
pub use error::{CoreError, QueueError, WalError};
pub use event_bus::EventBus;
pub use event_bus_builder::EventBusBuilder;
pub use handler::spec::{
    handler_fn, EHandler, FnHandler, HandlerRegistration, HandlerSpec, HANDLER_REGISTRY,
};
pub use latency_histogram::{LatencyHistogram, LatencySummary};
pub use message::emessage::{
    DeliveryMode, EMessage, IntoMessage, JsonPayload, MessageMetadata, MessagePayload,
    MessageTopic, MESSAGE_VERSION,
};
pub use message_context::current_message;
pub use message_id::new_message_id;
pub use metrics::{
    MetricsManager, MetricsSnapshot, MetricsStore, NodeMetrics, TopicMetrics, WorkerMetrics,
};
pub use middleware::{BoxAckFuture, Middleware, Next, Pipeline};
pub use queue::{Claimed, EConsumer, EProducer, QueueFactory, Receipt, TopicQueue, TrySendError};
pub use shutdown::strategy::{
    ShutdownAck, ShutdownCommand, ShutdownReport, ShutdownStrategy, WorkerOutcome, WorkerShutdown,
};
pub use topic_router::TopicRouter;
#[cfg(feature = "trace")]
pub use trace_layer::TraceLayer;
pub use trace_layer::TraceRecord;
pub use wal::{Wal, WalCommit, WalRecord, WalRecordState, WalStats};
pub use worker::Worker;
pub use worker_registry::{WorkerInfo, WorkerRegistry, WorkerStatus};

pub use async_trait::async_trait;
pub use bytes::Bytes;
pub use uuid::Uuid;

#[doc(hidden)]
pub mod __private {
    pub use linkme;
}
