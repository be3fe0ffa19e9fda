//! Discovery and shutdown acks between two processes on PostgreSQL (the scenario of
//! `event_base_test::discovery_scenario`): `b` is `postgres_node host`; both have a
//! visibility timeout of 1 s, so each beats every third of a second, and `a` evicts `b` once
//! `b` was silent for a second (when `a` frees expired leases, every half second). Processes
//! list their workers in their rows of `event_base_nodes`.

use std::time::Duration;

use event_base::backend::Wal;
use event_base::{Ack, EventBus, PostgresQueueFactory};
use event_base_test::discovery_scenario::{self as scenario, Cluster};
use event_base_test::postgres_server::PostgresServer;

/// The scenario's cluster on `server`: `a` returns once its subscriptions are committed.
fn cluster(server: &PostgresServer) -> Cluster<'_> {
    Cluster {
        start_a: Box::new(move |watch, topics| {
            Box::pin(async move {
                let queue = PostgresQueueFactory::connect(&server.url())
                    .await
                    .unwrap()
                    .visibility_timeout(Duration::from_secs(1));
                let mut builder = EventBus::builder()
                    .node_name("a")
                    .wal(queue.wal())
                    .queue(queue);
                for &(label, topic) in &topics {
                    builder = builder.handler(watch.handler(label, topic, |_| Ack::Ack));
                }
                let a = builder.build().await.unwrap();
                a.wal().flush().await.unwrap();
                a
            })
        }),
        b: (
            env!("CARGO_BIN_EXE_postgres_node").to_owned(),
            ["host", &server.url(), "b", "2"]
                .map(str::to_owned)
                .to_vec(),
        ),
        listed: Box::new(move || {
            server
                .sql("SELECT count(*) FROM event_base_nodes WHERE workers <> '[]'")
                .parse()
                .unwrap_or(0)
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_is_discovered_answers_and_acks_its_shutdown() {
    let server = PostgresServer::start();
    scenario::another_process_is_discovered_answers_and_acks_its_shutdown(cluster(&server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_of_a_killed_process_are_announced_dead_by_the_process_that_evicts_it() {
    let server = PostgresServer::start();
    scenario::the_workers_of_a_killed_process_are_announced_dead(cluster(&server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_taken_for_dead_while_paused_announces_its_workers_again() {
    let server = PostgresServer::start();
    scenario::a_process_taken_for_dead_while_paused_announces_its_workers_again(cluster(&server))
        .await;
}
