//! `TwoStage`: workers finish their current message; the queue waits in the WAL; a worker
//! still busy at `force_timeout` is cancelled and its message delivered again next start.

use std::time::Duration;

use event_base::{ShutdownStrategy, WorkerOutcome};
use event_base_test::shutdown_scenario::{Scenario, Storage};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_finish_their_current_message_then_stop() {
    let s = Scenario::start(2, 10).await;
    let bus = s.bus.clone();
    let shutdown = tokio::spawn(async move {
        bus.shutdown(ShutdownStrategy::TwoStage {
            poll_interval: Duration::from_millis(20),
            force_timeout: Duration::from_secs(10),
        })
        .await
    });
    // Let the two messages in hand finish only once shutdown has begun.
    while s.bus.is_accepting() {
        tokio::task::yield_now().await;
    }
    s.gate.open();
    let report = shutdown.await.unwrap().unwrap();
    for w in &report.workers {
        assert_eq!(w.outcome, WorkerOutcome::Completed, "{w:?}");
    }
    let finished = s.probe.finished();
    assert!(finished.len() >= 2, "the messages in hand were finished");
    assert!(finished.len() < 10, "the queue was not worked through");
    assert_eq!(report.left_for_replay, 10 - finished.len() as u64);

    let replayed = s.restart_and_check().await;
    assert_eq!(replayed.len() + finished.len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_still_busy_at_the_force_timeout_is_cancelled() {
    a_worker_still_busy_at_the_force_timeout_is_cancelled_on(Storage::Memory).await;
}

/// The same over files: the next system opens the WAL directory again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_still_busy_at_the_force_timeout_is_cancelled_over_files() {
    a_worker_still_busy_at_the_force_timeout_is_cancelled_on(Storage::Files).await;
}

async fn a_worker_still_busy_at_the_force_timeout_is_cancelled_on(storage: Storage) {
    let s = Scenario::start_on(storage, 1, 3).await;
    let in_hand = s.probe.seen()[0].id.clone();
    let report = s
        .bus
        .shutdown(ShutdownStrategy::TwoStage {
            poll_interval: Duration::from_millis(10),
            force_timeout: Duration::from_millis(100),
        })
        .await
        .unwrap();
    let w = report.worker("jobs-0").unwrap();
    assert_eq!(
        (w.outcome, w.interrupted.clone()),
        (WorkerOutcome::TimedOut, Some(in_hand.clone()))
    );
    assert_eq!(report.left_for_replay, 3);
    let replayed = s.restart_and_check().await;
    assert!(replayed.contains(&in_hand));
}
