//! `to_worker` across nodes on Redis: `to_worker: "<node id>/<worker>"` is handled by that
//! worker of that node only, whichever bus sends it (a node running the handler, or a bus
//! with no handler); the entry goes to the subscription's broadcast stream, which the other
//! nodes ack unread. A node that does not read the stream (unknown, or evicted) and a name
//! no handler of the topic has are refused at send with `UnknownWorker`; a worker the named
//! node does not have is a dead letter there (`DeadReason::UnknownWorker`). An unqualified
//! name keeps its meaning: a worker of that name in whichever node claims the entry. A
//! `send_batch` may mix addressed and plain messages: each goes where a `send` of it would,
//! and a node named that does not read the stream refuses the whole batch before any of it
//! is sent. An addressed dead letter is replayed to the same worker of the same node, and
//! refused with `UnknownWorker` (it stays a dead letter) when that node is gone. A node may
//! be named by its name instead of its id, when exactly one running node of that name runs
//! the handler; a bus's node is registered under the bus's builder name and type (a
//! `Worker` never holds the janitor lease).
//!
//! Buses in one process with factories of their own stand for nodes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_base::{
    handler_fn, Ack, CoreError, DeadReason, DeliveryMode, EMessage, EventBus, HandlerSpec,
    NodeType, RedisQueueFactory, ShutdownStrategy,
};
use event_base_test::redis_cluster::until;
use event_base_test::redis_server::RedisServer;
use event_base_test::{Probe, WAIT};

const TOPIC: &str = "jobs";
const HANDLER: &str = "sync";
const BCAST: &str = "eb:{jobs}:b:sync";
const WORK: &str = "eb:{jobs}:s:sync";
const WORKERS: usize = 2;

/// The names of the groups on the broadcast stream.
fn groups(server: &RedisServer) -> Vec<String> {
    server
        .query(&["XINFO", "GROUPS", BCAST])
        .items()
        .iter()
        .filter_map(|g| g.items().get(1).and_then(|n| n.as_str()).map(str::to_owned))
        .collect()
}

/// A node and its id: a bus over a factory of its own with `handlers`, once its group on
/// the broadcast stream exists (made by its first claim) if it runs one.
async fn node(server: &RedisServer, handlers: Vec<HandlerSpec>) -> (EventBus, String) {
    node_beating(server, handlers, Duration::from_millis(100)).await
}

/// [`node`], beating every `beat`.
async fn node_beating(
    server: &RedisServer,
    handlers: Vec<HandlerSpec>,
    beat: Duration,
) -> (EventBus, String) {
    let queue = RedisQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .heartbeat(beat);
    let id = queue.node_id().to_owned();
    let group = format!("n:{id}");
    let any = !handlers.is_empty();
    let bus = event_base_test::redis_cluster::bus_over(queue, handlers).await;
    if any {
        until("the node's broadcast group made", async || {
            groups(server).contains(&group)
        })
        .await;
        // An addressable node is found by name: its first beat comes before its group.
        let hash = format!("eb:{{nodes}}:n:{id}");
        assert_eq!(
            server.command(&["HGET", &hash, "name"]),
            event_base::node_name(),
            "the node's hash names it once its group exists"
        );
    }
    (bus, id)
}

/// A node running `sync` of `jobs` with [`WORKERS`] workers, recording into `probe`.
async fn syncing(server: &RedisServer, probe: &Arc<Probe>) -> (EventBus, String) {
    let spec = probe.handler(HANDLER, TOPIC, |_| Ack::Ack).workers(WORKERS);
    node(server, vec![spec]).await
}

fn addressed(to: &str, payload: &str) -> EMessage {
    EMessage::new(
        TOPIC,
        payload.as_bytes().to_vec(),
        DeliveryMode::Standard,
        Some(to.to_owned()),
    )
}

/// Deliveries the worker `name` of `bus` finished.
fn processed(bus: &EventBus, name: &str) -> u64 {
    bus.registry().get(name).map_or(0, |w| w.processed)
}

/// Waits until every node's bus is idle and every group on the broadcast stream acked
/// everything it read, so counts read afterwards are final.
async fn settled(server: &RedisServer, buses: &[&EventBus]) {
    for bus in buses {
        bus.wait_idle(WAIT).await.unwrap();
    }
    until(
        "every broadcast-stream entry acked by every group",
        async || {
            let reply = server.query(&["XINFO", "GROUPS", BCAST]);
            reply.items().iter().all(|g| {
                g.items()
                    .chunks(2)
                    .any(|kv| kv[0].as_str() == Some("pending") && kv[1].as_int() == Some(0))
            })
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_of_one_node_handles_what_is_addressed_to_it_from_any_bus() {
    let server = RedisServer::start();
    let probes: Vec<Arc<Probe>> = (0..3).map(|_| Probe::new()).collect();
    let mut nodes = Vec::new();
    for p in &probes {
        nodes.push(syncing(&server, p).await);
    }
    let (sender, _) = node(&server, vec![]).await;
    let target = format!("{}/{HANDLER}-1", nodes[1].1);
    // From another node, from a bus with no handler, and from the target node itself; in
    // every mode (an addressed message is the worker's alone; Repeated(n): n times by it).
    let mut ids = Vec::new();
    for i in 0..30 {
        let mut msg = addressed(&target, &format!("m{i}"));
        msg.delivery_mode = match i % 3 {
            0 => DeliveryMode::Standard,
            1 => DeliveryMode::Broadcast,
            _ => DeliveryMode::Repeated(2),
        };
        let from = match i % 3 {
            0 => &nodes[0].0,
            1 => &sender,
            _ => &nodes[1].0,
        };
        ids.push((from.send(TOPIC, msg).await.unwrap().to_string(), i % 3));
    }
    let expected: usize = ids.iter().map(|(_, k)| if *k == 2 { 2 } else { 1 }).sum();
    probes[1].wait_for(expected, WAIT).await;
    let buses: Vec<&EventBus> = nodes.iter().map(|(b, _)| b).collect();
    settled(&server, &buses).await;
    for (id, kind) in &ids {
        let times = if *kind == 2 { 2 } else { 1 };
        assert_eq!(probes[1].count_of(id), times, "{id}: by the node addressed");
    }
    assert_eq!(
        probes[1].count(),
        expected,
        "nothing else on the node addressed"
    );
    assert_eq!(probes[0].count(), 0, "another node handles none");
    assert_eq!(probes[2].count(), 0, "another node handles none");
    assert_eq!(processed(&nodes[1].0, "sync-1"), expected as u64);
    assert_eq!(processed(&nodes[1].0, "sync-0"), 0, "only the worker named");
    // Nothing went to the work stream; the broadcast stream is trimmed as every group acks
    // (the newest entry stays as the groups' mark).
    assert_eq!(server.query(&["XLEN", WORK]).as_int(), Some(0));
    until("the broadcast stream trimmed", async || {
        server.query(&["XLEN", BCAST]).as_int() == Some(1)
    })
    .await;
    // Due later: kept in Redis, then handled by that worker when due.
    let later = addressed(&target, "later").with_delay(Duration::from_millis(200));
    let id = sender.send(TOPIC, later).await.unwrap().to_string();
    probes[1].wait_for(expected + 1, WAIT).await;
    assert_eq!(probes[1].count_of(&id), 1);
    settled(&server, &buses).await;
    assert_eq!(probes[0].count() + probes[2].count(), 0);
    assert_eq!(processed(&nodes[1].0, "sync-1"), expected as u64 + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_node_or_handler_is_refused_and_an_unknown_worker_is_a_dead_letter() {
    let server = RedisServer::start();
    let (a_probe, b_probe, c_probe) = (Probe::new(), Probe::new(), Probe::new());
    let (a, _) = syncing(&server, &a_probe).await;
    let (b, b_id) = syncing(&server, &b_probe).await;
    let (c, c_id) = syncing(&server, &c_probe).await;
    let (sender, _) = node(&server, vec![]).await;
    let refused = |r: Result<event_base::MessageId, CoreError>, worker: &str| match r {
        Err(CoreError::UnknownWorker { topic, worker: w }) => {
            assert_eq!(topic, TOPIC);
            assert_eq!(w, worker);
        }
        other => panic!("expected UnknownWorker for {worker}, got {other:?}"),
    };
    // A node no one runs, from a node and from a bus with no handler.
    for bus in [&a, &sender] {
        let to = "1-nobody/sync-0";
        refused(bus.send(TOPIC, addressed(to, "x")).await, to);
    }
    // Due later too: the node is looked for at send.
    let to = "1-nobody/sync-0";
    let later = addressed(to, "x").with_delay(Duration::from_secs(60));
    refused(a.send(TOPIC, later).await, to);
    // A worker no handler of the topic can have.
    let to = format!("{b_id}/ship-0");
    refused(a.send(TOPIC, addressed(&to, "x")).await, &to);
    // A node that stopped: refused once the janitor evicted it (its group is gone).
    c.shutdown(ShutdownStrategy::Force).await.unwrap();
    drop(c);
    let c_group = format!("n:{c_id}");
    until("the stopped node's group destroyed", async || {
        !groups(&server).contains(&c_group)
    })
    .await;
    let to = format!("{c_id}/sync-0");
    refused(sender.send(TOPIC, addressed(&to, "x")).await, &to);
    // A live node without that worker: a dead letter there, with the reason.
    let to = format!("{b_id}/sync-9");
    let id = sender
        .send(TOPIC, addressed(&to, "x"))
        .await
        .unwrap()
        .to_string();
    let mut dead = Vec::new();
    until("the dead letter written", async || {
        dead = a.dead_letters().await.unwrap();
        !dead.is_empty()
    })
    .await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].message.id, id);
    assert_eq!(dead[0].reason, DeadReason::UnknownWorker(to.clone()));
    settled(&server, &[&a, &b]).await;
    assert_eq!(a_probe.count() + b_probe.count() + c_probe.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unqualified_name_is_a_worker_of_that_name_in_whichever_node_claims_it() {
    let server = RedisServer::start();
    let probes: Vec<Arc<Probe>> = (0..2).map(|_| Probe::new()).collect();
    let mut nodes = Vec::new();
    for p in &probes {
        nodes.push(syncing(&server, p).await);
    }
    let n = 20;
    for i in 0..n {
        let msg = addressed("sync-1", &format!("u{i}"));
        nodes[0].0.send(TOPIC, msg).await.unwrap();
    }
    until("every message handled", async || {
        probes.iter().map(|p| p.count()).sum::<usize>() >= n
    })
    .await;
    until("the work stream empty (every entry acked)", async || {
        server.query(&["XLEN", WORK]).as_int() == Some(0)
    })
    .await;
    // (Not `wait_idle` on the sender: a message its own handler could have taken counts
    // there until that handler finishes it, and another node may have claimed it.)
    let by_name = |name: &str| -> u64 { nodes.iter().map(|(b, _)| processed(b, name)).sum() };
    until("every message finished by a `sync-1`", async || {
        by_name("sync-1") >= n as u64
    })
    .await;
    assert_eq!(by_name("sync-1"), n as u64, "each once, by a `sync-1`");
    assert_eq!(by_name("sync-0"), 0);
    // A bus that runs no handler of the topic has no worker of that name.
    let (sender, _) = node(&server, vec![]).await;
    assert!(matches!(
        sender.send(TOPIC, addressed("sync-1", "x")).await,
        Err(CoreError::UnknownWorker { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_node_evicted_before_it_read_it_had_addressed_to_it_is_a_dead_letter() {
    let server = RedisServer::start();
    // Beats slow enough that the stopped node is still a member (its group still on the
    // stream) when the send below is made: three beats, 1.5 s.
    let beat = Duration::from_millis(500);
    let (a_probe, b_probe) = (Probe::new(), Probe::new());
    let spec = |p: &Arc<Probe>| p.handler(HANDLER, TOPIC, |_| Ack::Ack).workers(WORKERS);
    let (a, _) = node_beating(&server, vec![spec(&a_probe)], beat).await;
    let (b, b_id) = node_beating(&server, vec![spec(&b_probe)], beat).await;
    b.shutdown(ShutdownStrategy::Force).await.unwrap();
    drop(b);
    let b_group = format!("n:{b_id}");
    assert!(groups(&server).contains(&b_group), "not evicted yet");
    let to = format!("{b_id}/sync-0");
    let mut ids = vec![a
        .send(TOPIC, addressed(&to, "late"))
        .await
        .unwrap()
        .to_string()];
    // And one still waiting in the delayed set when the node is evicted.
    let later = addressed(&to, "later").with_delay(Duration::from_secs(60));
    ids.push(a.send(TOPIC, later).await.unwrap().to_string());
    until("the stopped node's group destroyed", async || {
        !groups(&server).contains(&b_group)
    })
    .await;
    let dead = a.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 2, "{dead:?}");
    let mut dead_ids: Vec<String> = dead.iter().map(|d| d.message.id.clone()).collect();
    dead_ids.sort();
    ids.sort();
    assert_eq!(dead_ids, ids);
    for d in &dead {
        assert_eq!(d.handlers, vec![HANDLER.to_owned()]);
        let reason = d.reason.to_string();
        assert!(
            reason.contains(&format!("node `{b_id}` was evicted")),
            "{reason}"
        );
    }
    assert_eq!(
        server.query(&["ZCARD", "eb:{jobs}:d:sync"]).as_int(),
        Some(0),
        "taken out of the delayed set"
    );
    // Replayed to the same node, which is gone: refused, saying what to do, and both stay
    // dead letters (one at a time, and all at once).
    match a.replay_dead_letter(&ids[0]).await {
        Err(e @ CoreError::UnknownWorker { .. }) => {
            let text = e.to_string();
            assert!(text.contains(&to), "{text}");
            assert!(text.contains("naming a running node"), "{text}");
        }
        other => panic!("expected UnknownWorker, got {other:?}"),
    }
    assert!(matches!(
        a.replay_dead_letters().await,
        Err(CoreError::UnknownWorker { .. })
    ));
    assert_eq!(a.dead_letters().await.unwrap().len(), 2);
    settled(&server, &[&a]).await;
    assert_eq!(a_probe.count() + b_probe.count(), 0, "nobody handled it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_with_an_outbox_cannot_address_a_node_yet() {
    let server = RedisServer::start();
    let probe = Probe::new();
    let (b, b_id) = syncing(&server, &probe).await;
    let answers: Arc<Mutex<Vec<String>>> = Arc::default();
    let (recorder, to) = (answers.clone(), format!("{b_id}/sync-0"));
    let relay = HandlerSpec::new(
        "relay",
        "in",
        handler_fn(move |_: EMessage| {
            let (recorder, to) = (recorder.clone(), to.clone());
            async move {
                let sent = event_base::TopicRouter::global()
                    .send(TOPIC, addressed(&to, "held?"), None, None)
                    .await;
                let answer = match sent {
                    Err(CoreError::Config(text)) if text.contains("outbox") => "refused".into(),
                    other => format!("{other:?}"),
                };
                recorder.lock().unwrap().push(answer);
                Ack::Ack
            }
        }),
    )
    .outbox(true);
    let queue = RedisQueueFactory::connect(&server.url()).await.unwrap();
    let a = event_base_test::redis_cluster::bus_over(queue, vec![relay]).await;
    a.send("in", b"go".to_vec()).await.unwrap();
    until("the relay answered", async || {
        !answers.lock().unwrap().is_empty()
    })
    .await;
    assert_eq!(*answers.lock().unwrap(), vec!["refused".to_owned()]);
    settled(&server, &[&a, &b]).await;
    assert_eq!(probe.count(), 0, "nothing reached the node");
}

/// How many entries were ever added to the stream `key` (0 before it exists).
fn entries_added(server: &RedisServer, key: &str) -> i64 {
    let reply = server.query(&["XINFO", "STREAM", key]);
    reply
        .items()
        .chunks(2)
        .find(|kv| kv[0].as_str() == Some("entries-added"))
        .and_then(|kv| kv[1].as_int())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_mixing_addressed_and_plain_messages_sends_each_where_a_send_would() {
    let server = RedisServer::start();
    let probes: Vec<Arc<Probe>> = (0..2).map(|_| Probe::new()).collect();
    let mut nodes = Vec::new();
    for p in &probes {
        nodes.push(syncing(&server, p).await);
    }
    let (sender, _) = node(&server, vec![]).await;
    let to_b = format!("{}/{HANDLER}-1", nodes[1].1);
    let to_a = format!("{}/{HANDLER}-0", nodes[0].1);
    // From a node running the handler (the topic's route is local) and from a bus with no
    // handler of it (routed by the registry): every third message for node B, every third
    // for node A, the rest for no node in particular; one addressed one due a bit later.
    let mut plain = Vec::new();
    let mut for_a = Vec::new();
    let mut for_b = Vec::new();
    for (round, bus) in [&nodes[0].0, &sender].into_iter().enumerate() {
        let mut batch = Vec::new();
        for i in 0..12 {
            let payload = format!("r{round}-{i}");
            let msg = match i % 3 {
                0 => addressed(&to_b, &payload),
                1 => EMessage::new(TOPIC, payload.into_bytes(), DeliveryMode::Standard, None),
                _ => addressed(&to_a, &payload),
            };
            let msg = match i {
                9 => msg.with_delay(Duration::from_millis(200)),
                _ => msg,
            };
            match i % 3 {
                0 => for_b.push(msg.id.clone()),
                1 => plain.push(msg.id.clone()),
                _ => for_a.push(msg.id.clone()),
            }
            batch.push(msg);
        }
        let sent: Vec<String> = batch.iter().map(|m| m.id.clone()).collect();
        let ids = bus.send_batch(TOPIC, batch).await.unwrap();
        let ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
        assert_eq!(ids, sent, "the ids, in the batch's order");
    }
    let total = plain.len() + for_a.len() + for_b.len();
    until("every message handled", async || {
        probes.iter().map(|p| p.count()).sum::<usize>() >= total
    })
    .await;
    let buses: Vec<&EventBus> = nodes.iter().map(|(b, _)| b).collect();
    settled(&server, &buses).await;
    for id in &for_b {
        assert_eq!(probes[1].count_of(id), 1, "{id}: by node B");
        assert_eq!(probes[0].count_of(id), 0, "{id}: not by node A");
    }
    for id in &for_a {
        assert_eq!(probes[0].count_of(id), 1, "{id}: by node A");
        assert_eq!(probes[1].count_of(id), 0, "{id}: not by node B");
    }
    for id in &plain {
        let times = probes[0].count_of(id) + probes[1].count_of(id);
        assert_eq!(times, 1, "{id}: once, by either node");
    }
    assert_eq!(probes.iter().map(|p| p.count()).sum::<usize>(), total);
    // The workers named handled every addressed one (and, of the plain ones, their share).
    let addressed_to = |bus: &EventBus, name: &str| processed(bus, name);
    assert!(addressed_to(&nodes[1].0, "sync-1") >= for_b.len() as u64);
    assert!(addressed_to(&nodes[0].0, "sync-0") >= for_a.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_naming_a_node_that_does_not_read_the_stream_is_refused_before_any_is_sent() {
    let server = RedisServer::start();
    let (a_probe, b_probe) = (Probe::new(), Probe::new());
    let (a, _) = syncing(&server, &a_probe).await;
    let (b, b_id) = syncing(&server, &b_probe).await;
    let (sender, _) = node(&server, vec![]).await;
    let before = (entries_added(&server, WORK), entries_added(&server, BCAST));
    let plain = || EMessage::new(TOPIC, b"p".to_vec(), DeliveryMode::Standard, None);
    let b_worker = format!("{b_id}/sync-0");
    for bus in [&a, &sender] {
        // A node no one runs, after plain ones and one for a live node.
        for gone in ["1-nobody/sync-0", "1-nobody/sync-1"] {
            let batch = vec![
                plain(),
                addressed(&b_worker, "b"),
                plain(),
                addressed(gone, "x"),
            ];
            match bus.send_batch(TOPIC, batch).await {
                Err(CoreError::UnknownWorker { topic, worker }) => {
                    assert_eq!((topic.as_str(), worker.as_str()), (TOPIC, gone));
                }
                other => panic!("expected UnknownWorker for {gone}, got {other:?}"),
            }
        }
        // A worker no handler of the topic can have, on a live node.
        let to = format!("{b_id}/ship-0");
        let batch = vec![plain(), addressed(&to, "x")];
        assert!(
            matches!(
                bus.send_batch(TOPIC, batch).await,
                Err(CoreError::UnknownWorker { worker, .. }) if worker == to
            ),
            "a worker no handler has"
        );
    }
    // Nothing of the refused batches was added to either stream, nor left in a WAL.
    assert_eq!(
        (entries_added(&server, WORK), entries_added(&server, BCAST)),
        before
    );
    // A batch that is sent afterwards is handled whole, and alone.
    let ids = sender
        .send_batch(TOPIC, vec![plain(), addressed(&b_worker, "b")])
        .await
        .unwrap();
    until("the last batch handled", async || {
        a_probe.count() + b_probe.count() >= 2
    })
    .await;
    settled(&server, &[&a, &b]).await;
    assert_eq!(a_probe.count() + b_probe.count(), 2, "only the batch sent");
    assert_eq!(b_probe.count_of(ids[1].as_ref()), 1);
    assert_eq!(
        a_probe.count_of(ids[0].as_ref()) + b_probe.count_of(ids[0].as_ref()),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_addressed_dead_letter_is_replayed_to_the_same_worker_of_the_same_node() {
    let server = RedisServer::start();
    let fixed = Arc::new(AtomicBool::new(false));
    let probes: Vec<Arc<Probe>> = (0..2).map(|_| Probe::new()).collect();
    let mut nodes = Vec::new();
    for p in &probes {
        let fixed = fixed.clone();
        let spec = p
            .handler(HANDLER, TOPIC, move |m: &EMessage| {
                match m.payload.0.starts_with(b"doomed") && !fixed.load(Ordering::SeqCst) {
                    true => Ack::NoAck {
                        retry_after: None,
                        max_retries: 1,
                    },
                    false => Ack::Ack,
                }
            })
            .workers(WORKERS);
        nodes.push(node(&server, vec![spec]).await);
    }
    let (sender, _) = node(&server, vec![]).await;
    let to_b = format!("{}/{HANDLER}-1", nodes[1].1);
    let to_a = format!("{}/{HANDLER}-0", nodes[0].1);
    let for_b = sender
        .send(TOPIC, addressed(&to_b, "doomed-b"))
        .await
        .unwrap()
        .to_string();
    let for_a = sender
        .send(TOPIC, addressed(&to_a, "doomed-a"))
        .await
        .unwrap()
        .to_string();
    let mut dead = Vec::new();
    until("both dead letters written", async || {
        dead = sender.dead_letters().await.unwrap();
        dead.len() >= 2
    })
    .await;
    assert_eq!(dead.len(), 2, "{dead:?}");
    for d in &dead {
        assert_eq!(d.reason, DeadReason::MaxRetriesExceeded);
        assert_eq!(d.handlers, vec![HANDLER.to_owned()]);
    }
    let attempts = |p: &Probe, id: &str| -> Vec<u32> {
        p.seen()
            .iter()
            .filter(|s| s.id == id)
            .map(|s| s.attempts)
            .collect()
    };
    assert_eq!(
        attempts(&probes[1], &for_b),
        vec![1, 2],
        "by node B, retried"
    );
    assert_eq!(
        attempts(&probes[0], &for_a),
        vec![1, 2],
        "by node A, retried"
    );
    assert_eq!(probes[0].count_of(&for_b) + probes[1].count_of(&for_a), 0);

    // Fixed, then replayed: from a bus with no handler of the topic, and (all at once) from
    // a node running it; each to the worker it was addressed to, from its first attempt.
    fixed.store(true, Ordering::SeqCst);
    assert_eq!(
        sender.replay_dead_letter(&for_b).await.unwrap().to_string(),
        for_b
    );
    let replayed = nodes[1].0.replay_dead_letters().await.unwrap();
    assert_eq!(
        replayed.iter().map(|id| id.to_string()).collect::<Vec<_>>(),
        vec![for_a.clone()]
    );
    probes[1].wait_for(3, WAIT).await;
    probes[0].wait_for(3, WAIT).await;
    let buses: Vec<&EventBus> = nodes.iter().map(|(b, _)| b).collect();
    settled(&server, &buses).await;
    assert_eq!(
        attempts(&probes[1], &for_b),
        vec![1, 2, 1],
        "again by node B"
    );
    assert_eq!(
        attempts(&probes[0], &for_a),
        vec![1, 2, 1],
        "again by node A"
    );
    assert_eq!(probes[0].count() + probes[1].count(), 6, "nothing else");
    assert_eq!(processed(&nodes[1].0, "sync-0"), 0, "only the worker named");
    assert_eq!(processed(&nodes[0].0, "sync-1"), 0, "only the worker named");
    assert!(sender.dead_letters().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_name_stands_for_the_one_running_node_of_that_name_that_runs_the_handler() {
    let server = RedisServer::start();
    // Every node of this test process has the process's node name.
    let name = event_base::node_name();
    let (a_probe, b_probe) = (Probe::new(), Probe::new());
    let (a, a_id) = syncing(&server, &a_probe).await;
    // A node of that name that does not run the handler does not count.
    let (sender, _) = node(&server, vec![]).await;
    let to = format!("{name}/{HANDLER}-1");
    let one = sender
        .send(TOPIC, addressed(&to, "by name"))
        .await
        .unwrap()
        .to_string();
    let batch = sender
        .send_batch(
            TOPIC,
            vec![
                addressed(&to, "by name, in a batch"),
                EMessage::new(TOPIC, b"plain".to_vec(), DeliveryMode::Standard, None),
            ],
        )
        .await
        .unwrap();
    a_probe.wait_for(3, WAIT).await;
    settled(&server, &[&a]).await;
    assert_eq!(a_probe.count_of(&one), 1);
    assert_eq!(a_probe.count_of(batch[0].as_ref()), 1);
    assert_eq!(a_probe.count_of(batch[1].as_ref()), 1, "the plain one too");
    // The two by name by `sync-1`; the plain one by either worker.
    assert!(processed(&a, "sync-1") >= 2);
    assert_eq!(processed(&a, "sync-0") + processed(&a, "sync-1"), 3);
    // A second running node of that name with the handler: the name is ambiguous.
    let (b, b_id) = syncing(&server, &b_probe).await;
    let mut want = vec![a_id.clone(), b_id.clone()];
    want.sort();
    match sender.send(TOPIC, addressed(&to, "which?")).await {
        Err(CoreError::Queue(e @ event_base::QueueError::AmbiguousNode { .. })) => {
            let text = e.to_string();
            assert!(text.contains("by its id"), "{text}");
            match e {
                event_base::QueueError::AmbiguousNode { ids, name: n, .. } => {
                    assert_eq!((ids, n), (want, name.clone()));
                }
                _ => unreachable!(),
            }
        }
        other => panic!("expected AmbiguousNode, got {other:?}"),
    }
    // Ids still name one node each; a name no running node has is refused as an unknown id.
    let by_id = format!("{b_id}/{HANDLER}-0");
    let id = sender
        .send(TOPIC, addressed(&by_id, "by id"))
        .await
        .unwrap()
        .to_string();
    b_probe.wait_for(1, WAIT).await;
    assert_eq!(b_probe.count_of(&id), 1);
    let nobody = format!("{name}-gone/{HANDLER}-0");
    assert!(matches!(
        sender.send(TOPIC, addressed(&nobody, "x")).await,
        Err(CoreError::UnknownWorker { worker, .. }) if worker == nobody
    ));
    settled(&server, &[&a, &b]).await;
    assert_eq!(a_probe.count(), 3, "nothing more reached node A");
    assert_eq!(b_probe.count(), 1);
}

/// A node whose bus is built with `.node_name(name)` and `.node_type(kind)` (a factory of
/// its own), running `sync` of `jobs` with [`WORKERS`] workers into `probe`.
async fn described(
    server: &RedisServer,
    name: &str,
    kind: NodeType,
    probe: &Arc<Probe>,
) -> (EventBus, String) {
    let queue = event_base_test::redis_cluster::node(server, Duration::from_millis(100)).await;
    let id = queue.node_id().to_owned();
    let bus = EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .node_name(name)
        .node_type(kind)
        .handler(probe.handler(HANDLER, TOPIC, |_| Ack::Ack).workers(WORKERS))
        .build()
        .await
        .unwrap();
    (bus, id)
}

/// A field of the node hash of `id` (`$-1` while it has none).
fn node_field(server: &RedisServer, id: &str, field: &str) -> String {
    server.command(&["HGET", &format!("eb:{{nodes}}:n:{id}"), field])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bus_registers_its_node_under_its_own_builder_name_and_type() {
    let server = RedisServer::start();
    let (alpha_probe, beta_probe) = (Probe::new(), Probe::new());
    // The process is a `Host` named otherwise; beta, a `Worker`, beats first, alone.
    assert_eq!(event_base::node_type(), NodeType::Host);
    let (beta, beta_id) = described(&server, "beta", NodeType::Worker, &beta_probe).await;
    until("beta's hash names it beta", async || {
        node_field(&server, &beta_id, "name") == "beta"
    })
    .await;
    assert_eq!(node_field(&server, &beta_id, "type"), "worker");
    assert_eq!(
        server.command(&["GET", "eb:{nodes}:janitor"]),
        "$-1",
        "a Worker bus takes no janitor lease, whatever the process's type"
    );
    let (alpha, alpha_id) = described(&server, "alpha", NodeType::Host, &alpha_probe).await;
    until("alpha's hash names it alpha", async || {
        node_field(&server, &alpha_id, "name") == "alpha"
    })
    .await;
    assert_eq!(node_field(&server, &alpha_id, "type"), "host");
    // Both beat since alpha did: the lease is alpha's.
    let beat = node_field(&server, &beta_id, "beat");
    until("beta beats again", async || {
        node_field(&server, &beta_id, "beat") != beat
    })
    .await;
    assert_eq!(server.command(&["GET", "eb:{nodes}:janitor"]), alpha_id);
    // Addressed by beta's builder name, from alpha: beta's worker handles it.
    until("beta's broadcast group made", async || {
        groups(&server).contains(&format!("n:{beta_id}"))
    })
    .await;
    let to = format!("beta/{HANDLER}-1");
    let id = alpha
        .send(TOPIC, addressed(&to, "to beta by name"))
        .await
        .unwrap()
        .to_string();
    beta_probe.wait_for(1, WAIT).await;
    settled(&server, &[&alpha, &beta]).await;
    assert_eq!(beta_probe.count_of(&id), 1);
    assert_eq!(processed(&beta, "sync-1"), 1, "by the worker named");
    assert_eq!(alpha_probe.count(), 0, "not by alpha's");
    assert_eq!(server.command(&["GET", "eb:{nodes}:janitor"]), alpha_id);
}
