//! Write-ahead log backends for event_base.
//!
//! - [`MemoryWal`]: records in memory, sharded by message id; completed records are dropped at
//!   once so memory stays bounded by the messages in flight plus the dead letters. It survives
//!   handler failures and orderly shutdowns (hand the same instance to the next system), not
//!   the death of the process.
//!
//! - `PersistentWal` (feature `persistent`): segment files of length-prefixed, CRC-checked, versioned records
//!   (the format is specified in the `record_codec` and `segment` module docs and in the
//!   guide's persistence page). With `SyncPolicy::Always`, the default, a `send` that
//!   returned `Ok` survives `kill -9`; group commit shares one `fdatasync` among concurrent
//!   senders. A torn tail is truncated on open; completed segments are deleted.
//!
//! `RedisWal` arrives with the distributed-mode issue.

#![deny(unsafe_code)]

mod memory_wal;
#[cfg(feature = "persistent")]
mod persistent;
mod record_id;

pub use memory_wal::MemoryWal;
#[cfg(feature = "persistent")]
#[doc(hidden)]
pub use persistent::codec_bench;
#[cfg(feature = "persistent")]
pub use persistent::{
    PersistentWal, PersistentWalBuilder, RecoveryReport, SyncPolicy, DEFAULT_MAX_RECORD_BYTES,
    DEFAULT_SEGMENT_BYTES,
};
