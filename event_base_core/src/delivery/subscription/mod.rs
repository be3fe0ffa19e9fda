//! A topic's handlers, each one a subscription: the topic table that finds them, and what a
//! subscription holds (its queue, router, jobs, key lines, pause switch and rate gate).
//!
//! `topic_table.rs` holds a `Route` per topic and in it a `TopicEntry` per handler;
//! `topic_hasher.rs` is the hash of that table, which every send looks a topic up in.
//!
//! `consumer_router.rs` ([`ConsumerRouter`](crate::ConsumerRouter)) claims a subscription's
//! messages from its queue and hands them to workers as `Job`s (`job.rs`), over the channels
//! of `job_channel.rs` (a worker's inbox, the topic's work channel).
//!
//! `key_order.rs` holds each subscription's key lines (order per key: a keyed message is
//! handled only at the front of its key's line), which `keyed_producer.rs` fills as an
//! in-memory queue takes keyed messages, and the router as it claims them from a queue that
//! needs acks.
//!
//! `pause.rs` is a subscription's pause switch (`EventBus::pause`/`resume`), read by its
//! workers and its router before they take new work. `bell.rs` waits on a `Notify` for a
//! condition (the key lines' room, a resumed subscription).
//!
//! `rate_gate.rs` paces a subscription's handler starts at its handler's rate
//! (`HandlerSpec::rate`): a GCRA clock in this process, or the shared backend's limiter.

pub(crate) mod bell;
pub(crate) mod consumer_router;
pub(crate) mod job;
pub(crate) mod job_channel;
pub(crate) mod key_order;
pub(crate) mod keyed_producer;
pub(crate) mod pause;
pub(crate) mod rate_gate;
pub(crate) mod topic_hasher;
pub(crate) mod topic_table;
