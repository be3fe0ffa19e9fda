//! Ended workers are pruned from the registry: it lists every live worker and only the
//! `constant::ENDED_WORKERS_KEPT` most recently registered stopped or dead ones, while the
//! shutdown reports still name every worker they stopped.

use event_base::constant::ENDED_WORKERS_KEPT;
use event_base::{Ack, ShutdownStrategy, WorkerOutcome, WorkerStatus};
use event_base_test::{Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_down_and_up_keeps_the_registry_bounded() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "orders", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let mut ended = Vec::new();
    for _ in 0..ENDED_WORKERS_KEPT + 8 {
        let name = bus.add_workers("h", 1).await.unwrap().remove(0);
        let report = bus.remove_worker(&name).await.unwrap();
        // The report names the worker it stopped, pruned or not.
        let stopped = report.workers.iter().find(|w| w.name == name);
        assert_eq!(
            stopped.map(|w| w.outcome),
            Some(WorkerOutcome::Completed),
            "{report:?}"
        );
        ended.push(name);
    }

    let listed = bus.registry().list();
    let stopped: Vec<String> = listed
        .iter()
        .filter(|w| w.status == WorkerStatus::Stopped)
        .map(|w| w.name.clone())
        .collect();
    // The newest ended workers are kept, in the order they were registered.
    assert_eq!(stopped, ended[ended.len() - ENDED_WORKERS_KEPT..]);
    assert!(bus.registry().get(&ended[0]).is_none());
    assert_eq!(
        bus.registry()
            .get(&ended[ended.len() - 1])
            .map(|w| w.status),
        Some(WorkerStatus::Stopped)
    );
    // Live workers are never pruned, and the metrics list no more than the registry does.
    assert_eq!(
        bus.registry().get("h-0").map(|w| w.status),
        Some(WorkerStatus::Idle)
    );
    assert_eq!(bus.metrics().workers.len(), listed.len());
    assert!(bus.metrics().worker(&ended[0]).is_none());

    // The bus still delivers.
    bus.send("orders", "x").await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_report_lists_every_worker_it_stopped() {
    let probe = Probe::new();
    let workers = ENDED_WORKERS_KEPT + 8;
    let bus = event_base::builder()
        .handler(probe.handler("h", "orders", |_| Ack::Ack).workers(workers))
        .build()
        .await
        .unwrap();
    let report = bus.shutdown(ShutdownStrategy::Force).await.unwrap();
    let mut names: Vec<&str> = report.workers.iter().map(|w| w.name.as_str()).collect();
    names.sort_unstable();
    let mut expected: Vec<String> = (0..workers).map(|i| format!("h-{i}")).collect();
    expected.sort_unstable();
    assert_eq!(names, expected);
    // Afterwards the registry keeps only the newest ended ones.
    let ended = bus
        .registry()
        .list()
        .iter()
        .filter(|w| matches!(w.status, WorkerStatus::Stopped | WorkerStatus::Dead))
        .count();
    assert_eq!(ended, ENDED_WORKERS_KEPT);
}
