//! Discovery across the nodes of a bus on Redis: a subscriber on one node sees the
//! `WorkerDiscovery` events and the topic tables of every node, a `TopicDiscovery` request
//! is answered by every node, and the shutdown acks of the other nodes reach the node that
//! sent the shutdown command, which stops nodes of type `Worker` too. Two buses with factories of their own stand for two
//! processes (they share nothing but the server); `redis_discovery_process.rs` runs the
//! other node as a real process.

use std::time::Duration;

use event_base::constant::{SHUTDOWN_ACK, TOPIC_DISCOVERY, TOPIC_SYNC, WORKER_DISCOVERY};
use event_base::{
    Ack, DiscoveryEvent, EMessage, EventBus, NodeType, RedisQueueFactory, ShutdownAck,
    ShutdownStrategy, TopicDiscovery, TopicSync, WorkerDiscovery,
};
use event_base_test::redis_cluster::{any_registered, until};
use event_base_test::redis_server::RedisServer;
use event_base_test::shutdown_scenario::send_drain_command;
use event_base_test::{decode, Probe, Seen, WAIT};

const BEAT: Duration = Duration::from_millis(200);

async fn factory(server: &RedisServer) -> RedisQueueFactory {
    RedisQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .heartbeat(BEAT)
}

fn events(seen: &[Seen]) -> Vec<WorkerDiscovery> {
    seen.iter()
        .filter(|s| s.label == "discovery")
        .map(|s| decode(&s.payload))
        .collect()
}

fn has_event(seen: &[Seen], node: &str, worker: &str, event: DiscoveryEvent) -> bool {
    events(seen)
        .iter()
        .any(|d| d.worker.node == node && d.worker.name == worker && d.event == event)
}

fn syncs(seen: &[Seen]) -> Vec<TopicSync> {
    seen.iter()
        .filter(|s| s.label == "sync")
        .map(|s| decode(&s.payload))
        .collect()
}

/// Node `a`: watches discovery and topic tables.
async fn watcher(server: &RedisServer, watch: &std::sync::Arc<Probe>) -> EventBus {
    let queue = factory(server).await;
    let bus = EventBus::builder()
        .node_name("a")
        .wal(queue.wal())
        .queue(queue.clone())
        .handler(watch.handler("discovery", WORKER_DISCOVERY, |_| Ack::Ack))
        .handler(watch.handler("sync", TOPIC_SYNC, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    any_registered(&queue, WORKER_DISCOVERY).await;
    any_registered(&queue, TOPIC_SYNC).await;
    bus
}

/// Node `b`: one handler, `work` on `jobs`, and no subscriber of its own.
async fn worker_node(server: &RedisServer, name: &str) -> EventBus {
    node_of_type(server, name, NodeType::Host).await
}

/// [`worker_node`] of the given type.
async fn node_of_type(server: &RedisServer, name: &str, kind: NodeType) -> EventBus {
    let queue = factory(server).await;
    let probe = Probe::new();
    EventBus::builder()
        .node_name(name)
        .node_type(kind)
        .wal(queue.wal())
        .queue(queue)
        .handler(probe.handler("work", "jobs", |_| Ack::Ack))
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_on_one_node_sees_the_workers_of_another_join_and_leave() {
    let server = RedisServer::start();
    let watch = Probe::new();
    let a = watcher(&server, &watch).await;
    let b = worker_node(&server, "b").await;

    // B's start: its worker joined, and its topic table, both published on A.
    watch
        .wait_until("b's work-0 joined", WAIT, |s| {
            has_event(s, "b", "work-0", DiscoveryEvent::Joined)
        })
        .await;
    watch
        .wait_until("b's topic table", WAIT, |s| {
            syncs(s).iter().any(|t| t.node == "b")
        })
        .await;
    let table = syncs(&watch.seen())
        .into_iter()
        .find(|t| t.node == "b")
        .unwrap();
    let jobs = table.topics.iter().find(|t| t.topic == "jobs").unwrap();
    assert_eq!(jobs.workers, ["work-0"]);

    // Scaled up and down on B, seen on A.
    assert_eq!(b.add_workers("work", 1).await.unwrap(), ["work-1"]);
    b.remove_worker("work-0").await.unwrap();
    watch
        .wait_until("b's work-1 joined and work-0 left", WAIT, |s| {
            has_event(s, "b", "work-1", DiscoveryEvent::Joined)
                && has_event(s, "b", "work-0", DiscoveryEvent::Left)
        })
        .await;
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_discovery_request_is_answered_by_every_node() {
    let server = RedisServer::start();
    let watch = Probe::new();
    let a = watcher(&server, &watch).await;
    let b = worker_node(&server, "b").await;
    let c = worker_node(&server, "c").await;
    // Each node reads the requests through a group of its own.
    let stream = "eb:{_system.topic_discovery}:bc:event_base.topic_discovery";
    until("three nodes read topic discovery requests", || async {
        server.command(&["XINFO", "GROUPS", stream]) == "*3"
    })
    .await;
    // The tables each node published at start are not the answers looked for.
    watch
        .wait_until("b's and c's tables at start", WAIT, |s| {
            let t = syncs(s);
            t.iter().any(|t| t.node == "b") && t.iter().any(|t| t.node == "c")
        })
        .await;
    let before = watch.seen().len();

    let request = EMessage::json(
        TOPIC_DISCOVERY,
        &TopicDiscovery {
            from: Some("a".into()),
        },
    )
    .unwrap();
    a.send(TOPIC_DISCOVERY, request).await.unwrap();
    watch
        .wait_until("every node answered", WAIT, |s| {
            let answers = syncs(&s[before..]);
            ["a", "b", "c"]
                .iter()
                .all(|n| answers.iter().any(|t| t.node == *n))
        })
        .await;
    let answers = syncs(&watch.seen()[before..]);
    let b_table = answers.iter().find(|t| t.node == "b").unwrap();
    assert!(b_table.topics.iter().any(|t| t.topic == "jobs"));
    let a_table = answers.iter().find(|t| t.node == "a").unwrap();
    assert!(!a_table.topics.iter().any(|t| t.topic == "jobs"));
    // Once each: one request, one answer per node.
    for n in ["a", "b", "c"] {
        assert_eq!(answers.iter().filter(|t| t.node == n).count(), 1, "{n}");
    }
    drop((a, b, c));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_command_stops_the_other_node_and_its_acks_reach_the_sender() {
    shutdown_command_stops_a_node_of_type(NodeType::Host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_command_stops_a_worker_node_too() {
    shutdown_command_stops_a_node_of_type(NodeType::Worker).await;
}

/// Node `a` sends a `Drain` command; node `b`, of type `kind`, stops and its acks reach
/// `a`'s subscriber.
async fn shutdown_command_stops_a_node_of_type(kind: NodeType) {
    let server = RedisServer::start();
    let acks = Probe::new();
    let queue = factory(&server).await;
    let a = EventBus::builder()
        .node_name("a")
        .wal(queue.wal())
        .queue(queue.clone())
        .handler(acks.handler("jobs", "jobs", |_| Ack::Ack))
        .handler(acks.handler("acks", SHUTDOWN_ACK, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    any_registered(&queue, SHUTDOWN_ACK).await;
    let b = node_of_type(&server, "b", kind).await;
    b.add_workers("work", 1).await.unwrap();
    until("both nodes read shutdown commands", || async {
        server.command(&[
            "XINFO",
            "GROUPS",
            "eb:{_system.shutdown}:bc:event_base.shutdown",
        ]) == "*2"
    })
    .await;

    send_drain_command(&a).await;
    tokio::time::timeout(WAIT, b.shutdown_started())
        .await
        .expect("the other node stopped");
    let ack_of =
        |s: &Seen| -> Option<ShutdownAck> { (s.label == "acks").then(|| decode(&s.payload)) };
    acks.wait_until("b's two acks and a's own", WAIT, |s| {
        let got: Vec<ShutdownAck> = s.iter().filter_map(ack_of).collect();
        got.iter().filter(|a| a.node == "b").count() == 2
            && got.iter().any(|a| a.node == "a" && a.worker == "jobs-0")
    })
    .await;
    let mut from_b: Vec<ShutdownAck> = acks
        .seen()
        .iter()
        .filter_map(ack_of)
        .filter(|a| a.node == "b")
        .collect();
    from_b.sort_by(|x, y| x.worker.cmp(&y.worker));
    assert_eq!(from_b[0].worker, "work-0");
    assert_eq!(from_b[1].worker, "work-1");
    assert!(from_b
        .iter()
        .all(|a| a.topic == "jobs" && a.outcome == event_base::WorkerOutcome::Completed));
    for bus in [a, b] {
        tokio::time::timeout(WAIT, bus.shutdown(ShutdownStrategy::Force))
            .await
            .expect("the shutdown ended")
            .unwrap();
    }
}
