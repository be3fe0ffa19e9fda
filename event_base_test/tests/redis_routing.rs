//! Sending by the registry of handlers: on Redis, a bus sends to the handlers other nodes
//! run (the registry `eb:{<topic>}:handlers`, cached in the process and read again every
//! heartbeat), and `NoHandler` means that no node of the cluster handles the topic.
//!
//! Buses in one process with factories of their own stand for nodes (each factory is a node
//! with its own id); the last test runs real processes (`redis_node`).

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use event_base::backend::Wal;
use event_base::{
    handler_fn, Ack, CoreError, EMessage, EventBus, HandlerSpec, PersistentWal, SendOptions,
};
use event_base_test::redis_cluster::{
    bus_over as bus, node as factory, registered, routes_to, until,
};
use event_base_test::redis_server::RedisServer;
use event_base_test::{Gate, Probe, WAIT};

const BEAT: Duration = Duration::from_millis(100);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bus_without_handlers_sends_to_a_topic_another_node_handles() {
    let server = RedisServer::start();
    let probe = Probe::new();
    let worker_queue = factory(&server, BEAT).await;
    let worker = bus(
        worker_queue.clone(),
        vec![probe.handler("work", "jobs", |_| Ack::Ack)],
    )
    .await;
    registered(&worker_queue, "jobs", "work").await;
    let sender = bus(factory(&server, BEAT).await, vec![]).await;
    let mut ids = HashSet::new();
    for i in 0..200 {
        ids.insert(
            sender
                .send("jobs", format!("job {i}").into_bytes())
                .await
                .unwrap()
                .to_string(),
        );
    }
    let batch = (0..50)
        .map(|i| EMessage::standard("jobs", format!("batch {i}").into_bytes()))
        .collect();
    for id in sender.send_batch("jobs", batch).await.unwrap() {
        ids.insert(id.to_string());
    }
    probe.wait_for(250, WAIT).await;
    let handled: HashSet<String> = probe.seen().into_iter().map(|s| s.id).collect();
    assert_eq!(handled, ids, "every message handled, by the other node");
    assert_eq!(sender.handlers_elsewhere("jobs"), vec!["work".to_owned()]);
    drop(sender);
    drop(worker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_no_node_handles_is_no_handler() {
    let server = RedisServer::start();
    let probe = Probe::new();
    let worker_queue = factory(&server, BEAT).await;
    let worker = bus(
        worker_queue.clone(),
        vec![probe.handler("work", "jobs", |_| Ack::Ack)],
    )
    .await;
    registered(&worker_queue, "jobs", "work").await;
    let sender = bus(factory(&server, BEAT).await, vec![]).await;
    let refused = sender.send("nobody", b"x".to_vec()).await;
    assert!(
        matches!(&refused, Err(CoreError::NoHandler { topic }) if topic == "nobody"),
        "{refused:?}"
    );
    let batch = vec![EMessage::standard("nobody", b"y".to_vec())];
    assert!(matches!(
        sender.send_batch("nobody", batch).await,
        Err(CoreError::NoHandler { .. })
    ));
    // Nothing was written for it.
    assert_eq!(server.command(&["EXISTS", "eb:{nobody}:s:work"]), ":0");
    assert!(sender.handlers_elsewhere("nobody").is_empty());
    // And `to_worker` names a worker of this process: there is none for `jobs`.
    let mut addressed = EMessage::standard("jobs", b"z".to_vec());
    addressed.to_worker = Some("w-1".into());
    assert!(matches!(
        sender.router().send("jobs", addressed, None, None).await,
        Err(CoreError::UnknownWorker { .. })
    ));
    drop(sender);
    drop(worker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_handler_and_one_only_another_node_runs_both_get_every_message() {
    let server = RedisServer::start();
    let here = Probe::new();
    let there = Probe::new();
    let remote_queue = factory(&server, BEAT).await;
    let remote = bus(
        remote_queue.clone(),
        vec![there.handler("ship", "orders", |_| Ack::Ack)],
    )
    .await;
    registered(&remote_queue, "orders", "ship").await;
    let local = bus(
        factory(&server, BEAT).await,
        vec![here.handler("audit", "orders", |_| Ack::Ack)],
    )
    .await;
    // The local route is extended with the next refresh of the registry (every heartbeat).
    routes_to(&local, "orders", &["ship"]).await;
    let mut ids = HashSet::new();
    for i in 0..100 {
        ids.insert(
            local
                .send("orders", format!("order {i}").into_bytes())
                .await
                .unwrap()
                .to_string(),
        );
    }
    here.wait_for(100, WAIT).await;
    there.wait_for(100, WAIT).await;
    for probe in [&here, &there] {
        let handled: HashSet<String> = probe.seen().into_iter().map(|s| s.id).collect();
        assert_eq!(handled, ids);
    }
    // The local bus waits for its own handler's copies only.
    local.wait_idle(WAIT).await.unwrap();
    drop(local);
    drop(remote);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_registered_after_the_senders_last_refresh_is_found_by_a_look_up() {
    let server = RedisServer::start();
    // A node on another topic, so that the sender's first read of the registry is seen.
    let early_probe = Probe::new();
    let early_queue = factory(&server, BEAT).await;
    let early = bus(
        early_queue.clone(),
        vec![early_probe.handler("early", "before", |_| Ack::Ack)],
    )
    .await;
    registered(&early_queue, "before", "early").await;
    // The sender reads the registry at start, then only every minute.
    let sender = bus(factory(&server, Duration::from_secs(60)).await, vec![]).await;
    until("the sender read the registry", async || {
        sender.handlers_elsewhere("before") == ["early"]
    })
    .await;
    let probe = Probe::new();
    let late_queue = factory(&server, BEAT).await;
    let late = bus(
        late_queue.clone(),
        vec![probe.handler("work", "jobs", |_| Ack::Ack)],
    )
    .await;
    registered(&late_queue, "jobs", "work").await;
    assert!(
        sender.handlers_elsewhere("jobs").is_empty(),
        "the sender's cache does not list it yet"
    );
    // The miss looks the topic up once before answering: found, and sent.
    let id = sender.send("jobs", b"late".to_vec()).await.unwrap();
    probe.wait_for(1, WAIT).await;
    assert_eq!(probe.seen()[0].id, id.to_string());
    assert_eq!(sender.handlers_elsewhere("jobs"), ["work"]);
    drop(sender);
    drop(late);
    drop(early);
}

/// Ids of what `probe` saw, in order.
fn ids_seen(probe: &Probe) -> Vec<String> {
    probe.seen().into_iter().map(|s| s.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_elsewhere_holds_a_send_back_as_a_local_one_does() {
    let server = RedisServer::start();
    let here = Probe::new();
    let there = Probe::new();
    let gate = Gate::new();
    let remote_queue = factory(&server, BEAT).await;
    let remote = bus(
        remote_queue.clone(),
        vec![there
            .gated_handler("ship", "orders", &gate, |_| Ack::Ack)
            .workers(1)],
    )
    .await;
    registered(&remote_queue, "orders", "ship").await;
    // Three unfinished entries per subscription: `ship`'s stream is full after three sends,
    // while its handler waits at the gate.
    let local = bus(
        factory(&server, BEAT).await.bound(3),
        vec![here.handler("audit", "orders", |_| Ack::Ack).workers(1)],
    )
    .await;
    routes_to(&local, "orders", &["ship"]).await;
    let mut accepted = Vec::new();
    for i in 0..3 {
        let id = local.send("orders", format!("o{i}").into_bytes()).await;
        accepted.push(id.unwrap().to_string());
    }
    there.wait_for(1, WAIT).await;
    let refused = local
        .send_with(
            "orders",
            EMessage::standard("orders", b"refused".to_vec()),
            SendOptions::new().try_send(),
        )
        .await;
    assert!(
        matches!(&refused, Err(CoreError::QueueFull { topic }) if topic == "orders"),
        "try_send to a full queue elsewhere: {refused:?}"
    );
    let timed_out = local
        .send_with(
            "orders",
            EMessage::standard("orders", b"late".to_vec()),
            SendOptions::new().timeout(Duration::from_millis(200)),
        )
        .await;
    assert!(
        matches!(&timed_out, Err(CoreError::Timeout { .. })),
        "a send with a timeout waits for room elsewhere, then gives up: {timed_out:?}"
    );
    // A send without options waits for room: it answers once the handler elsewhere made
    // some, and the gate opens only after it started.
    let waiting = {
        let router = local.router();
        tokio::spawn(async move {
            router
                .send(
                    "orders",
                    EMessage::standard("orders", b"o3".to_vec()),
                    None,
                    None,
                )
                .await
        })
    };
    gate.open();
    accepted.push(waiting.await.unwrap().unwrap().to_string());
    accepted.push(
        local
            .send("orders", b"o4".to_vec())
            .await
            .unwrap()
            .to_string(),
    );
    local.wal().flush().await.unwrap();
    there.wait_for(accepted.len(), WAIT).await;
    here.wait_for(accepted.len(), WAIT).await;
    // Every accepted message reached both handlers, in order; the refused ones neither.
    assert_eq!(ids_seen(&there), accepted);
    assert_eq!(ids_seen(&here), accepted);
    local.wait_idle(WAIT).await.unwrap();
    drop(local);
    drop(remote);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_id_is_sent_to_no_handler_elsewhere() {
    let server = RedisServer::start();
    let here = Probe::new();
    let there = Probe::new();
    let remote_queue = factory(&server, BEAT).await;
    let remote = bus(
        remote_queue.clone(),
        vec![there.handler("ship", "orders", |_| Ack::Ack).workers(1)],
    )
    .await;
    registered(&remote_queue, "orders", "ship").await;
    let queue = factory(&server, BEAT).await;
    let local = EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .dedup_window(Duration::from_secs(60))
        .handler(here.handler("audit", "orders", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    routes_to(&local, "orders", &["ship"]).await;
    let with_id = |id: &str| {
        let mut m = EMessage::standard("orders", id.as_bytes().to_vec());
        m.id = id.to_owned();
        m
    };
    local
        .router()
        .send("orders", with_id("order-1"), None, None)
        .await
        .unwrap();
    // Completed here, so the id is in the window.
    here.wait_for(1, WAIT).await;
    local.wait_idle(WAIT).await.unwrap();
    let again = local
        .router()
        .send("orders", with_id("order-1"), None, None)
        .await
        .unwrap();
    assert_eq!(
        again.to_string(),
        "order-1",
        "a duplicate answers with its id"
    );
    local
        .router()
        .send("orders", with_id("order-2"), None, None)
        .await
        .unwrap();
    there.wait_for(2, WAIT).await;
    here.wait_for(2, WAIT).await;
    // One stream, one worker: a copy of the duplicate would have come before `order-2`.
    assert_eq!(ids_seen(&there), ["order-1", "order-2"]);
    assert_eq!(ids_seen(&here), ["order-1", "order-2"]);
    drop(local);
    drop(remote);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_to_a_topic_only_other_nodes_handle_waits_for_room_and_keeps_its_order() {
    const N: usize = 40;
    let server = RedisServer::start();
    let fast = Probe::new();
    let slow = Probe::new();
    let gate = Gate::new();
    let remote_queue = factory(&server, BEAT).await;
    let remote = bus(
        remote_queue.clone(),
        vec![
            fast.handler("count", "jobs", |_| Ack::Ack).workers(1),
            slow.gated_handler("work", "jobs", &gate, |_| Ack::Ack)
                .workers(1),
        ],
    )
    .await;
    registered(&remote_queue, "jobs", "count").await;
    registered(&remote_queue, "jobs", "work").await;
    let sender = bus(factory(&server, BEAT).await.bound(5), vec![]).await;
    routes_to(&sender, "jobs", &["count", "work"]).await;
    let batch: Vec<EMessage> = (0..N)
        .map(|i| EMessage::standard("jobs", format!("j{i}").into_bytes()))
        .collect();
    let sending = {
        let router = sender.router();
        tokio::spawn(async move { router.send_batch("jobs", batch).await })
    };
    // `work` holds its first entries at the gate: the batch cannot be queued whole yet.
    slow.wait_for(1, WAIT).await;
    gate.open();
    let ids: Vec<String> = sending
        .await
        .unwrap()
        .unwrap()
        .into_iter()
        .map(|id| id.to_string())
        .collect();
    assert_eq!(ids.len(), N);
    sender.wal().flush().await.unwrap();
    fast.wait_for(N, WAIT).await;
    slow.wait_for(N, WAIT).await;
    assert_eq!(ids_seen(&fast), ids, "every message, in the batch's order");
    assert_eq!(ids_seen(&slow), ids, "every message, in the batch's order");
    drop(sender);
    drop(remote);
}

/// A `relay` handler of `in` whose outbox sends three `jobs` per delivery.
fn relay() -> HandlerSpec {
    HandlerSpec::new(
        "relay",
        "in",
        handler_fn(|msg: EMessage| async move {
            for n in 0..3 {
                let body = format!("{}:{n}", msg.id);
                event_base::send_msg!("jobs", body.into_bytes())
                    .await
                    .expect("a held send answers Ok");
            }
            Ack::Ack
        }),
    )
    .outbox(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_releases_to_a_topic_only_other_nodes_handle_and_completes_its_records() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let there = Probe::new();
    let remote_queue = factory(&server, BEAT).await;
    let remote = bus(
        remote_queue.clone(),
        vec![there.handler("work", "jobs", |_| Ack::Ack)],
    )
    .await;
    registered(&remote_queue, "jobs", "work").await;
    let local = EventBus::builder()
        .wal(PersistentWal::open(dir.path()).unwrap())
        .queue(factory(&server, BEAT).await)
        .handler(relay())
        .build()
        .await
        .unwrap();
    routes_to(&local, "jobs", &["work"]).await;
    let mut owed = HashSet::new();
    for i in 0..5 {
        let id = local
            .send("in", format!("in{i}").into_bytes())
            .await
            .unwrap();
        for n in 0..3 {
            owed.insert(format!("{id}:{n}"));
        }
    }
    // The release to the other node counts in flight until Redis confirmed its copies.
    local.wait_idle(WAIT).await.unwrap();
    assert!(
        local.wal().pending().await.unwrap().is_empty(),
        "the released messages are completed here once Redis has them"
    );
    there.wait_for(owed.len(), WAIT).await;
    let got: HashSet<String> = there
        .seen()
        .into_iter()
        .map(|s| String::from_utf8_lossy(&s.payload).into_owned())
        .collect();
    assert_eq!(got, owed);
    drop(local);
    drop(remote);
}

/// What a process on a file WAL leaves behind when it stops before its records went out:
/// `n` pending records of `topic` in `dir`, by id.
async fn leave_pending(dir: &std::path::Path, topic: &str, n: usize) -> Vec<String> {
    let wal = PersistentWal::open(dir).unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        let m = Arc::new(EMessage::standard(topic, format!("left {i}").into_bytes()));
        ids.push(m.id.clone());
        wal.append(&m).unwrap().wait().await.unwrap();
    }
    wal.flush().await.unwrap();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_only_node_replays_its_pending_records_to_the_handlers_elsewhere() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // What a sender on a file WAL leaves behind when it stops before its records went out
    // (an outbox's release, say): pending records of a topic only another node handles.
    let owed = leave_pending(dir.path(), "jobs", 5).await;
    let there = Probe::new();
    let remote_queue = factory(&server, BEAT).await;
    let remote = bus(
        remote_queue.clone(),
        vec![there.handler("work", "jobs", |_| Ack::Ack)],
    )
    .await;
    registered(&remote_queue, "jobs", "work").await;
    // The restart: no handler here, so the replay routes by the registry.
    let sender = EventBus::builder()
        .wal(PersistentWal::open(dir.path()).unwrap())
        .queue(factory(&server, BEAT).await)
        .build()
        .await
        .unwrap();
    there.wait_for(owed.len(), WAIT).await;
    let got: HashSet<String> = ids_seen(&there).into_iter().collect();
    assert_eq!(got, owed.iter().cloned().collect::<HashSet<_>>());
    assert!(sender.wal().pending().await.unwrap().is_empty());
    assert!(
        sender.wal().dead_letters().await.unwrap().is_empty(),
        "nothing dead-lettered for want of a local handler"
    );
    drop(sender);
    drop(remote);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_record_of_a_local_topic_goes_to_its_handlers_elsewhere_too() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let owed: HashSet<String> = leave_pending(dir.path(), "orders", 3)
        .await
        .into_iter()
        .collect();
    let there = Probe::new();
    let remote_queue = factory(&server, BEAT).await;
    let remote = bus(
        remote_queue.clone(),
        vec![there.handler("ship", "orders", |_| Ack::Ack)],
    )
    .await;
    registered(&remote_queue, "orders", "ship").await;
    // The restart, with a handler of its own: the replay comes before the first refresh of
    // the registry, and looks the topic up for its handlers elsewhere.
    let here = Probe::new();
    let local = EventBus::builder()
        .wal(PersistentWal::open(dir.path()).unwrap())
        .queue(factory(&server, BEAT).await)
        .handler(here.handler("audit", "orders", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    here.wait_for(owed.len(), WAIT).await;
    there.wait_for(owed.len(), WAIT).await;
    for probe in [&here, &there] {
        let got: HashSet<String> = ids_seen(probe).into_iter().collect();
        assert_eq!(got, owed);
    }
    local.wait_idle(WAIT).await.unwrap();
    assert!(local.wal().pending().await.unwrap().is_empty());
    drop(local);
    drop(remote);
}

/// A child process, killed if the test ends early.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `redis_node <args>`; each line of its stdout goes to `events` as `(index, line)`.
fn start(index: usize, args: &[&str], events: &mpsc::Sender<(usize, String)>) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_redis_node"))
        .args(args)
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
    Proc(child)
}

/// Waits for the next line of any child, failing after `WAIT` with `what`.
fn next(events: &mpsc::Receiver<(usize, String)>, what: &str) -> (usize, String) {
    events
        .recv_timeout(WAIT)
        .unwrap_or_else(|_| panic!("no line from the children while waiting for {what}"))
}

#[test]
fn a_sender_process_without_handlers_reaches_two_worker_processes() {
    const N: usize = 1_000;
    let server = RedisServer::start();
    let url = server.url();
    let (tx, events) = mpsc::channel();
    let _workers: Vec<Proc> = (0..2)
        .map(|i| start(i, &["worker", &url, "30000", "16", "2", "0"], &tx))
        .collect();
    for _ in 0..2 {
        let (_, line) = next(&events, "the workers' `ready`");
        assert_eq!(line, "ready");
    }
    let _sender = start(2, &["bus-sender", &url, &N.to_string(), "4"], &tx);
    let mut sent = HashSet::new();
    let mut handled = HashSet::new();
    let mut done = false;
    while !(done && handled.len() == sent.len()) {
        let (from, line) = next(&events, "sends and handlings");
        match line.split_once(' ') {
            Some(("sent", id)) if from == 2 => {
                sent.insert(id.to_owned());
            }
            Some(("h", id)) => {
                handled.insert(id.to_owned());
            }
            None if line == "done" => done = true,
            _ => panic!("unexpected line from child {from}: {line}"),
        }
    }
    assert_eq!(sent.len(), N, "every send accepted");
    assert_eq!(handled, sent, "every message handled by a worker process");
}
