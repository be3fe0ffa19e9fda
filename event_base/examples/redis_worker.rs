//! A worker process of a distributed bus: handles `order.created` with four workers, sharing
//! the topic through Redis with every other process that runs this program.
//!
//! ```sh
//! redis-server --port 6379 --save '' --appendonly no    # terminal 1
//! cargo run --example redis_worker --features redis    # terminals 2 and 3
//! cargo run --example redis_sender --features redis -- 10   # terminal 4
//! ```
//!
//! The server is `EB_REDIS_URL` (default `redis://127.0.0.1:6379`). Each message is handled
//! once, by one of the workers of one of the processes. Stop a worker with Ctrl-C (it drains
//! what it holds) or `kill -9` it: the other takes its messages over once their lease runs out
//! (the visibility timeout, 5 s here).

use std::time::Duration;

use event_base::prelude::*;
use event_base::RedisQueueFactory;

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
    let url = std::env::var("EB_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    // Checks the server first: reachable, Redis 7.0 or newer, `maxmemory-policy noeviction`.
    let queue = RedisQueueFactory::connect(&url)
        .await?
        .visibility_timeout(Duration::from_secs(5));
    let bus = start_system!(wal: queue.wal(), queue: queue).await?;
    println!(
        "worker process {} on {url}; Ctrl-C to stop",
        std::process::id()
    );
    let timeout = Duration::from_secs(10);
    bus.run_until_signal(ShutdownStrategy::Drain { timeout })?
        .await?;
    println!("process {} stopped", std::process::id());
    Ok(())
}
