//! Kill during sends: a child process sends from 8 concurrent tasks on a `PersistentWal`
//! (`SyncPolicy::Always`) and is killed with SIGKILL at a random point, while commits are
//! in flight, several times over the same directory; a restart then delivers every message
//! any of those runs reported as accepted.
//!
//! The kill points are drawn from a seed printed at the start (`KILL_SEED=<n>` repeats
//! one). `kill -9` leaves the page cache alone, so this shows that nothing an `Ok` send
//! covered was still inside the process, and that recovery copes with a log cut wherever a
//! kill leaves it; the power-loss simulation (`power_loss.rs`) covers what the disk keeps.

use std::collections::HashSet;

use event_base_test::child_kill::{kill_seed_rng, run_and_kill};
use event_base_test::file_restart::replay_jobs;

const ROUNDS: usize = 10;

#[test]
fn every_accepted_send_survives_sigkill_mid_send() {
    let (seed, mut rng) = kill_seed_rng();
    let dir = tempfile::tempdir().unwrap();

    let mut accepted = HashSet::new();
    for round in 0..ROUNDS {
        let kill_after = rng.usize(1..3000);
        let got = run_and_kill(
            env!("CARGO_BIN_EXE_sending_child"),
            dir.path(),
            "ACCEPTED ",
            kill_after,
        );
        assert!(got.len() >= kill_after);
        println!(
            "round {round}: killed after {kill_after}, {} accepted",
            got.len()
        );
        accepted.extend(got);
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let deliveries = replay_jobs(dir.path(), 4).await;
        let seen: HashSet<String> = deliveries.iter().cloned().collect();
        let missing: Vec<&String> = accepted.difference(&seen).collect();
        assert!(
            missing.is_empty(),
            "KILL_SEED={seed}: {} of {} accepted sends lost, e.g. {:?}",
            missing.len(),
            accepted.len(),
            &missing[..missing.len().min(5)]
        );
        // Sends whose record was synced but whose Ok the kill pre-empted may come too;
        // nothing is delivered twice.
        assert_eq!(deliveries.len(), seen.len(), "each replayed message once");
    });
}
