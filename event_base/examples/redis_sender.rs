//! A process that only sends: writes `n` orders (the first argument, default 10; numbered
//! from the second, default 1) for the handler `handle_order` of `order.created`, which
//! `redis_worker` processes run.
//!
//! ```sh
//! cargo run --example redis_sender --features redis -- 10
//! ```
//!
//! The server is `EB_REDIS_URL` (default `redis://127.0.0.1:6379`).
//!
//! A bus sends to the handlers registered in its own process, so a process with no handler of
//! the topic writes to the handler's stream (its subscription) through the queue backend
//! itself, as here. A process that runs the handlers too just uses `send_msg!`.

use std::sync::Arc;

use event_base::backend::QueueFactory;
use event_base::{EMessage, MessageTopic, RedisQueueFactory};

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
    let topic = MessageTopic::from("order.created");
    let orders = queue.create_subscription(&topic, "handle_order")?.producer;
    for i in first..first + n {
        let message = EMessage::standard(&topic, format!("order #{i}"));
        let id = message.id.clone();
        // Resolves once Redis has the entry.
        orders.send(Arc::new(message)).await?;
        println!("sent order #{i} ({id})");
    }
    Ok(())
}
