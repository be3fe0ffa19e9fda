//! `StateBasedIdle`: every worker stops as soon as it is idle; none is ever cancelled.

use event_base::{Ack, EventBus, FlumeQueueFactory, MemoryWal, ShutdownStrategy, WorkerOutcome};
use event_base_test::{Gate, Probe, WAIT};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_workers_stop_at_once_busy_ones_when_done() {
    let wal = Arc::new(MemoryWal::new());
    let probe = Probe::new();
    let gate = Gate::new();
    let bus = EventBus::builder()
        .wal(wal.clone())
        .queue(FlumeQueueFactory::default())
        .handler(probe.gated_handler("busy", "busy", &gate, |_| Ack::Ack))
        .handler(probe.handler("idle", "idle", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let id = bus.send("busy", b"x".to_vec()).await.unwrap();
    probe.wait_for(1, WAIT).await;

    let b = bus.clone();
    let stopping = tokio::spawn(async move { b.shutdown(ShutdownStrategy::StateBasedIdle).await });
    // The idle worker stops without waiting for the busy one.
    let registry_idle_stopped = async {
        loop {
            let info = bus.registry().get("idle-0").unwrap();
            if info.status == event_base::WorkerStatus::Stopped {
                break;
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(WAIT, registry_idle_stopped)
        .await
        .unwrap();
    assert_eq!(
        bus.registry().get("busy-0").unwrap().current_message,
        Some(id.to_string())
    );
    gate.open();
    let report = stopping.await.unwrap().unwrap();
    assert!(report
        .workers
        .iter()
        .all(|w| w.outcome == WorkerOutcome::Completed));
    assert!(
        report.drained,
        "the busy message was finished, not cancelled"
    );
    assert_eq!(probe.finished(), vec![id]);
}
