//! A worker process of a distributed bus on PostgreSQL: handles `order.created` with four
//! workers, sharing the topic with every other process that runs this program on the same
//! database.
//!
//! ```sh
//! # a server: any PostgreSQL 13+ you can reach, e.g. a throwaway one
//! cargo run --example postgres_worker --features postgres    # terminals 2 and 3
//! cargo run --example postgres_sender --features postgres -- 10   # terminal 4
//! ```
//!
//! The database is `EB_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`);
//! the tables are made on first connect. Each message is handled once, by one of the workers
//! of one of the processes. Stop a worker with Ctrl-C (it drains what it holds) or `kill -9`
//! it: the others take its messages over once their lease runs out (the visibility timeout,
//! 5 s here).

use std::time::Duration;

use event_base::prelude::*;
use event_base::PostgresQueueFactory;

#[handler(topic = "order.created", workers = 4)]
async fn handle_order(msg: &EMessage) -> Ack {
    // The work: half a second, time enough to kill a process in the middle of it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!(
        "process {} handled {} ({})",
        std::process::id(),
        String::from_utf8_lossy(&msg.payload.0),
        msg.id,
    );
    Ack::Ack
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("EB_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    // Connects once: the server is reachable, and event_base's tables are there.
    let queue = PostgresQueueFactory::connect(&url)
        .await?
        .visibility_timeout(Duration::from_secs(5));
    let bus = start_system!(wal: queue.wal(), queue: queue).await?;
    println!(
        "worker process {} on PostgreSQL; Ctrl-C to stop",
        std::process::id()
    );
    let timeout = Duration::from_secs(10);
    bus.run_until_signal(ShutdownStrategy::Drain { timeout })?
        .await?;
    println!("process {} stopped", std::process::id());
    Ok(())
}
