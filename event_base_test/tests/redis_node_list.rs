//! The node list on Redis: `EventBus::nodes` lists every process sharing the server, with its
//! node name, type, pid and workers, from the backend's records (the set of nodes, each
//! node's hash and its workers' list); an in-process bus has none to list. The gRPC server's
//! dashboard serves the same list at `GET /api/nodes`.
//!
//! Two buses with factories of their own stand for two processes (they share nothing but the
//! server).

use std::io::{Read, Write};
use std::time::Duration;

use event_base::backend::NodeRecord;
use event_base::grpc::GrpcServer;
use event_base::{Ack, EventBus, NodeType, RedisQueueFactory};
use event_base_test::redis_cluster::until;
use event_base_test::redis_server::RedisServer;
use event_base_test::{Probe, WAIT};

const BEAT: Duration = Duration::from_millis(100);

/// A bus named `name` of type `kind` on its own factory, with `workers` workers of `handler`
/// on `topic`.
async fn node(
    server: &RedisServer,
    name: &str,
    kind: NodeType,
    (handler, topic, workers): (&str, &str, usize),
) -> EventBus {
    let queue = RedisQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .heartbeat(BEAT);
    let probe = Probe::new();
    EventBus::builder()
        .node_name(name)
        .node_type(kind)
        .wal(queue.wal())
        .queue(queue)
        .handler(probe.handler(handler, topic, |_| Ack::Ack).workers(workers))
        .build()
        .await
        .unwrap()
}

/// The record of the node named `name`, if listed with its workers.
fn named<'a>(nodes: &'a [NodeRecord], name: &str) -> Option<&'a NodeRecord> {
    nodes
        .iter()
        .find(|n| n.name == name && !n.workers.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_is_listed_with_its_name_type_and_workers() {
    let server = RedisServer::start();
    let a = node(&server, "a", NodeType::Host, ("work", "jobs", 2)).await;
    let b = node(&server, "b", NodeType::Worker, ("mail", "emails", 1)).await;

    until("both nodes listed with their workers", async || {
        let nodes = a
            .nodes()
            .await
            .unwrap()
            .expect("Redis keeps a record of each node");
        named(&nodes, "a").is_some() && named(&nodes, "b").is_some()
    })
    .await;
    // Either bus sees the same list.
    let nodes = b.nodes().await.unwrap().unwrap();
    let (na, nb) = (named(&nodes, "a").unwrap(), named(&nodes, "b").unwrap());
    assert_ne!(na.id, nb.id, "each process has an id of its own");
    assert_eq!(na.kind, Some(NodeType::Host));
    assert_eq!(nb.kind, Some(NodeType::Worker));
    assert_eq!(
        na.pid,
        Some(std::process::id()),
        "both run in this test's process"
    );
    // Its workers, the bus's own (on `_system.` topics) besides the handler's.
    let mut workers: Vec<(&str, &str)> = na
        .workers
        .iter()
        .map(|w| (w.name.as_str(), w.topic.as_str()))
        .filter(|(_, topic)| !topic.starts_with("_system."))
        .collect();
    workers.sort();
    assert_eq!(workers, [("work-0", "jobs"), ("work-1", "jobs")]);
    assert!(nb.workers.iter().any(|w| w.name == "mail-0"));
    let age = std::time::SystemTime::now()
        .duration_since(na.last_seen)
        .unwrap_or_default();
    assert!(age < WAIT, "seen lately: {age:?} ago");
    drop((a, b));

    // An in-process backend keeps no record of processes.
    let memory = EventBus::builder()
        .wal(event_base::MemoryWal::new())
        .queue(event_base::FlumeQueueFactory::default())
        .handler(Probe::new().handler("h", "t", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    assert_eq!(memory.nodes().await.unwrap(), None);
}

/// `GET path` on `addr`, as curl would; the body.
async fn get(addr: std::net::SocketAddr, path: &str) -> String {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).unwrap();
        assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
        raw.split_once("\r\n\r\n").unwrap().1.to_owned()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_lists_the_nodes() {
    let server = RedisServer::start();
    let a = node(&server, "a", NodeType::Host, ("work", "jobs", 1)).await;
    let b = node(&server, "b", NodeType::Worker, ("mail", "emails", 1)).await;
    // Loopback and no tokens: open, as the example runs by default.
    let served = GrpcServer::builder(a.clone())
        .http_addr("127.0.0.1:0")
        .serve("127.0.0.1:0")
        .await
        .unwrap();
    let http = served.http_addr().unwrap();

    until("both nodes on the dashboard", async || {
        let body: serde_json::Value = serde_json::from_str(&get(http, "/api/nodes").await).unwrap();
        let nodes = body["nodes"].as_array().unwrap().clone();
        ["a", "b"].iter().all(|name| {
            nodes.iter().any(|n| {
                n["name"] == *name && n["workers"].as_array().is_some_and(|w| !w.is_empty())
            })
        })
    })
    .await;
    let body: serde_json::Value = serde_json::from_str(&get(http, "/api/nodes").await).unwrap();
    let b_node = body["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "b")
        .unwrap();
    assert_eq!(b_node["node_type"], "worker");
    assert_eq!(b_node["workers"][0]["name"], "mail-0");
    assert_eq!(b_node["workers"][0]["topic"], "emails");
    served.shutdown().await.unwrap();
    drop((a, b));
}
