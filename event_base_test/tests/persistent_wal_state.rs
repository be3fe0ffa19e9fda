//! A `PersistentWal` reopened after a clean close holds exactly the state it had: pending and
//! processing records for replay, dead letters with their reason, nothing completed,
//! cancelled or purged.

use std::sync::Arc;

use event_base::backend::{Wal, WalRecordState};
use event_base::{DeadReason, EMessage, PersistentWal};

#[tokio::test]
async fn state_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let msgs: Vec<Arc<EMessage>> = (0..6)
        .map(|i| Arc::new(EMessage::standard("t", vec![i as u8])))
        .collect();
    {
        let wal = PersistentWal::open(dir.path()).unwrap();
        for m in &msgs {
            wal.append(m).unwrap().wait().await.unwrap();
        }
        // 0 stays pending; 1 is processing; 2 completes; 3 is retried; 4 dies; 5 is cancelled.
        wal.begin(&msgs[1].id).unwrap();
        wal.begin(&msgs[2].id).unwrap();
        wal.complete(&msgs[2].id).unwrap();
        let mut retried = (*msgs[3]).clone();
        retried.attempts = 2;
        wal.retry(&Arc::new(retried)).unwrap();
        wal.fail(&msgs[4], &DeadReason::Other("bad input".into()), &[])
            .unwrap();
        wal.cancel(&msgs[5].id)
            .unwrap()
            .unwrap()
            .wait()
            .await
            .unwrap();
        wal.flush().await.unwrap();
    }
    let wal = PersistentWal::open(dir.path()).unwrap();
    let mut pending = wal.pending().await.unwrap();
    pending.sort_by_key(|r| r.message.payload.0[0]);
    let got: Vec<(u8, WalRecordState, u32)> = pending
        .iter()
        .map(|r| (r.message.payload.0[0], r.state, r.message.attempts))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, WalRecordState::Pending, 0),
            (1, WalRecordState::Processing, 0),
            (3, WalRecordState::Pending, 2),
        ]
    );
    let dead = wal.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.id, msgs[4].id);
    assert_eq!(dead[0].reason, DeadReason::Other("bad input".into()));

    // Purge is durable too.
    assert_eq!(wal.purge_dead_letters().await.unwrap(), 1);
    wal.flush().await.unwrap();
    drop(wal);
    let wal = PersistentWal::open(dir.path()).unwrap();
    assert!(wal.dead_letters().await.unwrap().is_empty());
    assert_eq!(wal.pending().await.unwrap().len(), 3);
}

#[tokio::test]
async fn a_second_open_of_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _wal = PersistentWal::open(dir.path()).unwrap();
    let err = PersistentWal::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains("in use"), "{err}");
}

#[tokio::test]
async fn restarts_do_not_pile_up_segment_files() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..8u8 {
        let wal = PersistentWal::open(dir.path()).unwrap();
        // One dead letter per round stays live for good.
        let m = Arc::new(EMessage::standard("t", vec![round]));
        wal.append(&m).unwrap().wait().await.unwrap();
        wal.fail(&m, &DeadReason::Explicit, &[]).unwrap();
        wal.flush().await.unwrap();
    }
    let segments = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "wal")
        })
        .count();
    assert_eq!(segments, 1, "each open appends to the last segment");
    let wal = PersistentWal::open(dir.path()).unwrap();
    assert_eq!(wal.dead_letters().await.unwrap().len(), 8);
}

#[tokio::test]
async fn records_over_the_size_limit_are_refused_not_written() {
    let dir = tempfile::tempdir().unwrap();
    {
        let wal = PersistentWal::builder(dir.path())
            .max_record_bytes(1024)
            .open()
            .unwrap();
        let ok = Arc::new(EMessage::standard("t", vec![1u8; 100]));
        wal.append(&ok).unwrap().wait().await.unwrap();
        // A small payload with a long trace id: the metadata counts too.
        let big = Arc::new(EMessage::standard("t", vec![2u8; 500]).with_trace_id("x".repeat(600)));
        let err = wal.append(&big).unwrap_err();
        assert!(err.to_string().contains("max_record_bytes"), "{err}");
        // A dead letter with an enormous reason is cut to fit, not lost.
        wal.fail(&ok, &DeadReason::Other("p".repeat(100_000)), &[])
            .unwrap();
        let after = Arc::new(EMessage::standard("t", vec![3u8; 10]));
        wal.append(&after).unwrap().wait().await.unwrap();
    }
    let wal = PersistentWal::builder(dir.path())
        .max_record_bytes(1024)
        .open()
        .unwrap_or_else(|e| panic!("reopen failed: {e}"));
    assert_eq!(
        wal.pending().await.unwrap().len(),
        1,
        "the record after the dead letter survived"
    );
    let dead = wal.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
}
