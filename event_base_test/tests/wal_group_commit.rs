//! Group commit, counted: `WalStats::syncs` shows how many `fdatasync` calls the
//! `PersistentWal` made, so the claims "a batch costs one sync" and "concurrent senders
//! share syncs" are observed, not assumed.

use std::time::Duration;

use event_base::{Ack, EMessage, EventBus, FlumeQueueFactory, PersistentWal, SyncPolicy};
use event_base_test::{Probe, WAIT};

/// A bus on a fresh directory with `SyncPolicy::Always` whose writer never syncs on its own
/// while these tests run (no idle sync), so every sync counted is one a sender asked for.
async fn bus(dir: &std::path::Path, probe: &std::sync::Arc<Probe>) -> EventBus {
    let wal = PersistentWal::builder(dir)
        .sync_policy(SyncPolicy::Always)
        .idle_sync(Duration::from_secs(3600))
        .open()
        .unwrap();
    EventBus::builder()
        .wal(wal)
        .queue(FlumeQueueFactory::bounded(64))
        .handler(probe.handler("h", "t", |_| Ack::Ack).workers(2))
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_batch_of_1000_makes_exactly_one_sync() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Probe::new();
    let bus = bus(dir.path(), &probe).await;
    bus.wal().flush().await.unwrap();
    let before = bus.wal_stats();
    assert_eq!(before.syncs, 1, "the flush, and nothing else so far");

    let batch: Vec<EMessage> = (0..1000u32)
        .map(|i| EMessage::standard("t", i.to_le_bytes().to_vec()))
        .collect();
    bus.send_batch("t", batch).await.unwrap();
    let after = bus.wal_stats();
    assert_eq!(after.appended - before.appended, 1000);
    // Only the last record of the batch carries a waiter; the writer writes the others as
    // they come without syncing, and the one sync for the last covers them all.
    assert_eq!(after.syncs - before.syncs, 1, "{after:?}");

    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count(), 1000);
    // Deliveries write Processing and Complete records, but those never force a sync.
    assert_eq!(bus.wal_stats().syncs, after.syncs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_senders_share_syncs() {
    const SENDERS: u64 = 64;
    const EACH: u64 = 25;
    let dir = tempfile::tempdir().unwrap();
    let probe = Probe::new();
    let bus = bus(dir.path(), &probe).await;
    let before = bus.wal_stats().syncs;

    let tasks: Vec<_> = (0..SENDERS)
        .map(|t| {
            let bus = bus.clone();
            tokio::spawn(async move {
                for i in 0..EACH {
                    bus.send("t", format!("{t}-{i}")).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let syncs = bus.wal_stats().syncs - before;
    let messages = SENDERS * EACH;
    println!("{messages} sends from {SENDERS} senders: {syncs} syncs");
    // Each send waits for a sync that covers its own record, and one sync answers at most
    // the 64 senders, so at least messages / 64 syncs; sharing makes it far fewer than
    // one per message.
    assert!(syncs >= messages / SENDERS, "{syncs} syncs");
    assert!(syncs * 4 <= messages, "{syncs} syncs for {messages} sends");

    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count() as u64, messages);
}
