//! A `PersistentWal` reopened after a clean close holds exactly the state it had: pending and
//! processing records for replay, dead letters with their reason, nothing completed,
//! cancelled or purged.

use std::sync::Arc;

use event_base::{DeadReason, EMessage, PersistentWal, Wal, WalRecordState};

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
        wal.fail(&msgs[4], &DeadReason::Other("bad input".into()))
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
