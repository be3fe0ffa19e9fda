//! `wait_idle` and `Drain` when other nodes handle a process's sends (Redis): a process counts
//! what it holds (its sends in progress, the entries it claimed until it settles them), and
//! `wait_idle` also waits until the shared queues it sent to are empty, whichever node
//! handles them.
//!
//! Buses in one process with factories of their own stand for nodes (each factory is a node
//! with its own id).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use event_base::{Ack, CoreError, EventBus, ShutdownStrategy};
use event_base_test::redis_cluster::{bus_over as bus, node as factory, registered};
use event_base_test::redis_server::RedisServer;
use event_base_test::{Gate, Probe, WAIT};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_on_a_single_node_handles_its_own_backlog_still_in_redis() {
    const N: usize = 8;
    let server = RedisServer::start();
    let probe = Probe::new();
    let gate = Gate::new();
    let queue = factory(&server, BEAT).await;
    // One entry claimed at a time: most of the backlog waits in the stream, held by no one.
    let node = event_base::EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .batch_size(1)
        .handler(probe.gated_handler("work", "jobs", &gate, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    for i in 0..N {
        node.send("jobs", format!("job {i}").into_bytes())
            .await
            .unwrap();
    }
    probe.wait_for(1, WAIT).await;
    assert!(
        node.in_flight() < N as u64,
        "part of the backlog is in Redis, not held"
    );
    let drain = node.shutdown(ShutdownStrategy::Drain { timeout: WAIT });
    tokio::pin!(drain);
    assert!(still_pending(&mut drain).await);
    gate.open();
    let report = drain.await.expect("drained");
    assert_eq!(
        probe.finished().len(),
        N,
        "the drain handled what the node had sent itself"
    );
    assert!(report.drained, "{report:?}");
}
