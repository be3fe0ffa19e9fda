//! Disk use of a `PersistentWal` stays bounded under a steady load: segments whose records
//! are all finished are deleted, and old segments with a few survivors are rewritten.

use std::path::Path;
use std::time::Duration;

use event_base::{Ack, EventBus, FlumeQueueFactory, PersistentWal, SyncPolicy};
use event_base_test::{Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_load_keeps_a_bounded_number_of_segments() {
    steady_load(Duration::ZERO, 0).await;
}

/// Completions kept for the dedup window (the default two minutes: all of this test's) add
/// their own records, about 58 bytes each, to the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_kept_for_the_dedup_window_add_only_their_own_size() {
    steady_load(Duration::from_secs(120), 40_000 * 64).await;
}

async fn steady_load(retention: Duration, kept: u64) {
    let dir = tempfile::tempdir().unwrap();
    let wal = PersistentWal::builder(dir.path())
        .segment_bytes(64 << 10)
        .sync_policy(SyncPolicy::Never)
        .completion_retention(retention)
        .open()
        .unwrap();
    let probe = Probe::new();
    let bus = EventBus::builder()
        .wal(wal)
        .queue(FlumeQueueFactory::default())
        // One message in 50 dies and stays a dead letter: old segments must be rewritten,
        // not kept because of it.
        .handler(
            probe
                .handler("h", "t", |m| {
                    if m.payload.0[0] == 0 {
                        Ack::dead()
                    } else {
                        Ack::Ack
                    }
                })
                .workers(2),
        )
        .build()
        .await
        .unwrap();
    const ROUNDS: u32 = 40;
    let mut max_disk = 0;
    for round in 0..ROUNDS {
        for i in 0..1000u32 {
            let tag = if (round * 1000 + i) % 50 == 0 {
                0u8
            } else {
                1u8
            };
            let mut payload = vec![tag];
            payload.extend_from_slice(&[7u8; 200]);
            bus.send("t", payload).await.unwrap();
            // What is on disk while the load runs, measured by the file system, not by the
            // WAL's own account.
            if i % 100 == 99 {
                max_disk = max_disk.max(dir_bytes(dir.path()));
            }
        }
        bus.wait_idle(WAIT).await.unwrap();
        bus.wal().flush().await.unwrap();
        max_disk = max_disk.max(dir_bytes(dir.path()));
    }
    // ~40 000 records of ~300 bytes each went through: about 12 MB written in all. Without
    // compaction all of it would still be on disk; with it, the peak is a few segments (the
    // writer seals a segment only after a whole batch, so segments overshoot their size).
    let written = u64::from(ROUNDS) * 1000 * 300;
    assert!(
        max_disk < written / 8 + kept,
        "disk use peaked at {max_disk} bytes for {written} bytes written ({kept} for completions)"
    );
    let end = dir_bytes(dir.path());
    assert!(
        end < (2 << 20) + kept,
        "{end} bytes left on disk at the end"
    );
    // At most 16 segments (past that the oldest is rewritten) plus the LOCK file, and the
    // completion log when completions are kept.
    let files = std::fs::read_dir(dir.path()).unwrap().count();
    assert!(
        files <= 17 + usize::from(kept > 0),
        "{files} files left in the WAL directory"
    );
    assert_eq!(bus.dead_letters().await.unwrap().len(), 800);
    tokio::time::timeout(
        Duration::from_secs(10),
        bus.shutdown(event_base::ShutdownStrategy::Force),
    )
    .await
    .unwrap()
    .unwrap();
}

/// Bytes of every file under `dir`, subdirectories included: whatever the WAL keeps there.
fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = match entry.metadata() {
            Ok(m) => m,
            Err(_) => continue, // deleted between the listing and the look
        };
        total += if meta.is_dir() {
            dir_bytes(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}
