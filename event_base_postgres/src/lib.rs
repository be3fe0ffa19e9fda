//! PostgreSQL backends for event_base. Today the WAL half: [`PostgresWal`], the write-ahead
//! log in a table, for a bus whose records must outlive the process without a local disk
//! (the queue half, `PostgresQueueFactory`, is to come: issue 35).
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
mod schema;
mod wal;
mod writer;

pub use error::PostgresError;
pub use schema::SCHEMA_VERSION;
pub use wal::{PostgresWal, DEFAULT_CONNECT_TIMEOUT};
