//! `Broadcast` across nodes on Redis: a Broadcast message of a topic goes to the
//! subscription's broadcast stream (`eb:{<topic>}:b:<handler>`), which every node running the
//! handler reads through a group of its own (`n:<node id>`), so every running worker of the
//! handler in every node handles it once; Standard messages still go to one worker of the
//! cluster. A node's failed broadcast delivery is retried (and dead-lettered) on that node,
//! and a replayed one is broadcast again; a node that was not running when a broadcast was
//! sent does not get it; a draining node finishes the broadcasts it claimed.
//!
//! Buses in one process with factories of their own stand for nodes (each factory is a node
//! with its own id and its own broadcast group); the last test runs real processes
//! (`redis_node worker`).

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, SystemTime};

use event_base::{
    Ack, Backoff, DeliveryMode, EMessage, EventBus, HandlerSpec, RedisQueueFactory,
    ShutdownStrategy,
};
use event_base_test::redis_cluster::until;
use event_base_test::redis_server::RedisServer;
use event_base_test::{Gate, Probe, WAIT};

const TOPIC: &str = "prices";
const HANDLER: &str = "sync";
const BCAST: &str = "eb:{prices}:b:sync";
const WORKERS: usize = 2;

async fn factory(server: &RedisServer) -> RedisQueueFactory {
    RedisQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .heartbeat(Duration::from_millis(100))
}

/// A node: a bus over a factory of its own with `handlers`, once it consumes (with a
/// handler, its first claim made its group on the broadcast stream, `n:<node id>`).
async fn node(server: &RedisServer, handlers: Vec<HandlerSpec>) -> EventBus {
    let queue = factory(server).await;
    let group = format!("n:{}", queue.node_id());
    let mut builder = EventBus::builder().wal(queue.wal()).queue(queue);
    let any = !handlers.is_empty();
    for h in handlers {
        builder = builder.handler(h);
    }
    let bus = builder.build().await.unwrap();
    if any {
        until("the node's broadcast group made", async || {
            server
                .query(&["XINFO", "GROUPS", BCAST])
                .items()
                .iter()
                .any(|g| g.items().get(1).and_then(|n| n.as_str()) == Some(group.as_str()))
        })
        .await;
    }
    bus
}

/// A node running `sync` of `prices` with [`WORKERS`] workers, recording into `probe`.
async fn syncing(
    server: &RedisServer,
    probe: &Arc<Probe>,
    answer: fn(&EMessage) -> Ack,
) -> EventBus {
    let spec = probe
        .handler(HANDLER, TOPIC, answer)
        .workers(WORKERS)
        .retries(2)
        .backoff(Backoff::fixed(Duration::from_millis(10)));
    node(server, vec![spec]).await
}

fn broadcast(payload: &str) -> EMessage {
    EMessage::new(
        TOPIC,
        payload.as_bytes().to_vec(),
        DeliveryMode::Broadcast,
        None,
    )
}

fn groups(server: &RedisServer) -> usize {
    server.query(&["XINFO", "GROUPS", BCAST]).items().len()
}

/// Waits until every node's bus is idle (its own deliveries done and acked in Redis), so
/// counts read afterwards are final for what was sent.
async fn settled(server: &RedisServer, buses: &[&EventBus]) {
    for bus in buses {
        bus.wait_idle(WAIT).await.unwrap();
    }
    until(
        "every broadcast entry acked by every node's group",
        async || {
            let reply = server.query(&["XINFO", "GROUPS", BCAST]);
            reply.items().iter().all(|g| {
                let fields = g.items();
                fields
                    .chunks(2)
                    .any(|kv| kv[0].as_str() == Some("pending") && kv[1].as_int() == Some(0))
            })
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_is_handled_once_by_every_worker_of_every_node() {
    let server = RedisServer::start();
    let probes: Vec<Arc<Probe>> = (0..3).map(|_| Probe::new()).collect();
    let mut nodes = Vec::new();
    for p in &probes {
        nodes.push(syncing(&server, p, |_| Ack::Ack).await);
    }
    assert_eq!(groups(&server), 3, "one broadcast group per node");
    // From one of the nodes, and from a bus with no handler (sent by the registry).
    let sender = node(&server, vec![]).await;
    let mut ids = Vec::new();
    for i in 0..10 {
        let from = if i % 2 == 0 { &nodes[0] } else { &sender };
        ids.push(
            from.send(TOPIC, broadcast(&format!("b{i}")))
                .await
                .unwrap()
                .to_string(),
        );
    }
    for p in &probes {
        p.wait_for(ids.len() * WORKERS, WAIT).await;
    }
    settled(&server, &nodes.iter().collect::<Vec<_>>()).await;
    for (n, p) in probes.iter().enumerate() {
        for id in &ids {
            assert_eq!(p.count_of(id), WORKERS, "node {n}: once per worker, {id}");
        }
        assert_eq!(p.count(), ids.len() * WORKERS, "node {n}: nothing else");
    }
    // Retention: what every group acked is trimmed (the newest entry stays as the groups'
    // mark); nothing went to the work stream.
    until("the broadcast stream trimmed", async || {
        server.query(&["XLEN", BCAST]).as_int() == Some(1)
    })
    .await;
    assert_eq!(
        server.query(&["XLEN", "eb:{prices}:s:sync"]).as_int(),
        Some(0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_messages_still_go_to_one_worker_of_the_cluster() {
    let server = RedisServer::start();
    let probes: Vec<Arc<Probe>> = (0..3).map(|_| Probe::new()).collect();
    let mut nodes = Vec::new();
    for p in &probes {
        nodes.push(syncing(&server, p, |_| Ack::Ack).await);
    }
    let sender = node(&server, vec![]).await;
    let mut ids = HashSet::new();
    for i in 0..60 {
        let msg = EMessage::standard(TOPIC, format!("s{i}").into_bytes());
        ids.insert(sender.send(TOPIC, msg).await.unwrap().to_string());
    }
    // One broadcast among them, to every worker.
    let b = nodes[1]
        .send(TOPIC, broadcast("b"))
        .await
        .unwrap()
        .to_string();
    let total = ids.len() + 3 * WORKERS;
    until("every message handled", async || {
        probes.iter().map(|p| p.count()).sum::<usize>() >= total
    })
    .await;
    until("the work stream empty (every entry acked)", async || {
        server.query(&["XLEN", "eb:{prices}:s:sync"]).as_int() == Some(0)
    })
    .await;
    settled(&server, &nodes.iter().collect::<Vec<_>>()).await;
    for id in &ids {
        let n: usize = probes.iter().map(|p| p.count_of(id)).sum();
        assert_eq!(
            n, 1,
            "a Standard message is handled once in the cluster: {id}"
        );
    }
    for p in &probes {
        assert_eq!(p.count_of(&b), WORKERS);
    }
    assert_eq!(probes.iter().map(|p| p.count()).sum::<usize>(), total);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_broadcast_delivery_is_retried_and_dead_lettered_on_its_node() {
    let server = RedisServer::start();
    let flaky = Probe::new();
    let failing = Probe::new();
    let fine = Probe::new();
    // Fails its first attempt, then acks.
    let a = syncing(&server, &flaky, |m| {
        if m.attempts < 2 {
            Ack::retry()
        } else {
            Ack::Ack
        }
    })
    .await;
    // Always fails: dead-lettered after its retries.
    let b = syncing(&server, &failing, |_| Ack::retry()).await;
    let c = syncing(&server, &fine, |_| Ack::Ack).await;
    let id = c.send(TOPIC, broadcast("x")).await.unwrap().to_string();
    flaky.wait_for(2 * WORKERS, WAIT).await;
    failing.wait_for(3 * WORKERS, WAIT).await;
    fine.wait_for(WORKERS, WAIT).await;
    settled(&server, &[&a, &b, &c]).await;
    let attempts = |p: &Probe| {
        let mut v: Vec<u32> = p.seen().iter().map(|s| s.attempts).collect();
        v.sort();
        v
    };
    assert_eq!(
        attempts(&flaky),
        vec![1, 1, 2, 2],
        "retried on the node that failed"
    );
    assert_eq!(
        attempts(&failing),
        vec![1, 1, 2, 2, 3, 3],
        "1 + retries(2), per worker"
    );
    assert_eq!(
        attempts(&fine),
        vec![1, 1],
        "the other nodes' deliveries are not repeated"
    );
    // One dead letter: the failing node's delivery (any node lists the cluster's).
    let dead = c.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].message.id, id);
    assert_eq!(dead[0].handlers, vec![HANDLER.to_owned()]);
    assert_eq!(
        flaky.count_of(&id) + failing.count_of(&id) + fine.count_of(&id),
        12
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_was_not_running_misses_the_broadcasts_sent_before_it_started() {
    let server = RedisServer::start();
    let first = Probe::new();
    let a = syncing(&server, &first, |_| Ack::Ack).await;
    let early = a.send(TOPIC, broadcast("early")).await.unwrap().to_string();
    first.wait_for(WORKERS, WAIT).await;
    // A node that starts now (or a process that restarts: a new node id, a new group at
    // the stream's end) gets what is sent from now on, not what was sent before.
    let later = Probe::new();
    let b = syncing(&server, &later, |_| Ack::Ack).await;
    let late = a.send(TOPIC, broadcast("late")).await.unwrap().to_string();
    later.wait_for(WORKERS, WAIT).await;
    first.wait_for(2 * WORKERS, WAIT).await;
    settled(&server, &[&a, &b]).await;
    assert_eq!(later.count_of(&early), 0, "sent before the node started");
    assert_eq!(later.count_of(&late), WORKERS);
    assert_eq!(first.count_of(&early), WORKERS);
    // Stopped, the node's group goes with its eviction (three heartbeats), so it does not
    // hold back the stream's trimming.
    b.shutdown(ShutdownStrategy::Force).await.unwrap();
    drop(b);
    until("the stopped node's group destroyed", async || {
        groups(&server) == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_broadcast_reaches_every_node_when_due() {
    let server = RedisServer::start();
    let probes: Vec<Arc<Probe>> = (0..2).map(|_| Probe::new()).collect();
    let mut nodes = Vec::new();
    for p in &probes {
        nodes.push(syncing(&server, p, |_| Ack::Ack).await);
    }
    let at = SystemTime::now() + Duration::from_millis(300);
    let msg =
        EMessage::new(TOPIC, b"later".to_vec(), DeliveryMode::Broadcast, None).with_deliver_at(at);
    let id = nodes[0].send(TOPIC, msg).await.unwrap().to_string();
    for p in &probes {
        p.wait_for(WORKERS, WAIT).await;
        assert_eq!(p.count_of(&id), WORKERS);
    }
    settled(&server, &nodes.iter().collect::<Vec<_>>()).await;
    assert_eq!(
        server.query(&["XLEN", "eb:{prices}:s:sync"]).as_int(),
        Some(0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_node_finishes_the_broadcast_it_claimed_then_stops() {
    let server = RedisServer::start();
    let held = Probe::new();
    let gate = Gate::new();
    let spec = held
        .gated_handler(HANDLER, TOPIC, &gate, |_| Ack::Ack)
        .workers(WORKERS);
    let a = node(&server, vec![spec]).await;
    let other = Probe::new();
    let b = syncing(&server, &other, |_| Ack::Ack).await;
    let id = b.send(TOPIC, broadcast("held")).await.unwrap().to_string();
    // Both of the draining node's workers have it, held at the gate.
    held.wait_for(WORKERS, WAIT).await;
    let draining = tokio::spawn({
        let a = a.clone();
        async move { a.shutdown(ShutdownStrategy::Drain { timeout: WAIT }).await }
    });
    gate.open();
    draining.await.unwrap().unwrap();
    assert_eq!(
        held.finished(),
        vec![id.clone(); WORKERS],
        "finished, not dropped"
    );
    other.wait_for(WORKERS, WAIT).await;
    settled(&server, &[&b]).await;
    assert_eq!(held.count(), WORKERS);
}

/// Whether the replay test's failing node fails (a static of that test alone).
static REPLAY_FAILS: AtomicBool = AtomicBool::new(true);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_broadcast_dead_letter_is_broadcast_again() {
    let server = RedisServer::start();
    let failing = Probe::new();
    let fine = Probe::new();
    let a = syncing(&server, &failing, |_| {
        if REPLAY_FAILS.load(Ordering::SeqCst) {
            Ack::dead()
        } else {
            Ack::Ack
        }
    })
    .await;
    let b = syncing(&server, &fine, |_| Ack::Ack).await;
    let id = b.send(TOPIC, broadcast("once")).await.unwrap().to_string();
    failing.wait_for(WORKERS, WAIT).await;
    fine.wait_for(WORKERS, WAIT).await;
    settled(&server, &[&a, &b]).await;
    let dead = a.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    REPLAY_FAILS.store(false, Ordering::SeqCst);
    a.replay_dead_letter(&id).await.unwrap();
    failing.wait_for(2 * WORKERS, WAIT).await;
    fine.wait_for(2 * WORKERS, WAIT).await;
    settled(&server, &[&a, &b]).await;
    assert_eq!(failing.count_of(&id), 2 * WORKERS);
    assert_eq!(
        fine.count_of(&id),
        2 * WORKERS,
        "every node gets the replay"
    );
    assert!(a.dead_letters().await.unwrap().is_empty());
}

/// A `redis_node worker` process (handler `work` of `jobs`), killed when dropped; its
/// stdout lines go to `events` as `(index, line)`.
struct Child(std::process::Child);

impl Child {
    fn start(
        index: usize,
        url: &str,
        workers: usize,
        events: &mpsc::Sender<(usize, String)>,
    ) -> Child {
        let mut child = Command::new(env!("CARGO_BIN_EXE_redis_node"))
            .args(["worker", url, "30000", "16", &workers.to_string(), "0"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start redis_node");
        let out = BufReader::new(child.stdout.take().expect("piped"));
        let events = events.clone();
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                if events.send((index, line)).is_err() {
                    break;
                }
            }
        });
        Child(child)
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_processes_a_broadcast_reaches_every_worker_and_a_standard_message_one() {
    const PROCESSES: usize = 3;
    const PER: usize = 3;
    let server = RedisServer::start();
    let (tx, rx) = mpsc::channel();
    let _children: Vec<Child> = (0..PROCESSES)
        .map(|i| Child::start(i, &server.url(), PER, &tx))
        .collect();
    let mut ready = 0;
    while ready < PROCESSES {
        let (_, line) = rx.recv_timeout(WAIT).expect("every worker process ready");
        ready += usize::from(line == "ready");
    }
    // `ready` means some node registered the handler: wait for each one's broadcast group.
    until("a broadcast group per process", async || {
        server
            .query(&["XINFO", "GROUPS", "eb:{jobs}:b:work"])
            .items()
            .len()
            == PROCESSES
    })
    .await;
    let sender = EventBus::builder()
        .wal(factory(&server).await.wal())
        .queue(factory(&server).await)
        .build()
        .await
        .unwrap();
    let mut broadcasts = HashSet::new();
    let mut standard = HashSet::new();
    for i in 0..5 {
        let b = EMessage::new(
            "jobs",
            format!("b{i}").into_bytes(),
            DeliveryMode::Broadcast,
            None,
        );
        broadcasts.insert(sender.send("jobs", b).await.unwrap().to_string());
        let s = EMessage::standard("jobs", format!("s{i}").into_bytes());
        standard.insert(sender.send("jobs", s).await.unwrap().to_string());
    }
    // Each process handles each broadcast once per worker; each Standard message is handled
    // by one process.
    let expected = broadcasts.len() * PROCESSES * PER + standard.len();
    let mut handled: Vec<(usize, String)> = Vec::new();
    while handled.len() < expected {
        let (i, line) = rx
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("{} of {expected} handlings seen", handled.len()));
        if let Some(id) = line.strip_prefix("h ") {
            handled.push((i, id.to_owned()));
        }
    }
    for id in &broadcasts {
        for p in 0..PROCESSES {
            let n = handled.iter().filter(|(i, h)| *i == p && h == id).count();
            assert_eq!(n, PER, "process {p}: broadcast {id} once per worker");
        }
    }
    for id in &standard {
        let n = handled.iter().filter(|(_, h)| h == id).count();
        assert_eq!(n, 1, "Standard {id} handled once in the cluster");
    }
    // Nothing more arrives once every process has acked what it had: both streams settle.
    until("every entry acked", async || {
        server.query(&["XLEN", "eb:{jobs}:s:work"]).as_int() == Some(0)
            && server
                .query(&["XINFO", "GROUPS", "eb:{jobs}:b:work"])
                .items()
                .iter()
                .all(|g| {
                    g.items()
                        .chunks(2)
                        .any(|kv| kv[0].as_str() == Some("pending") && kv[1].as_int() == Some(0))
                })
    })
    .await;
    while let Ok((_, line)) = rx.try_recv() {
        assert!(
            !line.starts_with("h "),
            "a handling more than expected: {line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcasts_sent_while_no_node_runs_the_handler_are_not_kept() {
    let server = RedisServer::start();
    let first = Probe::new();
    let a = syncing(&server, &first, |_| Ack::Ack).await;
    // A bus with no handler, which the registry routes to `sync`.
    let sender = node(&server, vec![]).await;
    a.shutdown(ShutdownStrategy::Force).await.unwrap();
    drop(a);
    until("the stopped node's group destroyed", async || {
        groups(&server) == 0
    })
    .await;
    for i in 0..3 {
        sender
            .send(TOPIC, broadcast(&format!("unheard {i}")))
            .await
            .unwrap();
    }
    // The copies for handlers elsewhere may still be queued for the writer.
    sender.wal().flush().await.unwrap();
    // No group reads the stream, and one made later starts at its end: only the newest
    // entry is left (each send trims what no group will read).
    assert_eq!(server.query(&["XLEN", BCAST]).as_int(), Some(1));
    let later = Probe::new();
    let b = syncing(&server, &later, |_| Ack::Ack).await;
    let id = sender
        .send(TOPIC, broadcast("heard"))
        .await
        .unwrap()
        .to_string();
    later.wait_for(WORKERS, WAIT).await;
    settled(&server, &[&b]).await;
    assert_eq!(later.count_of(&id), WORKERS);
    assert_eq!(later.count(), WORKERS, "nothing sent while no node ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_sent_right_after_build_reaches_its_own_node() {
    let server = RedisServer::start();
    let probe = Probe::new();
    let queue = factory(&server).await;
    let bus = EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(probe.handler(HANDLER, TOPIC, |_| Ack::Ack).workers(WORKERS))
        .build()
        .await
        .unwrap();
    // No wait for the first claim: the send makes the node's group first.
    let id = bus.send(TOPIC, broadcast("now")).await.unwrap().to_string();
    probe.wait_for(WORKERS, WAIT).await;
    settled(&server, &[&bus]).await;
    assert_eq!(probe.count_of(&id), WORKERS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_addressed_to_a_worker_is_handled_once_in_the_cluster() {
    let server = RedisServer::start();
    let probes: Vec<Arc<Probe>> = (0..2).map(|_| Probe::new()).collect();
    let mut nodes = Vec::new();
    for p in &probes {
        nodes.push(syncing(&server, p, |_| Ack::Ack).await);
    }
    let worker = nodes[0].workers(TOPIC)[0].clone();
    let msg = broadcast("one").with_to_worker(worker.clone());
    let id = nodes[0].send(TOPIC, msg).await.unwrap().to_string();
    until("handled", async || {
        probes.iter().map(|p| p.count()).sum::<usize>() == 1
    })
    .await;
    until("the work stream empty (acked)", async || {
        server.query(&["XLEN", "eb:{prices}:s:sync"]).as_int() == Some(0)
    })
    .await;
    assert_eq!(
        probes.iter().map(|p| p.count_of(&id)).sum::<usize>(),
        1,
        "{worker}"
    );
    assert_eq!(
        server.query(&["XLEN", BCAST]).as_int(),
        Some(0),
        "not broadcast"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_takes_at_most_its_max_from_both_streams_together() {
    use event_base::backend::QueueFactory;
    let server = RedisServer::start();
    let queue = factory(&server).await;
    let sub = queue
        .create_subscription(&event_base::MessageTopic::from(TOPIC), HANDLER)
        .unwrap();
    let mut sent = HashSet::new();
    for i in 0..6 {
        let b = Arc::new(broadcast(&format!("b{i}")));
        let s = Arc::new(EMessage::standard(TOPIC, format!("s{i}").into_bytes()));
        sent.insert(b.id.clone());
        sent.insert(s.id.clone());
        sub.producer.send(b).await.unwrap();
        sub.producer.send(s).await.unwrap();
    }
    let mut claimed = HashSet::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while claimed.len() < sent.len() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {} claimed",
            claimed.len(),
            sent.len()
        );
        let mut batch = Vec::new();
        let n = sub.consumer.claim_batch(4, &mut batch).await.unwrap();
        assert!(n <= 4 && batch.len() == n, "a claim of at most 4 took {n}");
        for c in &batch {
            assert!(
                claimed.insert(c.message.id.clone()),
                "claimed twice: {}",
                c.message.id
            );
        }
        sub.consumer.ack(&batch).await.unwrap();
    }
    assert_eq!(claimed, sent);
    assert_eq!(
        server.query(&["XLEN", "eb:{prices}:s:sync"]).as_int(),
        Some(0)
    );
}

/// A node's field `name` of its group on the broadcast stream, as a number.
fn group_field(server: &RedisServer, field: &str) -> Option<i64> {
    let reply = server.query(&["XINFO", "GROUPS", BCAST]);
    let group = reply.items().first()?;
    let fields = group.items();
    fields
        .chunks(2)
        .find(|kv| kv[0].as_str() == Some(field))
        .and_then(|kv| kv[1].as_int())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_workers_all_stopped_acks_a_broadcast_unheard() {
    let server = RedisServer::start();
    let probe = Probe::new();
    let a = syncing(&server, &probe, |_| Ack::Ack).await;
    for i in 0..WORKERS {
        a.remove_worker(&format!("{HANDLER}-{i}")).await.unwrap();
    }
    a.send(TOPIC, broadcast("unheard")).await.unwrap();
    // The node's group reads it (nothing left to read) and holds nothing: kept pending, it
    // would reach no later start (a new node) and hold back the stream's trimming.
    until(
        "the node's group read the broadcast and holds nothing",
        async || {
            group_field(&server, "lag") == Some(0)
                && group_field(&server, "entries-read") == Some(1)
                && group_field(&server, "pending") == Some(0)
        },
    )
    .await;
    assert_eq!(probe.count(), 0, "no worker ran to hear it");
    a.shutdown(ShutdownStrategy::Force).await.unwrap();
}
