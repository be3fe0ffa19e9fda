//! Worker discovery and topic sync inside one process: workers announce joining, leaving and
//! dying on `_system.worker_discovery`; a request on `_system.topic_discovery` is answered on
//! `_system.topic_sync` with the node's topic table.

use std::time::Duration;

use event_base::constant::{TOPIC_DISCOVERY, TOPIC_SYNC, WORKER_DISCOVERY};
use event_base::{
    Ack, DiscoveryEvent, EMessage, ShutdownStrategy, TopicDiscovery, TopicSync, WorkerDiscovery,
};
use event_base_test::{decode, Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_announce_themselves_and_topics_are_discoverable() {
    let probe = Probe::new();
    let watch = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("orders", "orders", |_| Ack::Ack).workers(2))
        .handler(watch.handler("discovery", WORKER_DISCOVERY, |_| Ack::Ack))
        .handler(watch.handler("sync", TOPIC_SYNC, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    bus.wait_idle(WAIT).await.unwrap();

    // A request is answered with the topic table.
    let request = EMessage::json(
        TOPIC_DISCOVERY,
        &TopicDiscovery {
            from: Some("test".into()),
        },
    )
    .unwrap();
    bus.send(TOPIC_DISCOVERY, request).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let syncs = watch.seen().iter().filter(|s| s.label == "sync").count();
    assert_eq!(syncs, 2, "one at start, one answer");

    // Scale up, then stop a worker: both are announced.
    bus.add_workers("orders", 1).await.unwrap();
    bus.shutdown(ShutdownStrategy::Graceful {
        worker_name: "orders-0".into(),
        poll_interval: Duration::from_millis(10),
    })
    .await
    .unwrap();
    bus.wait_idle(WAIT).await.unwrap();

    let events: Vec<WorkerDiscovery> = watch
        .seen()
        .iter()
        .filter(|s| s.label == "discovery")
        .map(|s| decode(&s.payload))
        .collect();
    let of = |name: &str, e: DiscoveryEvent| {
        events
            .iter()
            .filter(|d| d.worker.name == name && d.event == e)
            .count()
    };
    assert_eq!(of("orders-2", DiscoveryEvent::Joined), 1, "{events:?}");
    assert_eq!(of("orders-0", DiscoveryEvent::Left), 1, "{events:?}");

    let syncs: Vec<TopicSync> = watch
        .seen()
        .iter()
        .filter(|s| s.label == "sync")
        .map(|s| decode(&s.payload))
        .collect();
    let first = syncs.first().expect("a topic sync at start");
    let orders = first.topics.iter().find(|t| t.topic == "orders").unwrap();
    assert_eq!(orders.workers.len(), 2);
}
