//! `Batched`: workers stop a group at a time; each finishes its current message.

use std::time::Duration;

use event_base::{ShutdownStrategy, WorkerOutcome};
use event_base_test::shutdown_scenario::Scenario;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_stop_in_groups_and_finish_their_messages() {
    let s = Scenario::start(4, 12).await; // four workers mid-message
    s.gate.open();
    let report = s
        .bus
        .shutdown(ShutdownStrategy::Batched {
            batch_size: 2,
            interval: Duration::from_millis(50),
        })
        .await
        .unwrap();
    assert_eq!(report.workers.len(), 4);
    assert!(report
        .workers
        .iter()
        .all(|w| w.outcome == WorkerOutcome::Completed));
    assert!(
        report.elapsed >= Duration::from_millis(50),
        "two groups, one interval apart"
    );
    let finished = s.probe.finished().len();
    assert!(finished >= 4, "the messages in hand were finished");
    assert_eq!(report.left_for_replay as usize, 12 - finished);
    let replayed = s.restart_and_check().await;
    assert_eq!(replayed.len() + finished, 12);
}
