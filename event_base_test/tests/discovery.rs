//! Worker discovery and topic sync inside one process: workers announce joining, leaving and
//! dying on `_system.worker_discovery` (dying: `stale_worker_redelivery.rs`); a request on
//! `_system.topic_discovery` is answered on `_system.topic_sync` with the node's topic table;
//! `_system.worker_heartbeat` says what every worker is doing, every heartbeat interval.

use std::time::Duration;

use event_base::constant::{TOPIC_DISCOVERY, TOPIC_SYNC, WORKER_DISCOVERY, WORKER_HEARTBEAT};
use event_base::{
    Ack, DiscoveryEvent, EMessage, ShutdownStrategy, TopicDiscovery, TopicSync, WorkerDiscovery,
    WorkerInfo, WorkerStatus,
};
use event_base_test::{decode, Gate, Probe, Seen, WAIT};

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

/// The heartbeats published so far, oldest first.
fn beats(seen: &[Seen]) -> Vec<Vec<WorkerInfo>> {
    seen.iter()
        .filter(|s| s.label == "beat")
        .map(|s| decode(&s.payload))
        .collect()
}

/// The line of worker `name` in a heartbeat.
fn line<'a>(beat: &'a [WorkerInfo], name: &str) -> Option<&'a WorkerInfo> {
    beat.iter().find(|w| w.name == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_say_what_each_worker_is_doing_every_interval() {
    let probe = Probe::new();
    let watch = Probe::new();
    let gate = Gate::new();
    let bus = event_base::builder()
        .heartbeat(Duration::from_millis(20), Duration::from_secs(60))
        .handler(
            probe
                .gated_handler("orders", "orders", &gate, |_| Ack::Ack)
                .workers(2),
        )
        .handler(watch.handler("beat", WORKER_HEARTBEAT, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let id = bus.send("orders", "x").await.unwrap();
    probe.wait_for(1, WAIT).await;
    let busy = bus
        .registry()
        .list()
        .into_iter()
        .find(|w| w.current_message.as_deref() == Some(id.as_str()))
        .expect("a worker holds the message")
        .name;
    let idle = if busy == "orders-0" {
        "orders-1"
    } else {
        "orders-0"
    };

    // While the handler is held, beat after beat says so.
    let working = |beat: &[WorkerInfo]| {
        line(beat, &busy).is_some_and(|w| {
            w.status == WorkerStatus::Working && w.current_message.as_deref() == Some(id.as_str())
        }) && line(beat, idle).is_some_and(|w| w.status == WorkerStatus::Idle)
    };
    watch
        .wait_until("three heartbeats of the held worker", WAIT, |seen| {
            beats(seen).iter().filter(|b| working(b)).count() >= 3
        })
        .await;
    for beat in beats(&watch.seen()) {
        assert!(beat.iter().all(|w| w.node == bus.node_name()), "{beat:?}");
    }

    // Once it is done, a later beat shows it idle again, with the delivery counted.
    gate.open();
    watch
        .wait_until("a heartbeat of the worker idle again", WAIT, |seen| {
            beats(seen).iter().any(|b| {
                line(b, &busy).is_some_and(|w| {
                    w.status == WorkerStatus::Idle
                        && w.current_message.is_none()
                        && w.processed == 1
                })
            })
        })
        .await;
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}
