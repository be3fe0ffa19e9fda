//! The send path: a message from `send` to its topic's queues, and the ways back onto them.
//!
//! `topic_router.rs` is the sending side of a system ([`TopicRouter`](crate::TopicRouter)); it
//! hands each message to `accept.rs`, which admits it (checks, `Arc`), appends it to the WAL
//! and queues a copy for each of its topic's handlers (or hands it to the scheduler).
//!
//! `stamp.rs` checks and readies every sent message (id, key, attempts, `deliver_at`,
//! provenance, trace context), for this process's queues (`accept.rs`) and for other
//! processes' (`remote/elsewhere.rs`) alike.
//!
//! `message_pool.rs` keeps the allocations of finished messages (their worker held the last
//! reference) for the next sends to move their messages into: `admit` takes one, a worker
//! whose delivery completed its message gives one back.
//!
//! `scheduler.rs` is the one timer of a system: delayed deliveries (`deliver_at`) and retries
//! with a delay; `wall_clock.rs` turns a `deliver_at` into a point on the runtime's clock for
//! it.
//!
//! `announce.rs` publishes on the bus's own `_system.` topics, when something subscribes.
//!
//! `replay.rs` sends again, at start-up, every record the WAL holds unfinished.

pub(crate) mod accept;
pub(crate) mod announce;
pub(crate) mod message_pool;
pub(crate) mod replay;
pub(crate) mod scheduler;
pub(crate) mod stamp;
pub(crate) mod topic_router;
pub(crate) mod wall_clock;
