//! Messages in flight when a system is forced down are delivered by the next system started on
//! the same WAL.

use std::collections::HashSet;
use std::sync::Arc;

use event_base::backend::Wal;
use event_base::{Ack, MemoryWal, ShutdownStrategy};
use event_base_test::{Gate, Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_shutdown_leaves_pending_and_processing_for_replay() {
    let wal = Arc::new(MemoryWal::new());
    let first = Probe::new();
    let never = Gate::new();
    let bus = event_base::EventBus::builder()
        .wal(wal.clone())
        .queue(event_base::FlumeQueueFactory::default())
        .handler(
            first
                .gated_handler("h", "jobs", &never, |_| Ack::Ack)
                .workers(2),
        )
        .build()
        .await
        .unwrap();
    let mut ids = HashSet::new();
    for i in 0..20u8 {
        ids.insert(bus.send("jobs", vec![i]).await.unwrap().to_string());
    }
    first.wait_for(2, WAIT).await; // both workers are mid-message
    let report = bus.shutdown(ShutdownStrategy::Force).await.unwrap();
    assert_eq!(report.left_for_replay, 20);
    assert!(!report.drained);
    assert_eq!(wal.stats().live, 20);

    let second = Probe::new();
    let bus2 = event_base::EventBus::builder()
        .wal(wal.clone())
        .queue(event_base::FlumeQueueFactory::default())
        .handler(second.handler("h", "jobs", |_| Ack::Ack).workers(2))
        .build()
        .await
        .unwrap();
    bus2.wait_idle(WAIT).await.unwrap();
    let delivered: HashSet<_> = second.seen().into_iter().map(|s| s.id).collect();
    assert_eq!(delivered, ids);
    assert_eq!(second.count(), 20, "each exactly once after replay");
    assert_eq!(wal.stats().live, 0);
}
