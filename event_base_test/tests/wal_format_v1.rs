//! A log written by the build before message ids became text (record format 1, ids as 16
//! UUID bytes) still opens and replays: its ids come back as hyphenated UUID text, and new
//! records (format 2) go into the same log beside the old ones.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use event_base::backend::{Wal, WalRecordState};
use event_base::{DeadReason, EMessage, PersistentWal};

const PENDING: &str = "11111111-1111-4111-8111-111111111111";
const PROCESSING: &str = "22222222-2222-4222-8222-222222222222";
const DEAD: &str = "44444444-4444-4444-8444-444444444444";
const CAUSE: &str = "99999999-9999-4999-8999-999999999999";

fn copy_fixture() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    std::fs::create_dir(&dir).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/wal_v1");
    for entry in std::fs::read_dir(fixture).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wal") {
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    (tmp, dir)
}

async fn check_old_records(wal: &PersistentWal) {
    let mut pending = wal.pending().await.unwrap();
    pending.sort_by(|a, b| a.message.id.cmp(&b.message.id));
    let ids: Vec<(&str, WalRecordState)> = pending
        .iter()
        .map(|r| (r.message.id.as_str(), r.state))
        .filter(|(id, _)| [PENDING, PROCESSING].contains(id))
        .collect();
    assert_eq!(
        ids,
        vec![
            (PENDING, WalRecordState::Pending),
            (PROCESSING, WalRecordState::Processing)
        ]
    );
    let first = &pending[0].message;
    assert_eq!(first.metadata.causation_id.as_deref(), Some(CAUSE));
    assert_eq!(first.metadata.trace_id.as_deref(), Some("trace-1"));
    assert_eq!(&first.payload.0[..], b"pending");
    assert_eq!(first.topic, "orders");

    let dead = wal.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.id, DEAD);
    assert_eq!(dead[0].reason, DeadReason::Other("bad input".into()));
}

#[tokio::test]
async fn a_format_1_log_replays_with_its_ids_as_text() {
    let (_tmp, dir) = copy_fixture();
    let wal = PersistentWal::open(&dir).unwrap();
    check_old_records(&wal).await;
    // The completed and the cancelled message are gone, as they were when written.
    assert_eq!(wal.stats().live, 2);
    assert_eq!(wal.stats().dead, 1);
}

#[tokio::test]
async fn new_records_join_an_old_log_and_both_survive_a_reopen() {
    let (_tmp, dir) = copy_fixture();
    {
        let wal = PersistentWal::open(&dir).unwrap();
        let fresh =
            Arc::new(EMessage::standard("orders", b"fresh".to_vec()).with_id("order-42-created"));
        wal.append(&fresh).unwrap().wait().await.unwrap();
        // A state change on an old record, written in the new format.
        wal.complete(PROCESSING).unwrap();
        wal.flush().await.unwrap();
    }
    let wal = PersistentWal::open(&dir).unwrap();
    let pending = wal.pending().await.unwrap();
    let mut ids: Vec<&str> = pending.iter().map(|r| r.message.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, vec![PENDING, "order-42-created"]);
    assert_eq!(wal.dead_letters().await.unwrap()[0].message.id, DEAD);
}
