//! The process the signal tests send SIGTERM to: starts a bus, installs the signal handlers
//! with `run_until_signal`, prints `READY`, and after the shutdown prints its report.
//!
//! With the argument `stuck`, its handler never finishes, so a `Drain` waits for it: the
//! child prints `SIGNALLED` when the bus logs that the first signal arrived, and a second
//! signal must then force the shutdown.

use std::io::Write;
use std::time::Duration;

use event_base::{handler_fn, Ack, EMessage, HandlerSpec, ShutdownStrategy};
use tracing_subscriber::layer::SubscriberExt;

/// Prints `SIGNALLED` when the bus logs the first signal (an event with a `signal` field).
struct SignalMarker;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for SignalMarker {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let meta = event.metadata();
        if meta.target() == event_base::constant::target::SHUTDOWN
            && meta.fields().field("signal").is_some()
            && *meta.level() == tracing::Level::INFO
        {
            println!("SIGNALLED");
            let _ = std::io::stdout().flush();
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let stuck = std::env::args().nth(1).as_deref() == Some("stuck");
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(SignalMarker))?;
    let bus = event_base::builder()
        .handler(HandlerSpec::new(
            "jobs",
            "jobs",
            handler_fn(move |_m: EMessage| async move {
                if stuck {
                    std::future::pending::<()>().await;
                }
                Ack::Ack
            }),
        ))
        .build()
        .await?;
    for _ in 0..10 {
        bus.send("jobs", b"x".to_vec()).await?;
    }
    let stopped = bus.run_until_signal(ShutdownStrategy::Drain {
        timeout: Duration::from_secs(if stuck { 3600 } else { 5 }),
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
