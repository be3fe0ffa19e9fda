//! [`ChildNode`]: a bus in a child process (the `redis_node` binary, say) that a test
//! starts, reads line by line, writes to, stops with signals, and kills.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;

/// A child process whose stdout lines reach the test as `(index, line)`; resumed (if a test
/// froze it with `SIGSTOP`) and killed when dropped.
#[derive(Debug)]
pub struct ChildNode {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl ChildNode {
    /// Starts `program <args>` (a test passes `env!("CARGO_BIN_EXE_redis_node")`); each line
    /// of its stdout goes to `events` as `(index, line)`.
    pub fn start(
        program: &str,
        index: usize,
        args: &[String],
        events: &mpsc::Sender<(usize, String)>,
    ) -> ChildNode {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {program}: {e}"));
        let out = BufReader::new(child.stdout.take().expect("piped"));
        let stdin = child.stdin.take();
        let events = events.clone();
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                if events.send((index, line)).is_err() {
                    break;
                }
            }
        });
        ChildNode { child, stdin }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it (`SIGKILL`) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends it `sig` (`-STOP`, `-CONT`, …) with `kill`; the test fails if that fails.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(sig)
            .arg(self.pid().to_string())
            .stderr(Stdio::null())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {sig} {}", self.pid());
    }

    /// Writes `line` and a newline to its stdin.
    pub fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("piped");
        writeln!(stdin, "{line}").expect("write to the child");
        stdin.flush().expect("flush to the child");
    }
}

impl Drop for ChildNode {
    fn drop(&mut self) {
        // A stopped child ignores everything but SIGKILL; resume it anyway so none stays
        // frozen, then kill it.
        let _ = Command::new("kill")
            .arg("-CONT")
            .arg(self.pid().to_string())
            .stderr(Stdio::null())
            .status();
        self.kill();
    }
}
