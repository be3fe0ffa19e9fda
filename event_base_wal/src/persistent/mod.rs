//! The crash-safe file WAL ([`PersistentWal`], feature `persistent`): segment files, the
//! record codec, recovery on open, the writer thread and group commit.
//!
//! What it may import: `event_base_core` (the `Wal` contract and the message types), the
//! standard library, its dependencies, and [`MemoryWal`](crate::MemoryWal), which holds
//! the live state in memory while the files hold its durable history. Nothing outside this
//! folder imports from it except `lib.rs`'s re-exports, and `memory_wal` imports nothing
//! from it (the dependency runs one way).
//!
//! A map, in the order a record travels:
//!
//! | file | what it holds |
//! |---|---|
//! | `persistent_wal.rs` | [`PersistentWal`] and its builder: the `Wal` impl, the directory lock, open/close |
//! | `sync_policy.rs` | [`SyncPolicy`]: when a write is made durable |
//! | `inbox.rs` | the queue from the senders to the writer: state changes under `Always` do not wake it |
//! | `wal_writer.rs` | the writer thread that owns the active segment: batching, syncing, deleting and compacting segments |
//! | `failure.rs` | the failed state: set at the first failed write or sync, after which nothing more is accepted |
//! | `group_commit.rs` | how long the writer waits for more senders before one shared `fdatasync` |
//! | `sync_thread.rs` | the thread that runs those `fdatasync`s while the writer writes the next batch |
//! | `record_codec.rs` | the byte format of one record, its encoder and decoder |
//! | `segment.rs` | segment file names, header and listing |
//! | `fs/` | the file layer every file operation goes through: `std::fs`, or a simulated disk for power-loss tests |
//! | `recovery.rs` | rebuilding the state from the segments on open, torn tails and corruption |
//! | `backlog.rs` | the pending messages recovery left on disk, as their places in the segments, and reading them back |
//! | `completion_log.rs` | completions of compacted segments still within the dedup window |
//! | `codec_bench.rs` | hidden entry points into the codec for the benchmarks |

mod backlog;
#[doc(hidden)]
pub mod codec_bench;
mod completion_log;
mod failure;
mod fs;
mod group_commit;
mod inbox;
mod persistent_wal;
mod record_codec;
mod recovery;
mod segment;
mod sync_policy;
mod sync_thread;
mod wal_writer;

#[cfg(feature = "sim")]
pub use fs::sim_fs::{Fault, PowerCut, SimFs};
pub use persistent_wal::{
    PersistentWal, PersistentWalBuilder, DEFAULT_MAX_RECORD_BYTES, DEFAULT_SEGMENT_BYTES,
    DEFAULT_WRITER_SPIN,
};
pub use recovery::RecoveryReport;
pub use sync_policy::SyncPolicy;
