//! The killing half of the crash tests: run a child binary on a WAL directory, read the ids
//! it reports as accepted, and SIGKILL it at a chosen point.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

/// The seed of the kill points, from `KILL_SEED` if set (to repeat a run), else a fresh one,
/// and a random generator from it; the seed is printed so a failing run can be repeated.
pub fn kill_seed_rng() -> (u64, fastrand::Rng) {
    let seed = std::env::var("KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    println!("KILL_SEED={seed}");
    (seed, fastrand::Rng::with_seed(seed))
}

/// Starts `bin` on `dir`, reads its lines `<prefix><id>` (each id once), kills it with
/// SIGKILL once `kill_after` ids were reported, and returns every id it reported, including
/// the lines still in the pipe when it died. Panics if the child stopped by itself first, or
/// printed anything else.
pub fn run_and_kill(bin: &str, dir: &Path, prefix: &str, kill_after: usize) -> HashSet<String> {
    let mut child = Command::new(bin)
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("start {bin}: {e}"));
    let stdout = child.stdout.take().expect("child stdout");
    let mut reported = HashSet::new();
    let mut killed = false;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read child output");
        let id = line
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("unexpected child line {line:?}"));
        assert!(reported.insert(id.to_owned()), "{id} reported twice");
        if !killed && reported.len() >= kill_after {
            // The child is still at work: the kill lands among its commits in flight.
            child.kill().expect("SIGKILL the child");
            killed = true;
        }
    }
    let status = child.wait().expect("reap child");
    assert!(
        killed,
        "the child stopped by itself ({status:?}) after {} ids",
        reported.len()
    );
    reported
}
