//! `to_worker` pins a message to one worker; an unknown name is a clear error.

use event_base::{Ack, CoreError, DeliveryMode, EMessage};
use event_base_test::{Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_named_worker_handles_the_message() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("a", "jobs", |_| Ack::Ack))
        .handler(probe.handler("b", "jobs", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    assert_eq!(
        bus.workers("jobs"),
        vec!["a-0".to_owned(), "b-0".to_owned()]
    );
    for _ in 0..50 {
        let msg = EMessage::new(
            "jobs",
            b"x".to_vec(),
            DeliveryMode::Standard,
            Some("b-0".into()),
        );
        bus.send("jobs", msg).await.unwrap();
    }
    bus.wait_idle(WAIT).await.unwrap();
    let seen = probe.seen();
    assert_eq!(seen.len(), 50);
    assert!(
        seen.iter().all(|s| s.label == "b"),
        "worker a must see none"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_worker_is_refused_with_a_typed_error_and_never_delivered() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("a", "jobs", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let msg = EMessage::new(
        "jobs",
        b"x".to_vec(),
        DeliveryMode::Standard,
        Some("nobody-7".into()),
    );
    let err = bus.send("jobs", msg).await.unwrap_err();
    match &err {
        CoreError::UnknownWorker { topic, worker } => {
            assert_eq!(topic, "jobs");
            assert_eq!(worker, "nobody-7");
        }
        other => panic!("expected UnknownWorker, got {other:?}"),
    }
    // The message the caller sees names the topic and the worker, and where to look.
    let text = err.to_string();
    for part in ["`jobs`", "`nobody-7`", "EventBus::workers"] {
        assert!(text.contains(part), "{text:?} does not mention {part}");
    }
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count(), 0);
    assert_eq!(
        bus.wal_stats().appended,
        0,
        "a refused message never reaches the WAL"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn addressed_repeated_goes_n_times_to_that_worker() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("a", "jobs", |_| Ack::Ack))
        .handler(probe.handler("b", "jobs", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let msg = EMessage::new(
        "jobs",
        b"x".to_vec(),
        DeliveryMode::Repeated(3),
        Some("a-0".into()),
    );
    let id = bus.send("jobs", msg).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&id), 3);
    assert!(probe.seen().iter().all(|s| s.label == "a"));
    assert_eq!(bus.wal_stats().live, 0);
}
