//! A message's path through a running bus, from `send` to the worker that takes it, and its
//! final state.
//!
//! May import: `message/`, `backend/`, `observe/`'s recorders, and the bus's hub
//! (`bus/shared.rs`, `bus/in_flight.rs`, `bus/global.rs`). The workers (`worker/`) import this
//! folder, not the other way round.
//!
//! ```text
//! TopicRouter::send                       topic_router.rs
//!   └─ admit: checks, Arc                 accept.rs (BusShared::admit)
//!      └─ WAL append (Pending)            accept.rs → backend/wal.rs
//!         ├─ deliver_at ahead → timer     scheduler.rs
//!         └─ the topic's log, once        log/ (Route::log; TopicEntry::producer for one
//!            (in-memory backends), or        handler's copy), or each handler's queue
//!            each handler's queue         (shared backends); several handlers: fan_out.rs
//!            └─ claimed, routed           consumer_router.rs → job.rs, job_channel.rs
//!               └─ worker                 worker/ (deliver, decide, act)
//!                  ├─ Ack → Complete      settle.rs (finish_ok)
//!                  ├─ retry → timer       scheduler.rs
//!                  └─ dead → Failed       settle.rs (dead_letter)
//! start-up: unfinished WAL records        replay.rs
//! ```
//!
//! `remote_routes.rs` (with the table `remote_table.rs` and the per-route `elsewhere.rs`) routes a send to the handlers other processes run, when the queue
//! backend is shared (`QueueFactory::routes`): a topic with no handler here, and the handlers
//! of a local topic that only other processes run. Their copies are queued before the send
//! answers (after the WAL append, ahead of the local copies: `elsewhere.rs` queues them).
//!
//! `sender_completions.rs` completes, on the sender, the WAL records of messages whose every
//! copy went to a shared queue, once the backend confirmed those copies (another node may
//! handle them all).
//!
//! `sent_to.rs` keeps the subscriptions of shared queues the bus sent to, for `wait_idle`
//! to ask the backend about (`bus/idle.rs`).
//!
//! `addressed.rs` sends a message addressed to a worker of one node (`to_worker:
//! "<node id>/<worker>"`, shared backends only) to that worker's handler's subscription.
//!
//! `topic_hasher.rs` is the hash of the topic table every send looks a topic up in;
//! `id_key.rs` makes the 128-bit keys by which the dedup window and the fan-out table hold ids;
//! `key_set.rs` is the set of keys the dedup window's generations are; `wall_clock.rs` turns a
//! `deliver_at` into a point on the runtime's clock for the scheduler.
//!
//! `stamp.rs` checks and readies every sent message (id, key, attempts, `deliver_at`,
//! provenance, trace context), for this process's queues (`accept.rs`) and for other
//! processes' (`elsewhere.rs`) alike.
//!
//! `key_order.rs` holds each subscription's key lines (order per key: a keyed message is
//! handled only at the front of its key's line), which `keyed_producer.rs` fills as an
//! in-memory queue takes keyed messages, and the router as it claims them from a queue that
//! needs acks.
//!
//! `bell.rs` waits on a `Notify` for a condition (the key lines' room, a resumed
//! subscription).
//!
//! `pause.rs` is a subscription's pause switch (`EventBus::pause`/`resume`), read by its
//! workers and its router before they take new work.
//!
//! `log/` is the topic log of in-memory backends: a message appended once, a cursor per
//! handler, runs claimed at once by its workers.
//!
//! `message_pool.rs` keeps the allocations of finished messages (their worker held the last
//! reference) for the next sends to move their messages into: `admit` takes one, a worker
//! whose delivery completed its message gives one back.

pub(crate) mod accept;
pub(crate) mod addressed;
pub(crate) mod bell;
pub(crate) mod consumer_router;
pub(crate) mod dedup;
pub(crate) mod elsewhere;
pub(crate) mod fan_out;
pub(crate) mod id_key;
pub(crate) mod job;
pub(crate) mod job_channel;
pub(crate) mod key_order;
pub(crate) mod key_set;
pub(crate) mod keyed_producer;
pub(crate) mod log;
pub(crate) mod message_pool;
pub(crate) mod pause;
pub(crate) mod rate_gate;
pub(crate) mod remote_routes;
pub(crate) mod remote_table;
pub(crate) mod replay;
pub(crate) mod scheduler;
pub(crate) mod sender_completions;
pub(crate) mod sent_to;
pub(crate) mod settle;
pub(crate) mod stamp;
pub(crate) mod topic_hasher;
pub(crate) mod topic_router;
pub(crate) mod topic_table;
pub(crate) mod wall_clock;
