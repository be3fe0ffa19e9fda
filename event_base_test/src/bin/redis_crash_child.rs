//! The process that the Redis crash-loop test starts again and again: a bus on Redis queues
//! with a handler `work` on topic `jobs` that prints `handling <id>` and ends the process at once
//! (a message that crashes whoever handles it). Sends nothing; runs until killed.
//!
//! `redis_crash_child <url> <visibility-ms> <max-deliveries>`

use std::io::Write;
use std::time::Duration;

use event_base::{async_trait, Ack, EHandler, EMessage, HandlerSpec, RedisQueueFactory};

struct Crash;

#[async_trait]
impl EHandler for Crash {
    async fn handler(&self, msg: &EMessage) -> Ack {
        println!("handling {}", msg.id);
        let _ = std::io::stdout().flush();
        // Gone at once, nothing settled or unwound, as in a crash (without a core file).
        std::process::exit(70);
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: redis_crash_child <url> <visibility-ms> <max-deliveries>";
    let url = args.next().ok_or(usage)?;
    let visibility = Duration::from_millis(args.next().ok_or(usage)?.parse()?);
    let max: u32 = args.next().ok_or(usage)?.parse()?;
    let queue = RedisQueueFactory::connect(&url)
        .await?
        .visibility_timeout(visibility)
        .max_deliveries(max);
    let _bus = event_base::EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(HandlerSpec::new("work", "jobs", Crash))
        .build()
        .await?;
    println!("ready");
    let _ = std::io::stdout().flush();
    std::future::pending::<()>().await;
    Ok(())
}
