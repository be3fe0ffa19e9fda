//! `send_batch`: many messages, one WAL commit, each delivered once; one invalid message
//! refuses the whole batch before anything is written.

use std::collections::HashSet;

use event_base::{Ack, CoreError, EMessage, EventBus, FlumeQueueFactory, PersistentWal};
use event_base_test::{Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_accepted_with_one_commit_and_delivered_once_each() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Probe::new();
    let bus = EventBus::builder()
        .wal(PersistentWal::open(dir.path()).unwrap())
        .queue(FlumeQueueFactory::bounded(64))
        .handler(probe.handler("h", "t", |_| Ack::Ack).workers(2))
        .build()
        .await
        .unwrap();
    let batch: Vec<EMessage> = (0..1000u32)
        .map(|i| EMessage::standard("t", i.to_le_bytes().to_vec()))
        .collect();
    let want: HashSet<String> = batch.iter().map(|m| m.id.clone()).collect();
    let ids = bus.send_batch("t", batch).await.unwrap();
    assert_eq!(ids.len(), 1000);
    assert_eq!(
        ids.iter().map(|id| id.to_string()).collect::<HashSet<_>>(),
        want
    );
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count(), 1000);
    assert_eq!(
        probe
            .seen()
            .iter()
            .map(|s| s.id.clone())
            .collect::<HashSet<_>>(),
        want
    );
    assert_eq!(bus.metrics().topic("t").unwrap().sent, 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_invalid_message_refuses_the_whole_batch() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "t", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let batch = vec![
        EMessage::standard("t", b"a".to_vec()),
        EMessage::standard("t", b"b".to_vec()).with_to_worker("nobody-0"),
    ];
    let err = bus.send_batch("t", batch).await.unwrap_err();
    assert!(matches!(err, CoreError::UnknownWorker { .. }), "{err:?}");
    assert_eq!(bus.wal_stats().appended, 0);
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count(), 0);
}

/// `send_batch`'s future is `Send`, so it can run in a spawned task (and in a tonic or axum
/// handler). It did not compile before: an iterator of closures was held across an `.await`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_can_be_sent_from_a_spawned_task() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "t", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let sender = bus.clone();
    let ids = tokio::spawn(async move {
        let batch = (0..3u8).map(|i| EMessage::standard("t", vec![i])).collect();
        sender.send_batch("t", batch).await
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(ids.len(), 3);
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count(), 3);
}
