//! A shutdown report's `left_for_replay` (and so `drained`) counts the user's messages only.
//! The bus's own announcements on `_system.` topics (here: the workers' `Joined` and `Left`
//! on `_system.worker_discovery`, held by a subscriber that never finishes) can still be in
//! flight when the bus ends; they are no work of the user's left undone.

use event_base::constant::WORKER_DISCOVERY;
use event_base::{Ack, ShutdownStrategy};
use event_base_test::{Gate, Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_announcements_in_flight_are_not_left_for_replay() {
    let jobs = Probe::new();
    let watch = Probe::new();
    let never = Gate::new();
    let bus = event_base::builder()
        .handler(jobs.handler("jobs", "jobs", |_| Ack::Ack).workers(2))
        .handler(watch.gated_handler("discovery", WORKER_DISCOVERY, &never, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    for i in 0..5u8 {
        bus.send("jobs", vec![i]).await.unwrap();
    }
    jobs.wait_for(5, WAIT).await;
    // The discovery subscriber holds the first announcement, the others wait behind it.
    watch.wait_for(1, WAIT).await;
    assert!(bus.in_flight() > 0, "announcements are in flight");

    // Stops each worker after its current message and its inbox: every job finishes.
    let report = bus
        .shutdown(ShutdownStrategy::StateBasedIdle)
        .await
        .unwrap();
    assert_eq!(report.left_for_replay, 0, "{report:?}");
    assert!(report.drained, "{report:?}");
    assert_eq!(bus.metrics().topics["jobs"].acked, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_user_message_is_still_counted() {
    let jobs = Probe::new();
    let watch = Probe::new();
    let never = Gate::new();
    let bus = event_base::builder()
        .handler(jobs.gated_handler("jobs", "jobs", &never, |_| Ack::Ack))
        .handler(watch.gated_handler("discovery", WORKER_DISCOVERY, &never, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    bus.send("jobs", b"stuck".to_vec()).await.unwrap();
    jobs.wait_for(1, WAIT).await;
    watch.wait_for(1, WAIT).await;

    let report = bus.shutdown(ShutdownStrategy::Force).await.unwrap();
    assert_eq!(
        report.left_for_replay, 1,
        "the job, not the announcements: {report:?}"
    );
    assert!(!report.drained);
}
