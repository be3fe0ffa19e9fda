//! What the child programs of the multi-process tests (`redis_node`, `postgres_node`) share:
//! lines to the parent, written out at once, and the answer to `idle`.

use std::io::Write;
use std::time::Duration;

use event_base::EventBus;

/// The error of a child's role.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Prints one line and writes it out at once (a line shorter than `PIPE_BUF` reaches the
/// parent whole, in one `write`, even if the child is killed right after).
pub fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Answers each `idle` line on stdin with `idle` once `bus` holds nothing claimed or in
/// flight; then runs on until killed.
pub async fn answer_idle(bus: EventBus) -> Result<(), Error> {
    let (lines, mut asked) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    while let Some(line) = asked.recv().await {
        if line.trim() == "idle" {
            bus.wait_idle(Duration::from_secs(60)).await?;
            say(format_args!("idle"));
        }
    }
    // Stdin closed: run on until killed.
    std::future::pending::<()>().await;
    drop(bus);
    Ok(())
}
