//! `Force` stops at once: the in-flight message stays `Processing`, the queue stays `Pending`,
//! and the next system on the same WAL delivers all of it.

use event_base::{CoreError, ShutdownStrategy, WorkerOutcome};
use event_base_test::shutdown_scenario::{Scenario, Storage};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_cancels_in_flight_work_and_loses_nothing() {
    force_cancels_in_flight_work_and_loses_nothing_on(Storage::Memory).await;
}

/// The same over files: the next system opens the WAL directory again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_cancels_in_flight_work_and_loses_nothing_over_files() {
    force_cancels_in_flight_work_and_loses_nothing_on(Storage::Files).await;
}

async fn force_cancels_in_flight_work_and_loses_nothing_on(storage: Storage) {
    let s = Scenario::start_on(storage, 1, 10).await;
    let in_hand = s.probe.seen()[0].id.clone();
    let report = s.bus.shutdown(ShutdownStrategy::Force).await.unwrap();
    assert_eq!(report.strategy, "force");
    assert_eq!(report.left_for_replay, 10);
    assert!(!report.drained);
    let w = report.worker("jobs-0").unwrap();
    assert_eq!(
        (w.outcome, w.interrupted.clone()),
        (WorkerOutcome::Forced, Some(in_hand))
    );
    assert!(matches!(
        s.bus.send("jobs", b"late".to_vec()).await,
        Err(CoreError::SystemShutdown)
    ));

    let replayed = s.restart_and_check().await;
    assert_eq!(
        replayed.len(),
        10,
        "the interrupted message and the queue are delivered again"
    );
}
