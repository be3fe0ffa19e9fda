//! The process that the Redis takeover test kills: starts a bus on Redis queues with a
//! handler `work` on topic `jobs` that never finishes, sends `<n>` messages, prints
//! `started <id>` when its handler begins one, and waits to be killed with SIGKILL.
//!
//! `redis_child <url> <n> <visibility-ms>`

use std::io::Write;
use std::time::Duration;

use event_base::{async_trait, Ack, EHandler, EMessage, HandlerSpec, RedisQueueFactory};

struct Hang;

#[async_trait]
impl EHandler for Hang {
    async fn handler(&self, msg: &EMessage) -> Ack {
        println!("started {}", msg.id);
        let _ = std::io::stdout().flush();
        std::future::pending::<()>().await;
        Ack::Ack
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: redis_child <url> <n> <visibility-ms>";
    let url = args.next().ok_or(usage)?;
    let n: u32 = args.next().ok_or(usage)?.parse()?;
    let visibility = Duration::from_millis(args.next().ok_or(usage)?.parse()?);
    let queue = RedisQueueFactory::connect(&url)
        .await?
        .visibility_timeout(visibility);
    let bus = event_base::EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(HandlerSpec::new("work", "jobs", Hang))
        .build()
        .await?;
    for i in 0..n {
        let id = bus.send("jobs", i.to_be_bytes().to_vec()).await?;
        println!("sent {id}");
    }
    bus.wal().flush().await?;
    println!("flushed");
    let _ = std::io::stdout().flush();
    std::future::pending::<()>().await;
    Ok(())
}
