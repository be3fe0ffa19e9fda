//! Discovery and shutdown acks between two processes on Redis (the scenario of
//! `event_base_test::discovery_scenario`): `b` is `redis_node host`, beating every 200 ms as
//! `a` does; `a`, the only `Host` left once `b` is silent, holds the janitor lease and evicts
//! `b` after three silent beats. Processes list their workers as `eb:{nodes}:w:<node id>`.

use std::time::Duration;

use event_base::{Ack, EventBus, RedisQueueFactory};
use event_base_test::discovery_scenario::{self as scenario, Cluster};
use event_base_test::redis_cluster::any_registered;
use event_base_test::redis_server::RedisServer;

/// The scenario's cluster on `server`: `a` returns once its subscriptions are in the
/// registry, so that `b` finds them when it starts (Redis offers nothing to wait on).
fn cluster(server: &RedisServer) -> Cluster<'_> {
    Cluster {
        start_a: Box::new(move |watch, topics| {
            Box::pin(async move {
                let queue = RedisQueueFactory::connect(&server.url())
                    .await
                    .unwrap()
                    .heartbeat(Duration::from_millis(200));
                let mut builder = EventBus::builder()
                    .node_name("a")
                    .wal(queue.wal())
                    .queue(queue.clone());
                for &(label, topic) in &topics {
                    builder = builder.handler(watch.handler(label, topic, |_| Ack::Ack));
                }
                let a = builder.build().await.unwrap();
                for &(_, topic) in &topics {
                    any_registered(&queue, topic).await;
                }
                a
            })
        }),
        b: (
            env!("CARGO_BIN_EXE_redis_node").to_owned(),
            ["host", &server.url(), "b", "2"]
                .map(str::to_owned)
                .to_vec(),
        ),
        listed: Box::new(move || server.query(&["KEYS", "eb:{nodes}:w:*"]).items().len()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_is_discovered_answers_and_acks_its_shutdown() {
    let server = RedisServer::start();
    scenario::another_process_is_discovered_answers_and_acks_its_shutdown(cluster(&server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_of_a_killed_process_are_announced_dead_by_the_janitor() {
    let server = RedisServer::start();
    scenario::the_workers_of_a_killed_process_are_announced_dead(cluster(&server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_taken_for_dead_while_paused_announces_its_workers_again() {
    let server = RedisServer::start();
    scenario::a_process_taken_for_dead_while_paused_announces_its_workers_again(cluster(&server))
        .await;
}
