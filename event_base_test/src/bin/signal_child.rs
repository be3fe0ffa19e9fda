//! The process the signal test sends SIGTERM to: starts a bus, installs the signal handlers
//! with `run_until_signal`, prints `READY`, and after the signal prints its shutdown report.

use std::io::Write;
use std::time::Duration;

use event_base::{handler_fn, Ack, EMessage, HandlerSpec, ShutdownStrategy};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bus = event_base::builder()
        .handler(HandlerSpec::new(
            "jobs",
            "jobs",
            handler_fn(|_m: EMessage| async { Ack::Ack }),
        ))
        .build()
        .await?;
    for _ in 0..10 {
        bus.send("jobs", b"x".to_vec()).await?;
    }
    let stopped = bus.run_until_signal(ShutdownStrategy::Drain {
        timeout: Duration::from_secs(5),
    })?;
    println!("READY");
    std::io::stdout().flush()?;
    let report = stopped.await?;
    println!(
        "REPORT strategy={} drained={} handled={}",
        report.strategy,
        report.drained,
        bus.metrics().topic("jobs").map_or(0, |m| m.acked)
    );
    Ok(())
}
