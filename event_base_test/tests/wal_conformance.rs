//! Every WAL backend passes the same cases (`event_base_test::conformance::wal`): the
//! in-memory one, and the persistent one under each sync policy (durability timing differs,
//! the state machine must not).
//!
//! A new backend is one line in the list at the bottom. (`RedisWal`, a view of the queues'
//! entries rather than a store of records, runs the cases such a WAL promises:
//! `redis_wal_conformance.rs`.)

use std::sync::Arc;
use std::time::Duration;

use event_base::{MemoryWal, PersistentWal, SyncPolicy};
use event_base_test::conformance::wal::WalBackend;

/// One `MemoryWal` for the whole case: "opening it again" hands the same instance to the
/// next user, which is how it survives a restart of the bus.
#[derive(Debug, Default)]
struct Memory(Arc<MemoryWal>);

impl WalBackend for Memory {
    type Wal = Arc<MemoryWal>;
    fn open(&self) -> Arc<MemoryWal> {
        self.0.clone()
    }
}

/// A `PersistentWal` in a fresh temporary directory, opened with `policy` (and
/// `overlap_syncs(overlap)`) each time.
#[derive(Debug)]
struct Persistent {
    dir: tempfile::TempDir,
    policy: SyncPolicy,
    overlap: bool,
}

impl Persistent {
    fn new(policy: SyncPolicy) -> Persistent {
        Persistent {
            dir: tempfile::tempdir().unwrap(),
            policy,
            overlap: false,
        }
    }

    /// The same with the syncs on their own thread.
    fn overlapped(policy: SyncPolicy) -> Persistent {
        Persistent {
            overlap: true,
            ..Persistent::new(policy)
        }
    }
}

impl WalBackend for Persistent {
    type Wal = PersistentWal;
    fn open(&self) -> PersistentWal {
        PersistentWal::builder(self.dir.path())
            .sync_policy(self.policy)
            .overlap_syncs(self.overlap)
            .open()
            .unwrap()
    }
}

const BATCH: SyncPolicy = SyncPolicy::Batch {
    max_records: 16,
    max_delay: Duration::from_millis(2),
};

event_base_test::wal_conformance! {
    memory => Memory::default(),
    persistent_always => Persistent::new(SyncPolicy::Always),
    persistent_batch => Persistent::new(BATCH),
    persistent_never => Persistent::new(SyncPolicy::Never),
    persistent_always_overlapped => Persistent::overlapped(SyncPolicy::Always),
    persistent_batch_overlapped => Persistent::overlapped(BATCH),
}
