//! Damaged WAL files give the documented outcome: a torn or corrupt tail of the last segment
//! is truncated (the records before it survive), while corruption in a sealed segment is a
//! typed error naming the file and offset, unless `skip_corrupt(true)` is chosen.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use event_base::{EMessage, PersistentWal, Wal, WalError};

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    v.sort();
    v
}

/// Opens the WAL, appends one message per payload durably, and closes it.
async fn write_session(dir: &Path, payloads: &[&str]) -> Vec<String> {
    let wal = PersistentWal::open(dir).unwrap();
    let mut ids = Vec::new();
    for p in payloads {
        let m = Arc::new(EMessage::standard("t", p.as_bytes().to_vec()));
        wal.append(&m).unwrap().wait().await.unwrap();
        ids.push(m.id.clone());
    }
    ids
}

async fn live_ids(dir: &Path) -> Vec<String> {
    let wal = PersistentWal::open(dir).unwrap();
    let mut ids: Vec<(std::time::SystemTime, String)> = wal
        .pending()
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.message.metadata.created_at, r.message.id.clone()))
        .collect();
    ids.sort();
    ids.into_iter().map(|(_, id)| id).collect()
}

fn len(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

#[tokio::test]
async fn a_truncated_last_record_is_dropped_and_the_rest_survive() {
    let dir = tempfile::tempdir().unwrap();
    let ids = write_session(dir.path(), &["a", "b", "c"]).await;
    let seg = segments(dir.path()).pop().unwrap();
    let f = OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(len(&seg) - 5).unwrap();
    drop(f);
    assert_eq!(live_ids(dir.path()).await, ids[..2].to_vec());
}

#[tokio::test]
async fn a_flipped_byte_in_the_last_record_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let ids = write_session(dir.path(), &["a", "b", "c"]).await;
    let seg = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let last = bytes.len() - 10;
    bytes[last] ^= 0x40;
    let before = bytes.len() as u64;
    std::fs::write(&seg, &bytes).unwrap();
    assert_eq!(live_ids(dir.path()).await, ids[..2].to_vec());
    assert!(len(&seg) < before, "the bad record was cut off the file");
}

#[tokio::test]
async fn garbage_appended_is_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let ids = write_session(dir.path(), &["a", "b", "c"]).await;
    let seg = segments(dir.path()).pop().unwrap();
    let clean = len(&seg);
    let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(b"\x13\x37this is not a record, just noise from a confused disk")
        .unwrap();
    drop(f);
    assert_eq!(live_ids(dir.path()).await, ids);
    assert_eq!(len(&seg), clean);
}

#[tokio::test]
async fn a_zero_filled_tail_is_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let ids = write_session(dir.path(), &["a", "b", "c"]).await;
    let seg = segments(dir.path()).pop().unwrap();
    let clean = len(&seg);
    let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&[0u8; 4096]).unwrap();
    drop(f);
    assert_eq!(live_ids(dir.path()).await, ids);
    assert_eq!(len(&seg), clean);
}

#[tokio::test]
async fn a_huge_length_in_the_tail_is_not_an_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let ids = write_session(dir.path(), &["a"]).await;
    let seg = segments(dir.path()).pop().unwrap();
    let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5])
        .unwrap();
    drop(f);
    assert_eq!(live_ids(dir.path()).await, ids);
}

#[tokio::test]
async fn corruption_in_a_sealed_segment_is_an_error_unless_skipped() {
    let dir = tempfile::tempdir().unwrap();
    // Small segments and 1 KiB records: the first segment is sealed after a few records.
    let mut ids = Vec::new();
    {
        let wal = PersistentWal::builder(dir.path())
            .segment_bytes(4096)
            .open()
            .unwrap();
        for i in 0..8u8 {
            let m = Arc::new(EMessage::standard("t", vec![i; 1000]));
            wal.append(&m).unwrap().wait().await.unwrap();
            ids.push(m.id.clone());
        }
    }
    let segs = segments(dir.path());
    assert!(segs.len() >= 2, "expected a sealed segment, found {segs:?}");
    let sealed = &segs[0];
    let mut bytes = std::fs::read(sealed).unwrap();
    // Byte 30 lies in the body of the first record (header 16 + frame header 8).
    bytes[30] ^= 0xff;
    std::fs::write(sealed, &bytes).unwrap();

    let err = PersistentWal::open(dir.path()).unwrap_err();
    match &err {
        WalError::Corrupt { file, offset, .. } => {
            assert_eq!(file, sealed);
            assert_eq!(*offset, 16);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(
        err.to_string().contains("skip_corrupt"),
        "the message says how to go on"
    );

    let wal = PersistentWal::builder(dir.path())
        .skip_corrupt(true)
        .open()
        .unwrap();
    let live: Vec<String> = wal
        .pending()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.message.id.clone())
        .collect();
    assert!(
        !live.contains(&ids[0]),
        "the damaged segment's records are skipped"
    );
    assert!(live.contains(&ids[7]), "the other segments are kept");
    assert!(live.len() < ids.len());
}
