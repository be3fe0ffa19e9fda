//! `run_until_signal` shuts the system down with the chosen strategy on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn sigterm_triggers_the_chosen_shutdown() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_signal_child"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("start signal_child");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "READY");
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .expect("run kill");
    assert!(status.success());
    let report = lines.next().expect("a report line").unwrap();
    assert_eq!(report, "REPORT strategy=drain drained=true handled=10");
    assert!(child.wait().unwrap().success(), "the child exited cleanly");
}
