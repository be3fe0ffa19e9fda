//! The process that the crash tests kill: starts a bus on a `PersistentWal`, completes 100
//! messages, then sends 500 more to a handler that never finishes, printing the id of every
//! accepted message, then a marker, and waits to be killed with SIGKILL.
//!
//! `crash_child <wal-dir> <always|batch>`

use std::time::Duration;

use event_base::{async_trait, Ack, EHandler, EMessage, HandlerSpec, PersistentWal, SyncPolicy};
use std::io::Write;

struct HangOnStuck;

#[async_trait]
impl EHandler for HangOnStuck {
    async fn handler(&self, msg: &EMessage) -> Ack {
        if msg.payload.0.starts_with(b"stuck") {
            std::future::pending::<()>().await;
        }
        Ack::Ack
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or("usage: crash_child <dir> <always|batch>")?;
    let policy = match args.next().as_deref() {
        Some("batch") => SyncPolicy::Batch {
            max_records: 64,
            max_delay: Duration::from_millis(5),
        },
        _ => SyncPolicy::Always,
    };
    let wal = PersistentWal::builder(&dir).sync_policy(policy).open()?;
    let bus = event_base::EventBus::builder()
        .wal(wal)
        .queue(event_base::FlumeQueueFactory::default())
        .handler(HandlerSpec::new("jobs", "jobs", HangOnStuck).workers(4))
        .build()
        .await?;
    let mut out = std::io::stdout().lock();
    for i in 0..100 {
        let id = bus.send("jobs", format!("done-{i}")).await?;
        writeln!(out, "DONE {id}")?;
    }
    bus.wait_idle(Duration::from_secs(30)).await?;
    // Concurrent senders, so group commit has something to group.
    let mut tasks = Vec::new();
    for t in 0..8 {
        let bus = bus.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..500 / 8 + usize::from(t < 500 % 8) {
                ids.push(bus.send("jobs", format!("stuck-{t}-{i}")).await?);
            }
            Ok::<_, event_base::CoreError>(ids)
        }));
    }
    for t in tasks {
        for id in t.await?? {
            writeln!(out, "ACCEPTED {id}")?;
        }
    }
    writeln!(out, "MARKER")?;
    out.flush()?;
    drop(out);
    std::future::pending::<()>().await;
    Ok(())
}
