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
use std::time::Duration;

use event_base::{Ack, CoreError, EMessage, EventBus, RedisQueueFactory};
use event_base_test::redis_server::RedisServer;
use event_base_test::{Probe, WAIT};

const BEAT: Duration = Duration::from_millis(100);

async fn factory(server: &RedisServer, beat: Duration) -> RedisQueueFactory {
    RedisQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .heartbeat(beat)
}

/// A bus over `queue` with `handlers`.
async fn bus(queue: RedisQueueFactory, handlers: Vec<event_base::HandlerSpec>) -> EventBus {
    let mut builder = EventBus::builder().wal(queue.wal()).queue(queue);
    for h in handlers {
        builder = builder.handler(h);
    }
    builder.build().await.unwrap()
}

/// Polls `done` until it holds (Redis offers nothing to wait on), failing with `what`.
async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !done().await {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the registry lists `handler` of `topic` (its node registers it with its
/// first claim).
async fn registered(queue: &RedisQueueFactory, topic: &str, handler: &str) {
    until(
        &format!("`{handler}` of `{topic}` registered"),
        async || {
            queue
                .handlers_of(topic, Duration::from_secs(60))
                .await
                .unwrap()
                .iter()
                .any(|h| h == handler)
        },
    )
    .await;
}

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
    until("the local bus routes to `ship` too", async || {
        local.handlers_elsewhere("orders") == ["ship"]
    })
    .await;
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
