//! A `PersistentWal` reopened on many pending messages keeps them on disk and reads them
//! back a window at a time: every one comes back once, in the order sent, while memory holds
//! only the window; a record damaged after the open is an error (or, with `skip_corrupt`,
//! skipped and counted), never a panic or a silent loss.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_base::backend::{Wal, WalRecordState};
use event_base::{
    async_trait, Ack, EHandler, EMessage, EventBus, FlumeQueueFactory, HandlerSpec, PersistentWal,
    SyncPolicy, WalError,
};

fn message(i: usize) -> Arc<EMessage> {
    Arc::new(EMessage::standard(
        "backlog",
        format!("payload-{i:06}").into_bytes(),
    ))
}

fn index_of(m: &EMessage) -> usize {
    let text = std::str::from_utf8(&m.payload.0).unwrap();
    text.trim_start_matches("payload-").parse().unwrap()
}

/// Writes `n` pending messages (message 7, if there, retried with `attempts` 3 and message
/// 8 begun), closes the WAL; returns their ids in order.
async fn write_backlog(dir: &Path, n: usize, segment_bytes: u64) -> Vec<String> {
    let wal = PersistentWal::builder(dir)
        .sync_policy(SyncPolicy::Never)
        .segment_bytes(segment_bytes)
        .open()
        .unwrap();
    let msgs: Vec<Arc<EMessage>> = (0..n).map(message).collect();
    for chunk in msgs.chunks(256) {
        wal.append_batch(chunk).unwrap().wait().await.unwrap();
    }
    if n > 8 {
        let mut retried = (*msgs[7]).clone();
        retried.attempts = 3;
        wal.retry(&Arc::new(retried)).unwrap();
        assert!(wal.begin(&msgs[8].id).unwrap());
    }
    wal.flush().await.unwrap();
    msgs.iter().map(|m| m.id.clone()).collect()
}

fn reopen(dir: &Path, segment_bytes: u64) -> PersistentWal {
    PersistentWal::builder(dir)
        .sync_policy(SyncPolicy::Never)
        .segment_bytes(segment_bytes)
        .open()
        .unwrap()
}

/// Drains the WAL window by window, completing each record as a handler would; checks that
/// memory never holds more than a window. Returns the indices seen, in order.
async fn drain(wal: &PersistentWal, limit: usize, max_windows: Option<usize>) -> Vec<usize> {
    let mut seen = Vec::new();
    let mut from = Some(0);
    let mut windows = 0;
    while let Some(at) = from {
        if max_windows.is_some_and(|m| windows == m) {
            break;
        }
        let window = wal.pending_window(at, limit).await.unwrap();
        windows += 1;
        assert!(window.records.len() <= limit, "a window over its limit");
        assert!(
            wal.live_in_memory() <= limit as u64,
            "{} messages in memory for a window of {limit}",
            wal.live_in_memory()
        );
        for r in &window.records {
            seen.push(index_of(&r.message));
            assert!(wal.begin(&r.message.id).unwrap());
            wal.complete(&r.message.id).unwrap();
        }
        assert_eq!(wal.live_in_memory(), 0);
        from = window.next;
    }
    seen
}

#[tokio::test]
async fn a_reopened_backlog_replays_in_order_each_once_a_window_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let n = 3000;
    // Small segments: the backlog spans many, and the reopened writer compacts the oldest
    // (more than 16 files) while the windows read them back.
    let segment = 8 << 10;
    write_backlog(dir.path(), n, segment).await;

    let wal = reopen(dir.path(), segment);
    assert_eq!(wal.backlog_on_disk(), n as u64);
    assert_eq!(wal.live_in_memory(), 0, "messages decoded at open");
    assert_eq!(wal.stats().live, n as u64);

    // The retried message keeps its place and its new attempts; the begun one is processing.
    let first = wal.pending_window(0, 10).await.unwrap();
    let got: Vec<(usize, WalRecordState, u32)> = first
        .records
        .iter()
        .map(|r| (index_of(&r.message), r.state, r.message.attempts))
        .collect();
    let want: Vec<(usize, WalRecordState, u32)> = (0..10)
        .map(|i| match i {
            7 => (7, WalRecordState::Pending, 3),
            8 => (8, WalRecordState::Processing, 0),
            i => (i, WalRecordState::Pending, 0),
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(wal.live_in_memory(), 10);
    assert_eq!(wal.backlog_on_disk(), n as u64 - 10);
    for r in &first.records {
        assert!(wal.begin(&r.message.id).unwrap());
        wal.complete(&r.message.id).unwrap();
    }
    let mut seen: Vec<usize> = (0..10).collect();

    // Half of the rest, then a restart: what was completed stays completed, the rest comes
    // back (from wherever compaction moved it).
    let mut from = first.next;
    while let Some(at) = from {
        let window = wal.pending_window(at, 100).await.unwrap();
        assert!(wal.live_in_memory() <= 100);
        for r in &window.records {
            seen.push(index_of(&r.message));
            assert!(wal.begin(&r.message.id).unwrap());
            wal.complete(&r.message.id).unwrap();
        }
        from = window.next;
        if seen.len() >= n / 2 {
            break;
        }
    }
    wal.flush().await.unwrap();
    drop(wal);

    let wal = reopen(dir.path(), segment);
    assert_eq!(wal.backlog_on_disk(), (n - seen.len()) as u64);
    seen.extend(drain(&wal, 128, None).await);
    assert_eq!(seen, (0..n).collect::<Vec<_>>(), "each once, in order");
    assert_eq!(wal.backlog_on_disk(), 0);
    assert_eq!(wal.stats().live, 0);
    wal.flush().await.unwrap();
    drop(wal);
    let wal = reopen(dir.path(), segment);
    assert_eq!(
        wal.stats().live,
        0,
        "completions did not survive the restart"
    );
}

#[tokio::test]
async fn state_changes_and_duplicate_checks_reach_messages_still_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let ids = write_backlog(dir.path(), 20, 64 << 10).await;
    let wal = reopen(dir.path(), 64 << 10);
    assert_eq!(wal.backlog_on_disk(), 20);
    // An idempotent send of a pending id is a duplicate, though its message is on disk.
    let mut again = (*message(3)).clone();
    again.id = ids[3].clone();
    assert!(wal.append_unique(&Arc::new(again)).unwrap().is_none());
    // Completing a message never replayed (withdrawn elsewhere, say) takes it off the disk.
    assert!(wal.begin(&ids[4]).unwrap());
    wal.complete(&ids[4]).unwrap();
    assert_eq!(wal.backlog_on_disk(), 19);
    // The full `pending` reads everything back and moves nothing.
    let all = wal.pending().await.unwrap();
    assert_eq!(all.len(), 19);
    assert_eq!(wal.backlog_on_disk(), 19);
    let rest = drain(&wal, 5, None).await;
    let want: Vec<usize> = (0..20).filter(|i| *i != 4).collect();
    assert_eq!(rest, want);
}

/// Flips a byte inside message `i`'s payload in the segment files of `dir`.
fn damage_payload(dir: &Path, i: usize) {
    let needle = format!("payload-{i:06}").into_bytes();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "wal") {
            continue;
        }
        let mut bytes = std::fs::read(&path).unwrap();
        if let Some(at) = bytes.windows(needle.len()).position(|w| w == needle) {
            bytes[at + 3] ^= 0x20;
            std::fs::write(&path, &bytes).unwrap();
            return;
        }
    }
    panic!("payload {i} not found");
}

#[tokio::test]
async fn a_payload_damaged_after_open_is_an_error_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    write_backlog(dir.path(), 12, 64 << 10).await;
    let wal = reopen(dir.path(), 64 << 10);
    assert_eq!(wal.backlog_on_disk(), 12);
    damage_payload(dir.path(), 5);

    let err = wal.pending_window(0, 100).await.unwrap_err();
    match &err {
        WalError::Corrupt { reason, .. } => {
            assert!(reason.contains("CRC"), "{reason}");
            assert!(reason.contains("skip_corrupt"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // Nothing was taken: the whole window is still on disk, and asking again fails again.
    assert_eq!(wal.backlog_on_disk(), 12);
    assert_eq!(wal.live_in_memory(), 0);
    assert!(wal.pending_window(0, 100).await.is_err());
    // The records before the damaged one can still be read in a smaller window.
    let window = wal.pending_window(0, 5).await.unwrap();
    assert_eq!(window.records.len(), 5);
}

#[tokio::test]
async fn with_skip_corrupt_a_damaged_payload_is_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    write_backlog(dir.path(), 12, 64 << 10).await;
    let wal = PersistentWal::builder(dir.path())
        .sync_policy(SyncPolicy::Never)
        .skip_corrupt(true)
        .open()
        .unwrap();
    damage_payload(dir.path(), 5);
    let seen = drain(&wal, 100, None).await;
    let want: Vec<usize> = (0..12).filter(|i| *i != 5).collect();
    assert_eq!(seen, want);
    assert_eq!(wal.skipped_at_read_back(), 1);
    assert_eq!(wal.backlog_on_disk(), 0);
    assert_eq!(wal.stats().live, 0);
}

/// Counts deliveries per message, and the most live messages the WAL held in memory.
struct Watch {
    wal: Arc<PersistentWal>,
    seen: Mutex<Vec<usize>>,
    peak: AtomicU64,
}

#[async_trait]
impl EHandler for Watch {
    async fn handler(&self, msg: &EMessage) -> Ack {
        self.peak
            .fetch_max(self.wal.live_in_memory(), Ordering::Relaxed);
        self.seen.lock().unwrap().push(index_of(msg));
        Ack::Ack
    }
}

#[tokio::test]
async fn a_bus_started_on_a_large_backlog_handles_every_message_once() {
    let dir = tempfile::tempdir().unwrap();
    let n = 6000;
    write_backlog(dir.path(), n, 1 << 20).await;
    let wal = Arc::new(reopen(dir.path(), 1 << 20));
    let watch = Arc::new(Watch {
        wal: wal.clone(),
        seen: Mutex::new(Vec::new()),
        peak: AtomicU64::new(0),
    });
    let bus = EventBus::builder()
        .wal(wal.clone())
        .queue(FlumeQueueFactory::bounded(64))
        .handler(HandlerSpec::new("watch", "backlog", watch.clone()))
        .build()
        .await
        .unwrap();
    bus.wait_idle(Duration::from_secs(60)).await.unwrap();
    let seen = watch.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), n, "each message once");
    assert_eq!(seen.iter().copied().collect::<HashSet<_>>().len(), n);
    // One worker: the order of the log (8 was begun, 7 retried: both keep their place).
    assert_eq!(seen, (0..n).collect::<Vec<_>>());
    // The replay's window (1024) and the queue (64), never the whole backlog.
    let peak = watch.peak.load(Ordering::Relaxed);
    assert!(peak <= 1024 + 64 + 2, "{peak} messages in memory at once");
    assert_eq!(wal.stats().live, 0);
    assert_eq!(wal.backlog_on_disk(), 0);
}

/// The segment files of `dir`, oldest first.
fn segments(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    out.sort();
    out
}

/// Offset and length of each frame of a segment (after its 16-byte header).
fn frames(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut pos = 16;
    while pos + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize + 8;
        out.push((pos, len));
        pos += len;
    }
    out
}

/// Bytes the open reads of a segment at a time (`recovery::SCAN_CHUNK`).
const SCAN_CHUNK: usize = 1 << 20;

/// Writes a backlog of one segment longer than the open's scan chunk; the segment, its
/// bytes, and the frame that runs across the first chunk's end with its index.
async fn backlog_across_chunks(dir: &Path) -> (std::path::PathBuf, Vec<u8>, usize, usize, usize) {
    // Some 110 bytes a record: about 1.6 MiB, in one segment.
    write_backlog(dir, 15_000, 64 << 20).await;
    let seg = segments(dir).remove(0);
    let bytes = std::fs::read(&seg).unwrap();
    let (k, &(at, len)) = frames(&bytes)
        .iter()
        .enumerate()
        .find(|(_, (at, len))| *at < SCAN_CHUNK && at + len > SCAN_CHUNK)
        .expect("a frame across the first chunk's end");
    (seg, bytes, k, at, len)
}

#[tokio::test]
async fn a_record_damaged_before_the_open_across_two_scan_chunks_is_found_by_the_open() {
    let dir = tempfile::tempdir().unwrap();
    let (seg, mut bytes, k, at, len) = backlog_across_chunks(dir.path()).await;
    // The frames before it are the first messages' appends: it holds message `k`.
    assert!(bytes[at..at + len]
        .windows(14)
        .any(|w| w == format!("payload-{k:06}").as_bytes()));
    // Damage past the chunk's end: only the CRC over the whole record can see it.
    bytes[at + len - 3] ^= 0x20;
    std::fs::write(&seg, &bytes).unwrap();

    match PersistentWal::builder(dir.path())
        .sync_policy(SyncPolicy::Never)
        .open()
    {
        Err(WalError::Corrupt { offset, reason, .. }) => {
            assert_eq!(offset, at as u64, "{reason}");
            assert!(reason.contains("CRC"), "{reason}");
            assert!(reason.contains("valid records follow"), "{reason}");
        }
        Err(other) => panic!("expected Corrupt, got {other:?}"),
        Ok(_) => panic!("a damaged record was not found at open"),
    }
    let wal = PersistentWal::builder(dir.path())
        .sync_policy(SyncPolicy::Never)
        .skip_corrupt(true)
        .open()
        .unwrap();
    let report = wal.recovery_report();
    assert_eq!(report.records_skipped, 1);
    assert_eq!(report.bytes_skipped, len as u64);
    assert_eq!(wal.backlog_on_disk(), 15_000 - 1);
    let seen = drain(&wal, 1000, None).await;
    let want: Vec<usize> = (0..15_000).filter(|i| *i != k).collect();
    assert_eq!(seen, want);
}

#[tokio::test]
async fn a_torn_tail_across_two_scan_chunks_is_cut_where_its_frame_starts() {
    let dir = tempfile::tempdir().unwrap();
    let (seg, bytes, k, at, len) = backlog_across_chunks(dir.path()).await;
    // A crash while the frame was written: the file ends inside it, past the chunk's end.
    let end = SCAN_CHUNK + 10;
    assert!(end < at + len);
    std::fs::write(&seg, &bytes[..end]).unwrap();

    let wal = reopen(dir.path(), 64 << 20);
    let report = wal.recovery_report();
    assert_eq!(report.bytes_truncated, (end - at) as u64);
    assert_eq!(report.records_skipped, 0);
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), at as u64);
    // Messages 0..k were written before it (the retry and the begin came after: gone).
    assert_eq!(wal.backlog_on_disk(), k as u64);
    assert_eq!(drain(&wal, 1000, None).await, (0..k).collect::<Vec<_>>());
}
