//! `run_until_signal` shuts the system down with the chosen strategy on SIGTERM, and a
//! second SIGTERM while that shutdown waits forces it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

fn term(child: &Child) {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .expect("run kill");
    assert!(status.success());
}

#[test]
fn sigterm_triggers_the_chosen_shutdown() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_signal_child"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("start signal_child");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "READY");
    term(&child);
    assert_eq!(lines.next().unwrap().unwrap(), "SIGNALLED");
    let report = lines.next().expect("a report line").unwrap();
    assert_eq!(report, "REPORT strategy=drain drained=true handled=10");
    assert!(child.wait().unwrap().success(), "the child exited cleanly");
}

#[test]
fn a_second_sigterm_during_a_drain_forces_it() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_signal_child"))
        .arg("stuck")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start signal_child");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "READY");
    term(&child);
    // The drain has begun and waits for a handler that never finishes (for an hour).
    assert_eq!(lines.next().unwrap().unwrap(), "SIGNALLED");
    term(&child);
    let report = lines.next().expect("a report line").unwrap();
    assert_eq!(report, "REPORT strategy=force drained=false handled=0");
    assert!(child.wait().unwrap().success(), "the child exited cleanly");
}
