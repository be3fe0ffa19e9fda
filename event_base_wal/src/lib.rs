//! Write-ahead log backends for event_base.
//!
//! - [`MemoryWal`]: records in memory, sharded by message id; completed records are dropped at
//!   once so memory stays bounded by the messages in flight plus the dead letters. It survives
//!   handler failures and orderly shutdowns (hand the same instance to the next system), not
//!   the death of the process.
//!
//! `PersistentWal` (segment files, CRC-checked records, `SyncPolicy`, crash recovery) and
//! `RedisWal` arrive with their own issues.

#![deny(unsafe_code)]

mod memory_wal;

pub use memory_wal::MemoryWal;
