//! Redis Streams backends for event_base: many processes, on one machine or many, share one
//! bus.
//!
//! - [`RedisQueueFactory`]: each subscription (a handler of a topic) is a stream with a
//!   consumer group named after the handler; the handler's workers in every process compete
//!   for its entries. An entry is acknowledged (`XACK` + `XDEL`) only once its handler's copy
//!   has ended; a process that dies mid-message leaves its entries pending, and another
//!   consumer takes them over after the visibility timeout (`XAUTOCLAIM`). Keyed messages
//!   (`EMessage::with_key`) go to a keyed stream of the subscription that one consumer at a
//!   time reads, the holder of its keyed lease, so each key's order holds across processes.
//! - [`RedisWal`]: the WAL as a façade over the same keys (the stream is the log), with dead
//!   letters in a stream per topic.
//!
//! ```no_run
//! # async fn demo() -> Result<(), event_base_core::CoreError> {
//! use event_base_redis::RedisQueueFactory;
//! let queue = RedisQueueFactory::connect("redis://127.0.0.1:6379").await?;
//! let bus = event_base_core::EventBus::builder()
//!     .wal(queue.wal())
//!     .queue(queue)
//!     .build()
//!     .await?;
//! # drop(bus); Ok(()) }
//! ```
//!
//! | file | holds |
//! |---|---|
//! | `factory.rs` | `RedisQueueFactory`: settings, server checks, a queue per subscription |
//! | `queue.rs` | one subscription's stream as this process sees it (keys, count, closing) |
//! | `producer.rs` | `XADD` of messages |
//! | `consumer/` | `RedisConsumer`, a file a role: reads, claims and their leases, takeover of stale entries, acks and nacks, retries and delays; `keyed.rs`: the keyed lane's reads |
//! | `lease.rs` | the keyed lease: which consumer reads a subscription's keyed messages (order per key across processes) |
//! | `scripts.rs` | the Lua scripts, one per state change, with owner checks |
//! | `routes.rs` | the registry of handlers cached in the process, for sends to handlers other nodes run |
//! | `node.rs` | this process in the cluster: heartbeats, the janitor lease, eviction of silent nodes |
//! | `link.rs` | the writer connection (ordered, pipelined, reconnecting) and readers' connections |
//! | `wal.rs` | `RedisWal` |
//! | `keys.rs` | the key layout (hash-tagged by topic) |
//! | `codec.rs`, `reply.rs` | entries to messages, replies to values, as typed errors |
//! | `error.rs` | `RedisError` |
//!
//! Needs Redis 7.0 or newer with `maxmemory-policy noeviction`
//! ([`RedisQueueFactory::connect`] checks both).

#![deny(unsafe_code)]

mod codec;
mod consumer;
mod error;
mod factory;
mod keys;
mod lane;
mod lease;
mod link;
mod node;
mod orphans;
mod producer;
mod queue;
mod rate;
mod reply;
mod routes;
mod scripts;
mod settings;
mod wal;

pub use error::RedisError;
pub use factory::{
    RedisQueueFactory, DEFAULT_BLOCK, DEFAULT_BOUND, DEFAULT_HEARTBEAT, DEFAULT_MAX_DELIVERIES,
    DEFAULT_PREFIX, DEFAULT_REGISTRY_MAX_AGE, DEFAULT_VISIBILITY_TIMEOUT,
};
pub use keys::{DEFAULT_DLQ_MAX_AGE, DLQ_MAX_LEN};
pub use routes::LOOK_UP_EVERY;
pub use wal::RedisWal;
