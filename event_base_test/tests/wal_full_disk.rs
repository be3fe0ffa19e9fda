//! A `PersistentWal` on a real disk that fills up: a small tmpfs the test mounts itself (it
//! needs root, as CI has; `EB_TEST_NO_MOUNT=1` skips these tests where nobody can mount).
//!
//! Under every `SyncPolicy` the WAL stops at the first write the disk refuses: that send and
//! every later one is refused with `WalError::Failed` naming the cause (never `Ok` for a
//! message that is not written), `WalStats::failed` and `Wal::failure` say so, and once
//! space returns a reopen recovers every message the WAL acknowledged, without
//! `skip_corrupt`. The last test fills the disk at the moment compaction copies the
//! survivors of an old segment: before the fix, the failed copy was forgotten, the old
//! segment deleted at the next flush, and the survivors lost.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use event_base::backend::Wal;
use event_base::{
    Ack, CoreError, EMessage, EventBus, FlumeQueueFactory, PersistentWal, ShutdownStrategy,
    SyncPolicy, WalError,
};
use event_base_test::{pending_ids, Probe};

/// A tmpfs mounted on a temporary directory, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` reads it); `None` if mounting is not
    /// possible and `EB_TEST_NO_MOUNT` asks to skip.
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr);
            if std::env::var_os("EB_TEST_NO_MOUNT").is_some() {
                eprintln!("skipped: cannot mount a tmpfs ({why})");
                return None;
            }
            panic!(
                "cannot mount a tmpfs ({why}); these tests need root (CI runs as root), or set \
                 EB_TEST_NO_MOUNT=1 to skip them"
            );
        }
        Some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Space comes back: the tmpfs grows to `size`.
    fn resize(&self, size: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(self.path())
            .status()
            .expect("run mount")
            .success();
        assert!(ok, "remount to {size}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn wal_dir(fs: &Tmpfs) -> PathBuf {
    fs.path().join("wal")
}

/// The refusal a full disk must give: `WalError::Failed`, naming the disk's reason.
fn assert_failed_for_space(err: &CoreError) {
    match err {
        CoreError::Wal(WalError::Failed { cause }) => assert!(
            cause.contains("No space left on device"),
            "the cause names the full disk: {cause}"
        ),
        other => panic!("expected WalError::Failed, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("free disk space"), "says what to do: {text}");
}

/// Sends 4 KiB messages to a bus on a 1 MiB tmpfs until one is refused. The handler never
/// finishes them (it asks for a retry in an hour), so every record stays live on disk.
/// Returns the ids the WAL acknowledged: every send that returned `Ok` under `Always` and
/// `Batch`; under `Never`, those a later `flush` that returned `Ok` covered.
async fn fill(policy: SyncPolicy, over_grpc: bool) -> Option<()> {
    let fs = Tmpfs::mount("1m")?;
    let wal = PersistentWal::builder(wal_dir(&fs))
        .sync_policy(policy)
        .segment_bytes(64 << 10)
        .open()
        .unwrap();
    let probe = Probe::new();
    let bus = EventBus::builder()
        .wal(wal)
        .queue(FlumeQueueFactory::default())
        .handler(probe.handler("h", "t", |_| Ack::NoAck {
            retry_after: Some(Duration::from_secs(3600)),
            max_retries: 1,
        }))
        .build()
        .await
        .unwrap();

    let mut acknowledged = HashSet::new();
    let mut unflushed = Vec::new();
    let mut refusal = None;
    for i in 0..2_000u32 {
        let payload = vec![(i % 251) as u8; 4096];
        match bus.send("t", payload).await {
            Ok(id) => unflushed.push(id.to_string()),
            Err(e) => {
                refusal = Some(e);
                break;
            }
        }
        if policy != SyncPolicy::Never {
            // Every Ok was durable when it returned.
            acknowledged.extend(unflushed.drain(..));
        } else if i % 16 == 15 && bus.wal().flush().await.is_ok() {
            acknowledged.extend(unflushed.drain(..));
        }
    }
    let refusal = refusal.expect("a 1 MiB disk refuses 8 MiB of sends");
    assert_failed_for_space(&refusal);

    // Failed for good: later sends, flushes and the state all say so.
    for _ in 0..10 {
        let err = bus.send("t", vec![1u8; 16]).await.unwrap_err();
        assert_failed_for_space(&err);
    }
    let flushed = bus.wal().flush().await.unwrap_err();
    assert_failed_for_space(&CoreError::Wal(flushed));
    assert!(bus.wal_stats().failed, "WalStats::failed");
    assert!(
        bus.metrics().wal.failed,
        "in the metrics (event_base_wal_failed)"
    );
    let failure = bus.wal().failure().expect("Wal::failure names the cause");
    assert!(failure.contains("No space left on device"), "{failure}");
    assert!(!acknowledged.is_empty(), "some sends went through first");
    if over_grpc {
        // (The server's handles on the bus may outlive its shutdown a moment, holding the
        // WAL's directory: no reopen here, the other tests make it.)
        failed_over_grpc(&bus).await;
        return Some(());
    }

    // Space returns; a restart recovers every acknowledged message, without skip_corrupt.
    // (Closed, not dropped: `close` waits for the bus's tasks, so the WAL is released.)
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
    bus.close().await.unwrap();
    fs.resize("64m");
    let wal = PersistentWal::builder(wal_dir(&fs)).open().unwrap();
    let pending: HashSet<String> = pending_ids(&wal).await.into_iter().collect();
    let lost: Vec<_> = acknowledged.difference(&pending).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged messages lost: {lost:?}",
        lost.len(),
        acknowledged.len()
    );
    assert_eq!(wal.recovery_report().records_skipped, 0);
    assert!(!wal.stats().failed, "a reopened WAL works");
    Some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_refuses_once_the_disk_is_full_and_loses_nothing_it_acknowledged() {
    fill(SyncPolicy::Always, false).await;
}

/// What an operator sees: health `NOT_SERVING`, and `GetStatus` naming the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_wal_turns_grpc_health_not_serving_and_says_why() {
    fill(SyncPolicy::Always, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_refuses_once_the_disk_is_full_and_loses_nothing_it_acknowledged() {
    fill(
        SyncPolicy::Batch {
            max_records: 32,
            max_delay: Duration::from_millis(1),
        },
        false,
    )
    .await;
}

/// Before the fix 221 sends returned `Ok` on a full disk and 22 were there after reopening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_refuses_once_the_disk_is_full_and_loses_nothing_flushed() {
    fill(SyncPolicy::Never, false).await;
}

/// Compaction copies the three survivors of a sealed segment into the active one when the
/// disk has room for the small appends that sealed it but not for the copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_that_meets_a_full_disk_loses_no_survivor() {
    let Some(fs) = Tmpfs::mount("1m") else {
        return;
    };
    let dir = wal_dir(&fs);
    let open = || {
        PersistentWal::builder(&dir)
            .segment_bytes(128 << 10)
            // Completions kept for the dedup window go to a file of their own when a segment
            // goes; this test is about the survivors' copy.
            .completion_retention(Duration::ZERO)
            .open()
            .unwrap()
    };
    let wal = open();
    let survivors: Vec<Arc<EMessage>> = (0..3)
        .map(|i| Arc::new(EMessage::standard("t", vec![i as u8; 30 << 10])))
        .collect();
    for m in &survivors {
        wal.append(m).unwrap().wait().await.unwrap();
    }
    let mut n = 0;
    let mut small = || {
        n += 1;
        Arc::new(EMessage::standard("t", vec![7u8; 64]).with_id(format!("small-{n}")))
    };
    // A dozen finished messages in the same segment: three survivors out of fifteen is few
    // enough to compact.
    for _ in 0..12 {
        let m = small();
        wal.append(&m).unwrap().wait().await.unwrap();
        wal.begin(&m.id).unwrap();
        wal.complete(&m.id).unwrap();
    }
    wal.flush().await.unwrap();

    // Fill the disk, then leave 48 KiB: room for the appends that seal the segment (about
    // 35 KiB), not for the 90 KiB copy of the survivors.
    let filler = fs.path().join("filler");
    fill_up(&filler);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len.saturating_sub(48 << 10)).unwrap();
    drop(f);

    let segments = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".wal")
            })
            .count()
    };
    assert_eq!(segments(), 1);
    loop {
        let m = small();
        wal.append(&m).unwrap().wait().await.unwrap();
        if segments() > 1 {
            // Sealed: the compaction runs (and fails) now, so this one stays pending.
            break;
        }
        wal.begin(&m.id).unwrap();
        wal.complete(&m.id).unwrap();
    }
    // The append that sealed the segment was answered before the compaction ran; this flush
    // comes after it. Before the fix it returned Ok, and its own compaction deleted the old
    // segment as empty.
    let err = wal.flush().await.unwrap_err();
    assert_failed_for_space(&CoreError::Wal(err));
    let late = small();
    assert!(matches!(wal.append(&late), Err(WalError::Failed { .. })));
    assert!(wal.stats().failed);

    // Space returns: every survivor is there, and recovery needs no skip_corrupt.
    drop(wal);
    std::fs::remove_file(&filler).unwrap();
    let wal = open();
    let pending: HashSet<String> = pending_ids(&wal).await.into_iter().collect();
    for m in &survivors {
        assert!(pending.contains(&m.id), "survivor {} lost", m.id);
    }
    assert_eq!(wal.recovery_report().records_skipped, 0);
    assert!(wal.recovery_report().set_aside.is_empty());
}

/// What an operator sees over gRPC once the WAL failed: health `NOT_SERVING` (watched, not
/// polled) and the status naming the cause.
async fn failed_over_grpc(bus: &EventBus) {
    use event_base::grpc::client::{connect, ClientOptions};
    use event_base::grpc::{pb, GrpcServer};
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let served = GrpcServer::builder(bus.clone())
        .serve_with_incoming(listener)
        .unwrap();
    let addr = format!("http://{}", served.local_addr());
    let channel = tonic::transport::Endpoint::from_shared(addr.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    let mut watch = health
        .watch(HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    tokio::time::timeout(event_base_test::WAIT, async {
        while let Some(status) = watch.message().await.unwrap() {
            if status.status == ServingStatus::NotServing as i32 {
                return;
            }
        }
        panic!("the health watch ended before NOT_SERVING");
    })
    .await
    .expect("health turns NOT_SERVING once the WAL failed");
    // An open health watch would hold the server's graceful shutdown.
    drop(watch);
    drop(health);

    let mut client = connect(&ClientOptions::new(addr)).await.unwrap();
    let wal = client
        .get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner()
        .wal
        .unwrap();
    assert!(wal.failed, "GetStatus says the WAL failed");
    assert!(
        wal.failure.contains("No space left on device"),
        "{}",
        wal.failure
    );
    served.shutdown().await.unwrap();
}

/// Writes zeros into `path` until the disk refuses more.
fn fill_up(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 16 << 10];
    loop {
        match f.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling the disk: {e}"),
        }
    }
}
