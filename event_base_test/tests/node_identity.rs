//! A bus says which node it is: the name and type appear in worker info and heartbeats, in
//! the topic table it announces, in its metrics snapshot and in every audit record. A worker
//! node registers no handlers of its own on the `_system.` topics.

use std::time::Duration;

use event_base::constant::{SHUTDOWN, TOPIC_DISCOVERY, TOPIC_SYNC, WORKER_HEARTBEAT};
use event_base::{
    Ack, CoreError, EMessage, NodeType, ShutdownCommand, ShutdownStrategy, TopicSync, WorkerInfo,
};
use event_base_test::{decode, Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_name_and_type_appear_everywhere_the_bus_reports_itself() {
    let probe = Probe::new();
    let watch = Probe::new();
    let bus = event_base::builder()
        .node_name("billing-7")
        .node_type(NodeType::Host)
        .heartbeat(Duration::from_millis(20), Duration::from_secs(60))
        .handler(probe.handler("orders", "orders", |_| Ack::Ack))
        .handler(watch.handler("sync", TOPIC_SYNC, |_| Ack::Ack))
        .handler(watch.handler("beat", WORKER_HEARTBEAT, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    assert_eq!(bus.node_name(), "billing-7");
    assert_eq!(bus.node_type(), NodeType::Host);

    let id = bus.send("orders", "x").await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    // Worker info.
    let info = bus.registry().get("orders-0").unwrap();
    assert_eq!(info.node, "billing-7");
    // Audit records (on by default).
    let story = bus.audit().for_message(&id);
    assert_eq!(story.len(), 2, "{story:?}");
    assert!(story.iter().all(|r| &*r.node == "billing-7"));
    // Metrics.
    let snap = bus.metrics();
    assert_eq!(snap.node_name, "billing-7");
    assert_eq!(snap.node_type, NodeType::Host);
    // Discovery: the topic table announced at start.
    let sync: TopicSync = decode(
        &watch
            .seen()
            .iter()
            .find(|s| s.label == "sync")
            .expect("a topic sync at start")
            .payload,
    );
    assert_eq!(sync.node, "billing-7");
    // Heartbeats: wait for the monitor's first batch.
    watch.wait_for(2, WAIT).await;
    let beat = loop {
        if let Some(beat) = watch.seen().into_iter().find(|s| s.label == "beat") {
            break beat;
        }
        watch.wait_for(watch.count() + 1, WAIT).await;
    };
    let workers: Vec<WorkerInfo> = decode(&beat.payload);
    assert!(!workers.is_empty());
    assert!(workers.iter().all(|w| w.node == "billing-7"), "{workers:?}");
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}

#[tokio::test]
async fn a_worker_node_leaves_the_system_topics_to_a_host() {
    let probe = Probe::new();
    let worker = event_base::builder()
        .node_name("w-1")
        .node_type(NodeType::Worker)
        .handler(probe.handler("orders", "orders", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    assert_eq!(worker.node_type(), NodeType::Worker);
    assert_eq!(worker.metrics().node_type, NodeType::Worker);
    let command = EMessage::json(
        SHUTDOWN,
        &ShutdownCommand {
            strategy: ShutdownStrategy::Force,
            reason: None,
        },
    )
    .unwrap();
    let err = worker.send(SHUTDOWN, command).await.unwrap_err();
    assert!(
        matches!(&err, CoreError::NoHandler { topic } if topic == SHUTDOWN),
        "{err:?}"
    );
    let err = worker
        .send(TOPIC_DISCOVERY, EMessage::standard(TOPIC_DISCOVERY, "{}"))
        .await
        .unwrap_err();
    assert!(matches!(err, CoreError::NoHandler { .. }), "{err:?}");
    assert!(worker.workers(SHUTDOWN).is_empty());
    // It still handles its own messages.
    worker.send("orders", "x").await.unwrap();
    worker.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count(), 1);

    // A host answers both.
    let host = event_base::builder()
        .node_type(NodeType::Host)
        .handler(Probe::new().handler("orders", "orders", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    assert_eq!(host.workers(SHUTDOWN).len(), 1);
    assert_eq!(host.workers(TOPIC_DISCOVERY).len(), 1);
}
