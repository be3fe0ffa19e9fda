//! Damaged WAL files give the documented outcome: a torn or corrupt tail of the last segment
//! (nothing valid after it) is truncated (the records before it survive), while corruption
//! elsewhere (a sealed segment, bad bytes with valid records after them, a segment missing
//! from the sequence) is a typed error naming the file and offset, unless
//! `skip_corrupt(true)` is chosen. Files recovery does not understand are moved aside, never
//! deleted, and `recovery_report()` says what was done.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use event_base::backend::Wal;
use event_base::{EMessage, PersistentWal, WalError};
use event_base_test::pending_ids;

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
    let live = pending_ids(&wal).await;
    assert!(
        !live.contains(&ids[0]),
        "the damaged segment's records are skipped"
    );
    assert!(live.contains(&ids[7]), "the other segments are kept");
    assert!(live.len() < ids.len());
}

/// Writes `n` 1000-byte messages into 4 KiB segments, so that several segments are sealed.
async fn write_segmented(dir: &Path, n: u8) -> Vec<String> {
    let wal = PersistentWal::builder(dir)
        .segment_bytes(4096)
        .open()
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        let m = Arc::new(EMessage::standard("t", vec![i; 1000]));
        wal.append(&m).unwrap().wait().await.unwrap();
        ids.push(m.id.clone());
    }
    ids
}

#[tokio::test]
async fn a_clean_open_reports_what_it_read_and_nothing_lost() {
    let dir = tempfile::tempdir().unwrap();
    write_session(dir.path(), &["a", "b", "c"]).await;
    let wal = PersistentWal::open(dir.path()).unwrap();
    let report: &event_base::RecoveryReport = wal.recovery_report();
    assert_eq!(report.segments_read, 1);
    assert_eq!(report.records_replayed, 3);
    assert!(!report.lost_anything(), "{report:?}");
}

#[tokio::test]
async fn a_torn_tail_is_reported_as_truncated_bytes() {
    let dir = tempfile::tempdir().unwrap();
    write_session(dir.path(), &["a", "b"]).await;
    let seg = segments(dir.path()).pop().unwrap();
    let f = OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(len(&seg) - 5).unwrap();
    drop(f);
    let before = len(&seg);
    let wal = PersistentWal::open(dir.path()).unwrap();
    let report = wal.recovery_report();
    assert_eq!(report.records_replayed, 1);
    assert_eq!(report.bytes_truncated, before - len(&seg));
    assert!(report.bytes_truncated > 0);
    assert_eq!(report.records_skipped, 0);
}

#[tokio::test]
async fn a_sealed_segment_missing_from_the_sequence_is_corruption_unless_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let ids = write_segmented(dir.path(), 12).await;
    let segs = segments(dir.path());
    assert!(segs.len() >= 4, "expected several segments, found {segs:?}");
    let gone = segs[1].clone();
    std::fs::remove_file(&gone).unwrap();

    let err = PersistentWal::open(dir.path()).unwrap_err();
    match &err {
        WalError::Corrupt { file, .. } => assert_eq!(file, &gone),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(err.to_string().contains("skip_corrupt"));

    {
        let wal = PersistentWal::builder(dir.path())
            .skip_corrupt(true)
            .open()
            .unwrap();
        assert_eq!(wal.recovery_report().missing_segments, vec![gone.clone()]);
        assert!(wal.recovery_report().lost_anything());
        let live = pending_ids(&wal).await;
        assert!(live.contains(&ids[0]) && live.contains(&ids[11]));
        assert!(
            live.len() < ids.len(),
            "the missing segment's records are gone"
        );
    }
    // The loss was accepted once: the gap is filled and a plain open works again.
    let wal = PersistentWal::open(dir.path()).unwrap();
    assert!(!wal.recovery_report().lost_anything());
}

#[tokio::test]
async fn segments_deleted_by_compaction_at_the_start_are_not_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    {
        let wal = PersistentWal::builder(dir.path())
            .segment_bytes(4096)
            .open()
            .unwrap();
        for round in 0..3u8 {
            let mut ids = Vec::new();
            for i in 0..8u8 {
                let m = Arc::new(EMessage::standard("t", vec![round ^ i; 1000]));
                wal.append(&m).unwrap().wait().await.unwrap();
                ids.push(m.id.clone());
            }
            for id in &ids {
                assert!(wal.begin(id).unwrap());
                wal.complete(id).unwrap();
            }
        }
        wal.flush().await.unwrap();
    }
    let first = segments(dir.path())[0].clone();
    assert_ne!(
        first.file_name().unwrap(),
        "00000000000000000001.wal",
        "compaction was expected to delete the oldest segments"
    );
    let wal = PersistentWal::open(dir.path()).unwrap();
    assert!(!wal.recovery_report().lost_anything());
    assert!(pending_ids(&wal).await.is_empty());
}

/// Overwrites 8 bytes inside the payload `marker` in `seg`.
fn damage_payload(seg: &Path, marker: &[u8]) -> usize {
    let mut bytes = std::fs::read(seg).unwrap();
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker)
        .unwrap();
    bytes[at + 4..at + 12].copy_from_slice(b"XXXXXXXX");
    std::fs::write(seg, &bytes).unwrap();
    at
}

#[tokio::test]
async fn bad_bytes_followed_by_valid_records_in_the_newest_segment_are_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let ids = write_session(dir.path(), &["first", "second-payload-1234567890", "third"]).await;
    let seg = segments(dir.path()).pop().unwrap();
    let at = damage_payload(&seg, b"second-payload-1234567890");
    let size = len(&seg);

    let err = PersistentWal::open(dir.path()).unwrap_err();
    match &err {
        WalError::Corrupt { file, offset, .. } => {
            assert_eq!(file, &seg);
            assert!(*offset > 16 && *offset < at as u64, "offset {offset}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(len(&seg), size, "a refused open leaves the file as it was");

    let wal = PersistentWal::builder(dir.path())
        .skip_corrupt(true)
        .open()
        .unwrap();
    let report = wal.recovery_report().clone();
    assert_eq!(report.records_skipped, 1);
    assert_eq!(report.records_replayed, 2);
    assert_eq!(report.bytes_truncated, 0);
    let mut live = pending_ids(&wal).await;
    live.sort();
    let mut want = vec![ids[0].clone(), ids[2].clone()];
    want.sort();
    assert_eq!(live, want, "the record after the damage is kept");
}

#[tokio::test]
async fn a_newest_segment_with_a_damaged_header_is_moved_aside_not_deleted() {
    let dir = tempfile::tempdir().unwrap();
    write_session(dir.path(), &["a", "b"]).await;
    let seg = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(&seg, &bytes).unwrap();

    let wal = PersistentWal::open(dir.path()).unwrap();
    let aside = PathBuf::from(format!("{}.corrupt", seg.display()));
    assert_eq!(wal.recovery_report().set_aside, vec![aside.clone()]);
    assert_eq!(std::fs::read(&aside).unwrap(), bytes, "kept byte for byte");
    assert!(pending_ids(&wal).await.is_empty());
}

#[tokio::test]
async fn a_stray_segment_named_file_is_moved_aside_and_other_wal_files_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let ids = write_session(dir.path(), &["a", "b"]).await;
    let stray = dir.path().join("00000000000000000007.wal");
    let other = dir.path().join("notes.wal");
    std::fs::write(&other, b"mine").unwrap();
    for (round, name) in ["corrupt", "1.corrupt"].iter().enumerate() {
        let content = format!("not a segment {round}");
        std::fs::write(&stray, &content).unwrap();
        let wal = PersistentWal::open(dir.path()).unwrap();
        let aside = dir.path().join(format!("00000000000000000007.wal.{name}"));
        assert_eq!(wal.recovery_report().set_aside, vec![aside.clone()]);
        assert_eq!(std::fs::read_to_string(&aside).unwrap(), content);
        assert_eq!(pending_ids(&wal).await.len(), ids.len());
    }
    assert_eq!(std::fs::read(&other).unwrap(), b"mine");
}

#[tokio::test]
async fn a_newest_segment_with_a_partly_written_header_is_a_crash_artefact() {
    let dir = tempfile::tempdir().unwrap();
    let ids = write_session(dir.path(), &["a", "b"]).await;
    let partial = dir.path().join("00000000000000000002.wal");
    std::fs::write(&partial, b"EBWALSE").unwrap();

    let wal = PersistentWal::open(dir.path()).unwrap();
    let report = wal.recovery_report();
    assert_eq!(report.bytes_truncated, 7);
    assert!(report.set_aside.is_empty());
    assert!(
        !partial.exists(),
        "an empty, half-created segment is removed"
    );
    assert_eq!(pending_ids(&wal).await.len(), ids.len());
}
