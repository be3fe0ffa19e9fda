//! PostgreSQL backends for event_base: [`PostgresQueueFactory`], queues shared by every
//! process on one database (the distributed mode's second engine, beside Redis), with
//! [`PostgresQueueWal`] over its tables and a send inside the application's own transaction
//! ([`PostgresQueueFactory::send_in`]); and [`PostgresWal`], a write-ahead log in a table for
//! one process whose records must outlive it without a local disk.
//!
//! ```no_run
//! # async fn demo() -> Result<(), event_base_core::CoreError> {
//! use event_base_postgres::PostgresQueueFactory;
//! let queue = PostgresQueueFactory::connect("postgres://postgres@127.0.0.1:5432/postgres").await?;
//! let bus = event_base_core::EventBus::builder().wal(queue.wal()).queue(queue).build().await?;
//! # drop(bus); Ok(()) }
//! ```
//!
//! ```no_run
//! # async fn demo() -> Result<(), event_base_core::CoreError> {
//! use event_base_postgres::PostgresWal;
//! let wal = PostgresWal::connect("postgres://postgres@127.0.0.1:5432/postgres").await?;
//! let bus = event_base_core::EventBus::builder().wal(wal).build().await?;
//! # drop(bus); Ok(()) }
//! ```
//!
//! | file | holds |
//! |---|---|
//! | `queue/` | `PostgresQueueFactory` and `PostgresQueueWal` (see its table) |
//! | `link.rs` | a connection that comes back by itself |
//! | `wal.rs` | `PostgresWal`: the records' states in memory, each change handed to the writer |
//! | `writer.rs` | the task that owns the connection and commits the changes in order, many a transaction |
//! | `schema.rs` | the tables, created and upgraded on connect, versioned |
//! | `codec.rs` | messages to columns, rows back to records |
//! | `error.rs` | `PostgresError` |
//!
//! Tested on PostgreSQL 15.

#![deny(unsafe_code)]

mod codec;
mod error;
mod link;
mod queue;
mod schema;
mod wal;
mod writer;

pub use error::PostgresError;
pub use link::DEFAULT_CONNECT_TIMEOUT;
pub use queue::{
    PostgresQueueFactory, PostgresQueueWal, DEFAULT_BOUND, DEFAULT_MAX_DELIVERIES,
    DEFAULT_VISIBILITY_TIMEOUT,
};
pub use schema::SCHEMA_VERSION;
/// The client [`PostgresQueueFactory::send_in`] takes a transaction of: use this one (the
/// same version) for the application's own statements.
pub use tokio_postgres;
pub use wal::PostgresWal;
