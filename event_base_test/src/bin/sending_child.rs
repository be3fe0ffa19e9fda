//! The process that the kill-during-sends test kills: starts a bus on a `PersistentWal`
//! (`SyncPolicy::Always`) in the given directory, then sends from 8 concurrent tasks to a
//! handler that never finishes, printing `ACCEPTED <id>` (flushed at once) each time a send
//! returned `Ok`, until it is killed with SIGKILL. Whatever earlier runs left in the
//! directory is replayed into the same never-finishing handler, so it stays owed.
//!
//! `sending_child <wal-dir>`; it stops by itself after 8 × 5000 sends or when its
//! standard output is closed.

use std::io::Write;
use std::sync::{Arc, Mutex};

use event_base::{
    async_trait, Ack, EHandler, EMessage, EventBus, FlumeQueueFactory, HandlerSpec, PersistentWal,
    SyncPolicy,
};

const SENDERS: usize = 8;
const MOST_PER_SENDER: usize = 5000;

/// Holds every delivery forever: the message stays `Processing` in the WAL.
struct Hang;

#[async_trait]
impl EHandler for Hang {
    async fn handler(&self, _msg: &EMessage) -> Ack {
        std::future::pending().await
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .ok_or("usage: sending_child <wal-dir>")?;
    let wal = PersistentWal::builder(&dir)
        .sync_policy(SyncPolicy::Always)
        .open()?;
    let bus = EventBus::builder()
        .wal(wal)
        .queue(FlumeQueueFactory::unbounded())
        .handler(HandlerSpec::new("jobs", "jobs", Hang).workers(4))
        .build()
        .await?;
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let mut tasks = Vec::new();
    for t in 0..SENDERS {
        let (bus, out) = (bus.clone(), out.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..MOST_PER_SENDER {
                let id = bus.send("jobs", format!("job-{t}-{i}")).await?;
                // Printed only once the send returned Ok: the id is accepted.
                let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
                writeln!(out, "ACCEPTED {id}")?;
                out.flush()?;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for t in tasks {
        if let Err(e) = t.await? {
            eprintln!("sending_child: a sender stopped: {e}");
        }
    }
    Ok(())
}
