//! `wait_idle` and `Drain` when other nodes handle a process's sends (Redis): a process counts
//! what it holds (its sends in progress, the entries it claimed until it settles them), and
//! `wait_idle` also waits until the shared queues it sent to are empty, whichever node
//! handles them. A node in `Drain` stops claiming: it settles what it holds, and what the
//! shared queues still hold is left to the other nodes (or its next start).
//!
//! Buses in one process with factories of their own stand for nodes (each factory is a node
//! with its own id).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use event_base::{Ack, CoreError, EventBus, ShutdownStrategy};
use event_base_test::redis_cluster::{bus_over as bus, node as factory, registered};
use event_base_test::redis_server::RedisServer;
use event_base_test::{Gate, Probe, WAIT};
use tokio::task::JoinHandle;

const BEAT: Duration = Duration::from_millis(100);

/// Two nodes on one Redis: `handler`, running handler `work` of `jobs` (recorded by `probe`,
/// held by `gate`), and `sender`, with no handler; returns once `work` is in the registry, so
/// the sender's messages go to it.
async fn handler_and_sender(
    server: &RedisServer,
    probe: &Arc<Probe>,
    gate: &Gate,
) -> (EventBus, EventBus) {
    let handler_queue = factory(server, BEAT).await;
    let handler = bus(
        handler_queue.clone(),
        vec![probe.gated_handler("work", "jobs", gate, |_| Ack::Ack)],
    )
    .await;
    registered(&handler_queue, "jobs", "work").await;
    let sender = bus(factory(server, BEAT).await, vec![]).await;
    (handler, sender)
}

/// Sends `n` messages (`job <i>`) to `jobs`.
async fn send_jobs(sender: &EventBus, n: usize) {
    for i in 0..n {
        sender
            .send("jobs", format!("job {i}").into_bytes())
            .await
            .unwrap();
    }
}

/// Polls `f` once, without waiting: `true` if it has not finished.
async fn still_pending<F: Future + Unpin>(f: &mut F) -> bool {
    tokio::select! {
        biased;
        _ = f => false,
        _ = std::future::ready(()) => true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_senders_wait_idle_returns_once_another_node_handled_every_message() {
    const N: usize = 20;
    let server = RedisServer::start();
    let probe = Probe::new();
    let gate = Gate::new();
    let (_handler, sender) = handler_and_sender(&server, &probe, &gate).await;
    send_jobs(&sender, N).await;
    // Queued in Redis: the sender holds none of them.
    assert_eq!(sender.in_flight(), 0);
    let wait = sender.wait_idle(WAIT);
    tokio::pin!(wait);
    assert!(still_pending(&mut wait).await, "nothing was handled yet");
    assert!(probe.finished().is_empty());
    gate.open();
    wait.await
        .expect("the sender goes idle once the other node handled everything");
    assert_eq!(
        probe.finished().len(),
        N,
        "every message was handled when wait_idle returned"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_senders_wait_idle_times_out_saying_what_the_shared_queue_still_holds() {
    let server = RedisServer::start();
    let probe = Probe::new();
    let gate = Gate::new();
    let (_handler, sender) = handler_and_sender(&server, &probe, &gate).await;
    send_jobs(&sender, 3).await;
    let err = sender
        .wait_idle(Duration::from_millis(300))
        .await
        .expect_err("the other node's handler is stuck");
    match &err {
        CoreError::IdleTimeout {
            in_flight, shared, ..
        } => {
            assert_eq!(*in_flight, 0, "the sender holds none of them");
            assert_eq!(*shared, Some(3), "all three are still in the shared queue");
        }
        other => panic!("expected IdleTimeout, got {other:?}"),
    }
    assert!(
        err.to_string()
            .contains("0 messages were still in flight in this process and 3 in the shared queues"),
        "{err}"
    );
    gate.open();
    sender.wait_idle(WAIT).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handling_nodes_wait_idle_waits_for_what_it_claimed() {
    let server = RedisServer::start();
    let probe = Probe::new();
    let gate = Gate::new();
    let (handler, sender) = handler_and_sender(&server, &probe, &gate).await;
    let first = sender
        .send("jobs", b"from the sender".to_vec())
        .await
        .unwrap();
    probe.wait_for(1, WAIT).await;
    // Claimed, and in its handler: held by the handling node.
    assert_eq!(handler.in_flight(), 1);
    {
        let wait = handler.wait_idle(WAIT);
        tokio::pin!(wait);
        assert!(
            still_pending(&mut wait).await,
            "the handling node still holds the message"
        );
        gate.release([first.to_string()]);
        wait.await
            .expect("idle once the claimed message is settled");
    }
    assert_eq!(probe.finished(), vec![first.to_string()]);
    assert_eq!(handler.in_flight(), 0);
    // What it settled for the other node did not make it lose count of its own sends.
    let own = handler.send("jobs", b"from itself".to_vec()).await.unwrap();
    probe.wait_for(2, WAIT).await;
    assert_eq!(
        handler.in_flight(),
        1,
        "its own message, claimed and in its handler"
    );
    let wait = handler.wait_idle(WAIT);
    tokio::pin!(wait);
    assert!(still_pending(&mut wait).await, "its own message is held");
    gate.release([own.to_string()]);
    wait.await.unwrap();
    assert_eq!(probe.finished().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_on_the_handling_node_waits_for_the_messages_it_holds() {
    const N: usize = 3;
    let server = RedisServer::start();
    let probe = Probe::new();
    let gate = Gate::new();
    let (handler, sender) = handler_and_sender(&server, &probe, &gate).await;
    send_jobs(&sender, N).await;
    // Wait until the handling node holds all of them (one in its handler, the rest claimed
    // with it: a claim takes up to a batch).
    event_base_test::redis_cluster::until("the handling node claimed every message", async || {
        handler.in_flight() == N as u64
    })
    .await;
    let drain = handler.shutdown(ShutdownStrategy::Drain { timeout: WAIT });
    tokio::pin!(drain);
    assert!(
        still_pending(&mut drain).await,
        "the drain waits for the held messages"
    );
    gate.open();
    let report = drain.await.expect("drained");
    assert_eq!(
        probe.finished().len(),
        N,
        "every held message was handled before the node stopped"
    );
    assert!(report.drained, "{report:?}");
    assert_eq!(report.left_for_replay, 0);
}

/// A node on `server` whose handler `work` of `jobs` (recorded by `probe`, held by `gate`)
/// has one worker and claims one entry at a time: with its handler held, it holds
/// [`HELD`] entries (one in the handler, one waiting for the worker, one its router waits
/// to hand over) and claims no more until the handler moves on.
async fn one_at_a_time(server: &RedisServer, probe: &Arc<Probe>, gate: &Gate) -> EventBus {
    let queue = factory(server, BEAT).await;
    let node = EventBus::builder()
        .wal(queue.wal())
        .queue(queue.clone())
        .batch_size(1)
        .handler(probe.gated_handler("work", "jobs", gate, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    registered(&queue, "jobs", "work").await;
    node
}

/// What [`one_at_a_time`] holds with its handler held.
const HELD: u64 = 3;

/// Every id of `sent` was handled once, by one of `probes`, and nothing else was.
fn handled_once(sent: &[String], probes: &[&Probe]) {
    let mut handled: Vec<String> = probes
        .iter()
        .flat_map(|p| p.seen().into_iter().map(|s| s.id))
        .collect();
    handled.sort();
    let mut want = sent.to_vec();
    want.sort();
    assert_eq!(handled, want, "every message handled exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_on_a_single_node_leaves_its_backlog_in_redis_for_the_next_start() {
    const N: usize = 8;
    let server = RedisServer::start();
    let probe = Probe::new();
    let gate = Gate::new();
    let node = one_at_a_time(&server, &probe, &gate).await;
    let mut sent = Vec::new();
    for i in 0..N {
        let id = node
            .send("jobs", format!("job {i}").into_bytes())
            .await
            .unwrap();
        sent.push(id.to_string());
    }
    event_base_test::redis_cluster::until("the node holds what it claims at once", async || {
        node.in_flight() == HELD
    })
    .await;
    let drain = node.shutdown(ShutdownStrategy::Drain { timeout: WAIT });
    tokio::pin!(drain);
    assert!(still_pending(&mut drain).await, "its handler holds one");
    gate.open();
    let report = drain.await.expect("drained");
    assert!(report.drained, "{report:?}");
    assert_eq!(report.left_for_replay, 0);
    assert_eq!(
        probe.finished().len() as u64,
        HELD,
        "the drain handled what the node held, and claimed no more of its backlog"
    );
    // The rest waited in Redis for the next start (a node of its own).
    let next = Probe::new();
    let _next = bus(
        factory(&server, BEAT).await,
        vec![next.handler("work", "jobs", |_| Ack::Ack)],
    )
    .await;
    next.wait_for(N - HELD as usize, WAIT).await;
    handled_once(&sent, &[&probe, &next]);
}

/// Sends `job <i>` to `jobs` every few milliseconds (steady traffic) until `stop` is set;
/// returns the ids it sent.
fn keep_sending(sender: EventBus, stop: Arc<AtomicBool>) -> JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut sent = Vec::new();
        let mut pace = tokio::time::interval(Duration::from_millis(5));
        while !stop.load(Ordering::Acquire) {
            pace.tick().await;
            let id = sender
                .send("jobs", format!("job {}", sent.len()).into_bytes())
                .await
                .unwrap();
            sent.push(id.to_string());
        }
        sent
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_node_stops_claiming_and_the_other_node_handles_the_rest() {
    let server = RedisServer::start();
    let (a_probe, b_probe) = (Probe::new(), Probe::new());
    let gate = Gate::new();
    let a = one_at_a_time(&server, &a_probe, &gate).await;
    let _b = bus(
        factory(&server, BEAT).await,
        vec![b_probe.handler("work", "jobs", |_| Ack::Ack)],
    )
    .await;
    let sender = bus(factory(&server, BEAT).await, vec![]).await;
    let stop = Arc::new(AtomicBool::new(false));
    let sending = keep_sending(sender, stop.clone());
    event_base_test::redis_cluster::until("A holds what it claims at once", async || {
        a.in_flight() == HELD
    })
    .await;
    // One in A's handler; the other two reach it only after the drain began.
    assert_eq!(a_probe.count(), 1);
    // Far past the test's wait: a drain that ran to its deadline fails the test.
    let drain = a.shutdown(ShutdownStrategy::Drain { timeout: 6 * WAIT });
    tokio::pin!(drain);
    assert!(still_pending(&mut drain).await, "A's handler holds one");
    gate.open();
    let report = tokio::time::timeout(WAIT, drain)
        .await
        .expect("A's drain ends once what it held is settled, while the sender keeps sending")
        .expect("drained");
    assert!(report.drained, "{report:?}");
    assert_eq!(report.left_for_replay, 0);
    assert_eq!(
        a_probe.count() as u64,
        HELD,
        "after the drain began, A's handler got only the entries A held then: A claimed no more"
    );
    assert_eq!(
        a_probe.finished().len() as u64,
        HELD,
        "A finished all it held"
    );
    // B handles the rest: what was sent during A's drain and after.
    stop.store(true, Ordering::Release);
    let sent = sending.await.unwrap();
    let rest = sent.len() - HELD as usize;
    b_probe.wait_for(rest, WAIT).await;
    handled_once(&sent, &[&a_probe, &b_probe]);
}
