//! The queue half: [`PostgresQueueFactory`], each subscription's queue as rows of one table
//! shared by every process on the database, and [`PostgresQueueWal`], the WAL over those
//! tables.
//!
//! | file | holds |
//! |---|---|
//! | `factory.rs` | `PostgresQueueFactory`: settings, subscriptions, `send_in` (the send inside the application's transaction) |
//! | `sub_queue.rs` | one subscription as this process sees it: its name, count, wake-up, closing |
//! | `producer.rs` | sends: rows handed to the writer |
//! | `consumer.rs` | claims (`FOR UPDATE SKIP LOCKED`), acks, releases, retries, dead-lettering past `max_deliveries` |
//! | `writer.rs` | the task that commits the changes, many to a transaction |
//! | `listener.rs` | `LISTEN`: notifications to wake-ups |
//! | `lease.rs` | lease renewal and the freeing of expired claims |
//! | `rate.rs` | a rated handler's pace, shared by every process |
//! | `routes.rs` | the handlers of every process, for sends to topics handled elsewhere |
//! | `shared.rs` | what a factory's queues share |
//! | `tasks.rs` | the start of the writer, listener and lease keeper |
//! | `sql.rs` | the statements |
//! | `wal.rs` | `PostgresQueueWal` |

mod consumer;
mod factory;
mod lease;
mod listener;
mod producer;
mod rate;
mod routes;
pub(crate) mod shared;
pub(crate) mod sql;
mod sub_queue;
mod tasks;
mod wal;
mod writer;

pub use factory::{
    PostgresQueueFactory, DEFAULT_BOUND, DEFAULT_MAX_DELIVERIES, DEFAULT_VISIBILITY_TIMEOUT,
};
pub use wal::PostgresQueueWal;
