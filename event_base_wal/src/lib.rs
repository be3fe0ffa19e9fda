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
//! - [`sim`] (feature `sim`): a simulated disk to put under a `PersistentWal` in tests. It
//!   keeps unsynced bytes apart from synced ones and can lose power at a chosen operation;
//!   the power-loss tests in `event_base_test` use it to check what `SyncPolicy` promises.
//!
//! `RedisWal` arrives with the distributed-mode issue.

#![deny(unsafe_code)]
// docs.rs (`--cfg docsrs`, nightly) marks what each feature adds; stable builds ignore it.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod memory_wal;
#[cfg(feature = "persistent")]
mod persistent;
mod record_id;
mod schedule_store;

pub use memory_wal::MemoryWal;
#[cfg(feature = "persistent")]
#[doc(hidden)]
pub use persistent::codec_bench;
/// A simulated disk for power-loss tests (feature `sim`).
///
/// A test tool, not a storage backend: everything lives in memory and is gone with the
/// process. It is a feature rather than a hidden module so that it costs a production build
/// nothing (not compiled at all) while staying documented for the tests that use it.
#[cfg(feature = "sim")]
pub mod sim {
    pub use crate::persistent::{Fault, PowerCut, SimFs};
}
#[cfg(feature = "persistent")]
#[cfg_attr(docsrs, doc(cfg(feature = "persistent")))]
pub use persistent::{
    PersistentWal, PersistentWalBuilder, RecoveryReport, SyncPolicy, DEFAULT_MAX_RECORD_BYTES,
    DEFAULT_SEGMENT_BYTES, DEFAULT_WRITER_SPIN,
};
