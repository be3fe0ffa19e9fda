//! Recurring schedules on Redis: two nodes register the same schedule, and each slot fires
//! once (the slot is claimed by one script in the hash both nodes share); a node started
//! later takes the schedule up from Redis without registering it.
//!
//! Buses in one process with factories of their own stand for nodes; a real clock (Redis
//! does not follow a paused one).

use std::time::Duration;

use event_base::backend::Wal;
use event_base::prelude::*;
use event_base::{handler_fn, RedisQueueFactory, SLOT_HEADER};
use event_base_test::redis_server::RedisServer;
use event_base_test::WAIT;

async fn node(server: &RedisServer, name: &str, tx: &flume::Sender<u64>) -> EventBus {
    let queue = RedisQueueFactory::connect(&server.url()).await.unwrap();
    let tx = tx.clone();
    EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .node_name(name)
        .handler(HandlerSpec::new(
            "ticks",
            "tick",
            handler_fn(move |msg: EMessage| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(msg.headers.get(SLOT_HEADER).unwrap().parse().unwrap());
                    Ack::Ack
                }
            }),
        ))
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_fire_each_slot_of_a_shared_schedule_once() {
    let server = RedisServer::start();
    let (tx, rx) = flume::unbounded();
    let a = node(&server, "node-a", &tx).await;
    let b = node(&server, "node-b", &tx).await;
    for bus in [&a, &b] {
        bus.schedule(
            "tick",
            Schedule::every(Duration::from_millis(100)),
            "tick",
            Vec::new(),
        )
        .await
        .unwrap();
    }
    let mut slots = Vec::new();
    for _ in 0..8 {
        slots.push(
            tokio::time::timeout(WAIT, rx.recv_async())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    assert!(a.unschedule("tick").await.unwrap());
    // b's next claim finds no schedule: it stops firing too.
    a.wait_idle(WAIT).await.unwrap();
    b.wait_idle(WAIT).await.unwrap();
    slots.extend(rx.drain());
    slots.sort_unstable();
    for pair in slots.windows(2) {
        assert!(pair[1] > pair[0], "slot {} fired twice", pair[0]);
    }
    assert!(a.wal().stored_schedules().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_takes_up_the_schedules_redis_keeps() {
    let server = RedisServer::start();
    let (tx, rx) = flume::unbounded();
    let first = node(&server, "first", &tx).await;
    first
        .schedule(
            "tick",
            Schedule::every(Duration::from_millis(100)).catch_up(CatchUp::None),
            "tick",
            b"x".to_vec(),
        )
        .await
        .unwrap();
    let fired = tokio::time::timeout(WAIT, rx.recv_async())
        .await
        .unwrap()
        .unwrap();
    first.shutdown(ShutdownStrategy::Force).await.unwrap();
    drop(first);
    let _ = rx.drain().count();

    let second = node(&server, "second", &tx).await;
    let listed = second.schedules();
    assert_eq!(listed.len(), 1, "taken up from Redis");
    assert_eq!(listed[0].payload.as_bytes(), b"x");
    let next = tokio::time::timeout(WAIT, rx.recv_async())
        .await
        .unwrap()
        .unwrap();
    assert!(next > fired);
}
