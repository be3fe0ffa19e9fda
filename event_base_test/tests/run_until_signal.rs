//! `run_until_signal` shuts the system down with the chosen strategy on SIGTERM or SIGINT
//! (Ctrl-C), and a second signal while that shutdown waits forces it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(child.id().to_string())
        .status()
        .expect("run kill");
    assert!(status.success());
}

fn term(child: &Child) {
    signal(child, "TERM");
}

/// Starts the child, sends it `name` once it is ready, and checks that it shut down with
/// its strategy and exited by itself (a signal the bus did not catch would kill it).
fn one_signal_shuts_down(name: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_signal_child"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("start signal_child");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "READY");
    signal(&child, name);
    let next = lines.next().unwrap_or_else(|| {
        panic!(
            "the child's output ended at SIG{name}: {:?}",
            child.wait().unwrap()
        )
    });
    assert_eq!(next.unwrap(), "SIGNALLED", "after SIG{name}");
    let report = lines.next().expect("a report line").unwrap();
    assert_eq!(report, "REPORT strategy=drain drained=true handled=10");
    let status = child.wait().unwrap();
    assert!(status.success(), "the child exited cleanly: {status:?}");
}

#[test]
fn sigint_triggers_the_chosen_shutdown() {
    one_signal_shuts_down("INT");
}

#[test]
fn sigterm_triggers_the_chosen_shutdown() {
    one_signal_shuts_down("TERM");
}

#[test]
fn a_second_sigint_during_a_drain_forces_it() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_signal_child"))
        .arg("stuck")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start signal_child");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "READY");
    signal(&child, "INT");
    let next = lines.next().unwrap_or_else(|| {
        panic!(
            "the child's output ended at SIGINT: {:?}",
            child.wait().unwrap()
        )
    });
    assert_eq!(next.unwrap(), "SIGNALLED");
    signal(&child, "INT");
    let report = lines.next().expect("a report line").unwrap();
    assert_eq!(report, "REPORT strategy=force drained=false handled=0");
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
