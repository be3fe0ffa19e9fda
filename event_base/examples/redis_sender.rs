//! A process that only sends: writes `n` orders (the first argument, default 10; numbered
//! from the second, default 1) to `order.created`, which `redis_worker` processes handle.
//!
//! ```sh
//! cargo run --example redis_sender --features redis -- 10
//! ```
//!
//! The server is `EB_REDIS_URL` (default `redis://127.0.0.1:6379`).
//!
//! Its bus has no handler at all: a send goes to the handlers the cluster's registry lists
//! for the topic (those some node ran lately: start a `redis_worker` once first), and a topic
//! no node handles is refused with `NoHandler`.

use event_base::{EventBus, RedisQueueFactory};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("EB_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let n: usize = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 10,
    };
    let first: usize = match std::env::args().nth(2) {
        Some(n) => n.parse()?,
        None => 1,
    };
    let queue = RedisQueueFactory::connect(&url).await?;
    let bus = EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .build()
        .await?;
    for i in first..first + n {
        let id = bus
            .send("order.created", format!("order #{i}").into_bytes())
            .await?;
        println!("sent order #{i} ({id})");
    }
    // Sends are queued for the writer connection: wait until Redis has them all.
    bus.wal().flush().await?;
    Ok(())
}
