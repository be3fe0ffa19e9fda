//! The writer's spin (`PersistentWalBuilder::writer_spin`): under `SyncPolicy::Always` a
//! writer that just answered a sender keeps looking for that sender's next append before it
//! sleeps, so the append is handed over without waking it. The hand-over must not change
//! what a send promises: each append is answered only after its own sync, the next one
//! (taken while the writer spins) too, and all of them survive a power cut.
//!
//! The spin here is far longer than the test, so every append after the first finds the
//! writer spinning: the spin ends on an urgent request or on closing, never on its deadline.
//! (That it ends, and the writer then sleeps, is tested on the inbox itself.)

use std::sync::Arc;
use std::time::Duration;

use event_base::backend::Wal;
use event_base::{EMessage, PersistentWal, SyncPolicy};
use event_base_wal::sim::SimFs;

const DIR: &str = "/sim/wal";
const SENDS: u64 = 200;

fn open(fs: &SimFs) -> PersistentWal {
    PersistentWal::builder(DIR)
        .sim_fs(fs.clone())
        .sync_policy(SyncPolicy::Always)
        .writer_spin(Duration::from_secs(3600))
        .idle_sync(Duration::from_secs(3600))
        .open()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_answered_then_appending_again_is_answered_after_its_own_sync() {
    let disk = SimFs::new(11);
    let wal = open(&disk);
    let before = wal.stats().syncs;
    let mut ids = Vec::new();
    for i in 0..SENDS {
        let msg = Arc::new(EMessage::standard("t", format!("m{i}")));
        wal.append(&msg).unwrap().wait().await.unwrap();
        // Answered only after a sync of its own: one sync a send, none skipped.
        assert_eq!(wal.stats().syncs - before, i + 1, "send {i}");
        ids.push(msg.id.clone());
    }
    // Nothing unsynced is left to save: every append was answered, so cut the power now.
    disk.cut_power();
    drop(wal);

    let disk = disk.restart();
    let wal = open(&disk);
    let pending = wal.pending().await.unwrap();
    let found: Vec<&str> = pending.iter().map(|r| r.message.id.as_str()).collect();
    assert_eq!(found.len(), ids.len(), "every answered append survived");
    for id in &ids {
        assert!(found.contains(&id.as_str()), "{id} lost");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_spinning_writer_closes_promptly_when_the_wal_is_dropped() {
    let disk = SimFs::new(12);
    let wal = open(&disk);
    let msg = Arc::new(EMessage::standard("t", "last"));
    wal.append(&msg).unwrap().wait().await.unwrap();
    // The writer spins for an hour after this answer unless closing ends it: dropping joins
    // the writer thread, so this returns only if the spin ended on the close.
    drop(wal);
    let disk = disk.restart();
    let wal = open(&disk);
    assert_eq!(wal.pending().await.unwrap().len(), 1);
}
