//! The outbox across a crash: a child process on a `PersistentWal` (`SyncPolicy::Always`)
//! runs an outbox handler that sends three mails per order while orders keep coming, and is
//! killed with SIGKILL at a random point, several times over the same directory (each run
//! replays what the last left). Then the log is read as a restart would: every order a run
//! reported as accepted is either complete with all three of its mails in the log, or still
//! owed (pending or processing: its handler runs again) with none of them. Never some mails,
//! never the mails twice, never a completed order without its mails.
//!
//! The kill points are drawn from a seed printed at the start (`KILL_SEED=<n>` repeats one).

use std::collections::{HashMap, HashSet};

use event_base::backend::Wal;
use event_base::PersistentWal;

use event_base_test::child_kill::{kill_seed_rng, run_and_kill};

const ROUNDS: usize = 6;

#[test]
fn a_completion_and_its_outbox_survive_a_kill_together_or_not_at_all() {
    let (seed, mut rng) = kill_seed_rng();
    let dir = tempfile::tempdir().unwrap();
    let mut sent = HashSet::new();
    for round in 0..ROUNDS {
        let kill_after = rng.usize(1..600);
        let got = run_and_kill(
            env!("CARGO_BIN_EXE_outbox_child"),
            dir.path(),
            "SENT ",
            kill_after,
        );
        println!(
            "round {round}: killed after {kill_after}, {} orders",
            got.len()
        );
        sent.extend(got);
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let records = rt.block_on(async {
        let wal = PersistentWal::open(dir.path()).expect("reopen the file WAL");
        wal.pending().await.expect("read the reopened WAL")
    });
    let mut owed: HashSet<String> = HashSet::new();
    let mut mails: HashMap<String, Vec<String>> = HashMap::new();
    for r in &records {
        match r.message.topic.as_str() {
            "orders" => {
                owed.insert(r.message.id.clone());
            }
            "mail" => {
                let body = String::from_utf8_lossy(&r.message.payload.0).into_owned();
                let (order, k) = body
                    .rsplit_once(':')
                    .unwrap_or_else(|| panic!("mail payload {body:?}"));
                mails
                    .entry(order.to_owned())
                    .or_default()
                    .push(k.to_owned());
            }
            other => panic!("a record on topic {other}"),
        }
    }
    let (mut complete, mut still_owed) = (0, 0);
    for order in &sent {
        let mut got = mails.remove(order).unwrap_or_default();
        got.sort();
        if owed.contains(order) {
            assert!(
                got.is_empty(),
                "KILL_SEED={seed}: order {order} is owed again, yet mails of a run are in the log: {got:?}"
            );
            still_owed += 1;
        } else {
            assert_eq!(
                got,
                ["0", "1", "2"],
                "KILL_SEED={seed}: order {order} completed, but its mails in the log are {got:?}"
            );
            complete += 1;
        }
    }
    // Mails of an order no run reported accepted: its send's Ok was cut off by the kill.
    for (order, mut got) in mails {
        got.sort();
        assert_eq!(
            got,
            ["0", "1", "2"],
            "KILL_SEED={seed}: order {order} has some mails only"
        );
        assert!(
            !owed.contains(&order),
            "KILL_SEED={seed}: {order} is owed and has mails"
        );
    }
    println!(
        "{} orders accepted: {complete} complete with their mails, {still_owed} owed",
        sent.len()
    );
    assert!(
        complete > 0,
        "KILL_SEED={seed}: no order completed in any run"
    );
}
