//! README's first command, `cargo run --example quickstart`, does what it says: the tour runs
//! to the end, shows each step's effect, and replays the reports its killed child left in the
//! file WAL.
//!
//! The example is built by `cargo test --workspace` (with the `event_base` package); this test
//! runs that binary.

use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>/examples/quickstart`, beside this test's own `deps/` directory.
fn quickstart() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps/<test>");
    let bin = profile.join("examples").join("quickstart");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo test --workspace` (or `cargo build --example quickstart`)",
        bin.display()
    );
    bin
}

#[test]
fn the_tour_runs_to_the_end_and_replays_what_its_killed_child_accepted() {
    let out = Command::new(quickstart()).output().expect("run the tour");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the tour failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let count = |needle: &str| lines.iter().filter(|l| l.contains(needle)).count();
    // Step 2: both handlers of `order.created` see all three orders.
    assert_eq!(count("handle_order    id="), 3, "{stdout}");
    assert_eq!(count("notify_customer id="), 3, "{stdout}");
    // Step 3: one broadcast, three workers.
    assert_eq!(count("(one of 3 workers)"), 3, "{stdout}");
    // Step 4: two retries, then the ack.
    assert_eq!(count("-> NoAck"), 2, "{stdout}");
    assert_eq!(count("attempt 3 -> Ack"), 1, "{stdout}");
    // Step 5: the dead letter names its handler.
    assert_eq!(count("in [\"reserve_stock\"]"), 1, "{stdout}");
    // Steps 6 and 7: the killed child had three reports accepted; all three are replayed.
    assert_eq!(count("the child had 3 report(s) accepted"), 1, "{stdout}");
    assert_eq!(count("(replayed from the WAL)"), 3, "{stdout}");
    let restarted = lines
        .iter()
        .rev()
        .find(|l| l.trim_start().starts_with("report.generate"))
        .expect("the restarted run's counters");
    assert!(
        restarted.contains("sent=0 replayed=3 handled=3 acked=3"),
        "replays are counted apart from sends: {restarted}"
    );
}
