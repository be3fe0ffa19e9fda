#[doc(hidden)]
pub mod codec_bench;
mod group_commit;
mod persistent_wal;
mod record_codec;
mod recovery;
mod segment;
mod sync_policy;
mod wal_writer;

pub use persistent_wal::{
    PersistentWal, PersistentWalBuilder, DEFAULT_MAX_RECORD_BYTES, DEFAULT_SEGMENT_BYTES,
};
pub use sync_policy::SyncPolicy;
