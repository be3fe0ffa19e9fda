//! The process that the outbox crash test kills: starts a bus on a `PersistentWal`
//! (`SyncPolicy::Always`) in the given directory with an outbox handler on `orders` that
//! sends three `mail` messages per order (payloads `<order id>:0`, `:1`, `:2`) and acks,
//! and a `mail` handler that puts every mail off for an hour (so each stays in the WAL to be
//! counted). It then sends orders from 4 concurrent tasks, printing `SENT <id>` (flushed at
//! once) for each send that returned `Ok`, until it is killed with SIGKILL. Orders an earlier
//! run left in the directory are replayed, and their handler runs again.
//!
//! `outbox_child <wal-dir>`; it stops by itself after 4 × 5000 orders or when its standard
//! output is closed.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_base::{
    async_trait, Ack, EHandler, EMessage, EventBus, FlumeQueueFactory, HandlerSpec, PersistentWal,
    SyncPolicy,
};

const SENDERS: usize = 4;
const MOST_PER_SENDER: usize = 5000;

/// Sends three mails per order through its outbox, then acks.
struct Bill;

#[async_trait]
impl EHandler for Bill {
    async fn handler(&self, msg: &EMessage) -> Ack {
        for k in 0..3 {
            let mail = format!("{}:{k}", msg.id);
            if event_base::send_msg!("mail", mail.into_bytes())
                .await
                .is_err()
            {
                return Ack::retry();
            }
        }
        Ack::Ack
    }
}

/// Puts every mail off for an hour: it stays in the WAL, `Pending`.
struct Later;

#[async_trait]
impl EHandler for Later {
    async fn handler(&self, _msg: &EMessage) -> Ack {
        Ack::NoAck {
            retry_after: Some(Duration::from_secs(3600)),
            max_retries: 1000,
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .ok_or("usage: outbox_child <wal-dir>")?;
    let wal = PersistentWal::builder(&dir)
        .sync_policy(SyncPolicy::Always)
        .open()?;
    let bus = EventBus::builder()
        .wal(wal)
        .queue(FlumeQueueFactory::default())
        .handler(
            HandlerSpec::new("bill", "orders", Bill)
                .workers(4)
                .outbox(true),
        )
        .handler(HandlerSpec::new("later", "mail", Later).workers(2))
        .build()
        .await?;
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let mut tasks = Vec::new();
    for t in 0..SENDERS {
        let (bus, out) = (bus.clone(), out.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..MOST_PER_SENDER {
                let id = bus.send("orders", format!("order-{t}-{i}")).await?;
                let mut out = out.lock().map_err(|_| "stdout lock poisoned")?;
                // A closed pipe means the test is gone: stop.
                if writeln!(out, "SENT {id}")
                    .and_then(|()| out.flush())
                    .is_err()
                {
                    break;
                }
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for t in tasks {
        t.await?.map_err(|e| e.to_string())?;
    }
    Ok(())
}
