//! `Timeout { total }`: the system keeps working through its backlog until nothing is in
//! flight or `total` has passed, then cancels whatever still runs.

use std::time::Duration;

use event_base::{ShutdownStrategy, WorkerOutcome};
use event_base_test::shutdown_scenario::{Scenario, Storage};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backlog_is_handled_while_time_remains() {
    let s = Scenario::start(2, 20).await;
    s.gate.open();
    let report = s
        .bus
        .shutdown(ShutdownStrategy::Timeout {
            total: Duration::from_secs(10),
        })
        .await
        .unwrap();
    assert!(report.drained);
    assert_eq!(report.left_for_replay, 0);
    assert_eq!(s.probe.finished().len(), 20);
    assert!(report
        .workers
        .iter()
        .all(|w| w.outcome == WorkerOutcome::Completed));
    assert!(s.restart_and_check().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_still_running_when_time_is_up_is_cancelled_and_replayed() {
    work_still_running_when_time_is_up_is_cancelled_and_replayed_on(Storage::Memory).await;
}

/// The same over files: the next system opens the WAL directory again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_still_running_when_time_is_up_is_cancelled_and_replayed_over_files() {
    work_still_running_when_time_is_up_is_cancelled_and_replayed_on(Storage::Files).await;
}

async fn work_still_running_when_time_is_up_is_cancelled_and_replayed_on(storage: Storage) {
    let s = Scenario::start_on(storage, 1, 5).await;
    let in_hand = s.probe.seen()[0].id.clone();
    let report = s
        .bus
        .shutdown(ShutdownStrategy::Timeout {
            total: Duration::from_millis(150),
        })
        .await
        .unwrap();
    assert!(report.elapsed >= Duration::from_millis(150));
    let w = report.worker("jobs-0").unwrap();
    assert_eq!(
        (w.outcome, w.interrupted.clone()),
        (WorkerOutcome::TimedOut, Some(in_hand))
    );
    assert_eq!(s.restart_and_check().await.len(), 5);
}
