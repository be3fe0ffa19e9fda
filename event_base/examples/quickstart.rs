//! The event_base tour: handlers, sending, broadcast, a retry, a dead letter, and WAL replay.
//!
//! Run with `cargo run --example quickstart`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use event_base::prelude::*;

/// Ordinary work: four competing workers.
#[handler(topic = "order.created", workers = 4)]
async fn handle_order(msg: &EMessage) -> Ack {
    println!(
        "  order.created   id={} payload={:?} mode={:?}",
        short(msg),
        String::from_utf8_lossy(&msg.payload.0),
        msg.delivery_mode
    );
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
    if msg.payload.0.is_empty() {
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

/// Slow reports: in the first run they never finish, so they are left in the WAL.
static REPORTS_CAN_FINISH: AtomicBool = AtomicBool::new(false);

#[handler(topic = "report.generate")]
async fn generate_report(msg: &EMessage) -> Ack {
    if !REPORTS_CAN_FINISH.load(Ordering::Acquire) {
        std::future::pending::<()>().await; // stuck until the process shuts the bus down
    }
    println!(
        "  report.generate id={} attempts={} (replayed from the WAL)",
        short(msg),
        msg.attempts
    );
    Ack::Ack
}

fn short(msg: &EMessage) -> String {
    msg.id.to_string()[..8].to_owned()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // One WAL shared by two systems, to show replay. Real deployments use the file WAL.
    let wal = Arc::new(MemoryWal::new());

    println!("1. start the system");
    let bus = start_system!(wal: wal.clone()).await?;
    for topic in ["order.created", "cache.invalidate"] {
        println!("   workers of {topic}: {:?}", bus.workers(topic));
    }

    println!("2. send (standard, competing workers)");
    for i in 0..3 {
        send_msg!("order.created", format!("order #{i}")).await?;
    }
    bus.wait_idle(Duration::from_secs(5)).await?;

    println!("3. broadcast: every worker of the topic handles it");
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
            "   dead letter {} on {}: {} after {} attempt(s)",
            &dead.message.id.to_string()[..8],
            dead.message.topic,
            dead.reason,
            dead.attempts
        );
    }
    let _ = bus.purge_dead_letters().await?;

    println!("6. WAL replay: 3 reports are in flight when the system is forced down");
    for i in 0..3 {
        send_msg!("report.generate", format!("report {i}")).await?;
    }
    let report = bus.shutdown(ShutdownStrategy::Force).await?;
    println!(
        "   shutdown: {} message(s) left in the WAL for replay",
        report.left_for_replay
    );

    REPORTS_CAN_FINISH.store(true, Ordering::Release);
    let bus = start_system!(wal: wal.clone()).await?;
    bus.wait_idle(Duration::from_secs(5)).await?;

    println!("7. metrics");
    for (topic, m) in bus.metrics().topics {
        if topic.starts_with("_system.") {
            continue;
        }
        println!(
            "   {topic:<18} sent={} handled={} acked={} retried={} dead={}",
            m.sent, m.handled, m.acked, m.retried, m.dead
        );
    }
    bus.shutdown(ShutdownStrategy::Drain {
        timeout: Duration::from_secs(5),
    })
    .await?;
    Ok(())
}
