//! The event_base tour: handlers, sending, broadcast, a retry, a dead letter, and WAL replay
//! after a real process restart.
//!
//! Run with `cargo run -p event_base --example quickstart`.
//!
//! The tour keeps its WAL in files (`PersistentWal`, in a fresh directory under the system's
//! temporary directory). For its last step it runs itself again as a child process, which
//! sends three reports and is killed (`SIGKILL`) before it can handle them; the tour then
//! starts the system again on the same directory and the reports are replayed.
//!
//! Every name comes from `event_base`, as in an application that depends on it alone. An
//! application turns on the `persistent` feature for the file WAL
//! (`event_base = { path = "..", features = ["persistent"] }`); this example gets it from the
//! package's dev-dependencies, so that it runs with the default features.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use event_base::prelude::*;
use event_base::wal::PersistentWal;

/// Set in the child process: the WAL directory it shares with the tour.
const CHILD_WAL_DIR: &str = "EVENT_BASE_QUICKSTART_CHILD_WAL";

/// Ordinary work: four competing workers.
#[handler(topic = "order.created", workers = 4)]
async fn handle_order(msg: &EMessage) -> Ack {
    println!(
        "  order.created   handle_order    id={} payload={:?}",
        short(msg),
        String::from_utf8_lossy(msg.payload.as_bytes()),
    );
    Ack::Ack
}

/// A second handler on the same topic: it receives its own copy of every order.
#[handler(topic = "order.created")]
async fn notify_customer(msg: &EMessage) -> Ack {
    println!("  order.created   notify_customer id={}", short(msg));
    Ack::Ack
}

/// A flaky dependency: the first two deliveries fail, the third succeeds.
#[handler(topic = "payment.charge", retries = 5)]
async fn charge_payment(msg: &EMessage) -> Ack {
    if msg.attempts < 3 {
        println!(
            "  payment.charge  id={} attempt {} -> NoAck (gateway busy, retry in 50 ms)",
            short(msg),
            msg.attempts
        );
        Ack::retry_after(Duration::from_millis(50))
    } else {
        println!(
            "  payment.charge  id={} attempt {} -> Ack",
            short(msg),
            msg.attempts
        );
        Ack::Ack
    }
}

/// Bad input is refused for good: it becomes a dead letter.
#[handler(topic = "inventory.reserve")]
async fn reserve_stock(msg: &EMessage) -> Ack {
    if msg.payload.as_bytes().is_empty() {
        println!(
            "  inventory.reserve id={} empty payload -> Dead",
            short(msg)
        );
        return Ack::dead();
    }
    Ack::Ack
}

/// Every worker of a broadcast topic sees each message once.
#[handler(topic = "cache.invalidate", workers = 3)]
async fn invalidate_cache(msg: &EMessage) -> Ack {
    println!("  cache.invalidate id={} (one of 3 workers)", short(msg));
    Ack::Ack
}

/// Slow reports: in the child process they never finish, so they are left in the WAL.
static REPORTS_CAN_FINISH: AtomicBool = AtomicBool::new(true);

#[handler(topic = "report.generate")]
async fn generate_report(msg: &EMessage) -> Ack {
    if !REPORTS_CAN_FINISH.load(Ordering::Acquire) {
        std::future::pending::<()>().await; // stuck until the process is killed
    }
    println!(
        "  report.generate id={} attempts={} (replayed from the WAL)",
        short(msg),
        msg.attempts
    );
    Ack::Ack
}

fn short(msg: &EMessage) -> &str {
    msg.id.get(..8).unwrap_or(&msg.id)
}

/// Prints the counters of the application's topics.
fn print_metrics(bus: &EventBus) {
    for (topic, m) in bus.metrics().topics {
        if topic.starts_with("_system.") {
            continue;
        }
        println!(
            "   {topic:<18} sent={} replayed={} handled={} acked={} retried={} dead={}",
            m.sent, m.replayed, m.handled, m.acked, m.retried, m.dead
        );
    }
}

/// The child process of step 6: sends three reports, says so, and waits to be killed.
async fn child(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    REPORTS_CAN_FINISH.store(false, Ordering::Release);
    let _bus = start_system!(wal: PersistentWal::open(dir)?).await?;
    for i in 0..3 {
        // `Ok` means the report is in the WAL file, synced (`SyncPolicy::Always`).
        let id = send_msg!("report.generate", format!("report {i}")).await?;
        println!("accepted {id}");
    }
    std::future::pending::<()>().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = std::env::var_os(CHILD_WAL_DIR) {
        return child(Path::new(&dir)).await;
    }
    let dir: PathBuf =
        std::env::temp_dir().join(format!("event_base-quickstart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);

    println!("1. start the system (WAL in {})", dir.display());
    let bus = start_system!(wal: PersistentWal::open(&dir)?).await?;
    for topic in ["order.created", "cache.invalidate"] {
        println!("   workers of {topic}: {:?}", bus.workers(topic));
    }

    println!(
        "2. send: each handler of the topic gets every message, one of its workers handles it"
    );
    for i in 0..3 {
        send_msg!("order.created", format!("order #{i}")).await?;
    }
    bus.wait_idle(Duration::from_secs(5)).await?;

    println!("3. broadcast: every worker of the handler handles it");
    let msg = EMessage::new(
        "cache.invalidate",
        b"user:42".to_vec(),
        DeliveryMode::Broadcast,
        None,
    );
    TopicRouter::global()
        .send("cache.invalidate", msg, Some(true), None)
        .await?;
    bus.wait_idle(Duration::from_secs(5)).await?;

    println!("4. a retry: NoAck twice, then Ack");
    send_msg!("payment.charge", b"{\"amount\":42}".to_vec()).await?;
    bus.wait_idle(Duration::from_secs(5)).await?;

    println!("5. a dead letter");
    send_msg!("inventory.reserve", Vec::<u8>::new()).await?;
    bus.wait_idle(Duration::from_secs(5)).await?;
    for dead in bus.dead_letters().await? {
        println!(
            "   dead letter {} on {} in {:?}: {} after {} attempt(s)",
            &dead.message.id[..8],
            dead.message.topic,
            dead.handlers,
            dead.reason,
            dead.attempts
        );
    }
    let _ = bus.purge_dead_letters().await?;
    println!("   metrics of this run:");
    print_metrics(&bus);
    bus.shutdown(ShutdownStrategy::Drain {
        timeout: Duration::from_secs(5),
    })
    .await?;
    drop(bus); // closes the WAL, unlocking its directory for the next process

    println!("6. a crash: a child process sends 3 reports and is killed before handling them");
    let mut proc = Command::new(std::env::current_exe()?)
        .env(CHILD_WAL_DIR, &dir)
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = proc.stdout.take().ok_or("the child has no stdout")?;
    let accepted = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .filter(|line| line.starts_with("accepted "))
            .take(3)
            .count()
    })
    .await?;
    proc.kill()?; // SIGKILL: no shutdown, no flush
    proc.wait()?;
    println!("   the child had {accepted} report(s) accepted, then was killed");

    println!("7. restart on the same WAL directory: the reports are replayed");
    let bus = start_system!(wal: PersistentWal::open(&dir)?).await?;
    bus.wait_idle(Duration::from_secs(5)).await?;
    println!("   metrics of the restarted run (replays are not sends):");
    print_metrics(&bus);
    bus.shutdown(ShutdownStrategy::Drain {
        timeout: Duration::from_secs(5),
    })
    .await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
