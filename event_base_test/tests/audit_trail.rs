//! Audit: every start and finish of a delivery is recorded, in order; the JSON-lines writer
//! rotates by size and every line parses; `_system.audit` carries the records in batches.

use std::time::Duration;

use event_base::audit::JsonLinesWriter;
use event_base::constant::AUDIT;
use event_base::{Ack, AuditEvent, AuditOutcome, AuditRecord, DeadReason, EMessage};
use event_base_test::{Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_then_dead_message_tells_its_whole_story() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .audit(1000)
        .handler(probe.handler("flaky", "flaky", |_| Ack::NoAck {
            retry_after: Some(Duration::from_millis(5)),
            max_retries: 2,
        }))
        .build()
        .await
        .unwrap();
    let id = bus.send("flaky", b"x".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();

    let story = bus.audit().for_message(&id);
    let steps: Vec<(u32, String)> = story
        .iter()
        .map(|r| {
            let what = match &r.event {
                AuditEvent::Started => "started".to_owned(),
                AuditEvent::Finished {
                    outcome: AuditOutcome::Retried { after, .. },
                    ..
                } => {
                    format!("retried after {}ms", after.as_millis())
                }
                AuditEvent::Finished {
                    outcome: AuditOutcome::Dead { reason },
                    ..
                } => format!("dead: {reason:?}"),
                AuditEvent::Finished {
                    outcome: AuditOutcome::Acked,
                    ..
                } => "acked".to_owned(),
            };
            (r.attempt, what)
        })
        .collect();
    let expected: Vec<(u32, String)> = vec![
        (1, "started".into()),
        (1, "retried after 5ms".into()),
        (2, "started".into()),
        (2, "retried after 5ms".into()),
        (3, "started".into()),
        (3, format!("dead: {:?}", DeadReason::MaxRetriesExceeded)),
    ];
    assert_eq!(steps, expected);
    assert!(story.windows(2).all(|w| w[0].seq < w[1].seq), "in order");
    assert!(story
        .iter()
        .all(|r| &*r.worker == "flaky-0" && &*r.topic == "flaky"));
    let recent = bus.audit().recent(2);
    assert_eq!(recent.len(), 2);
    assert_eq!(recent[1].seq, story.last().unwrap().seq, "newest last");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_lines_writer_rotates_and_keeps_the_newest_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let writer = JsonLinesWriter::open(&path)
        .unwrap()
        .max_bytes(4096)
        .keep(2);
    let probe = Probe::new();
    let bus = event_base::builder()
        .audit(1000)
        .audit_writer(writer)
        .handler(probe.handler("h", "t", |_| Ack::Ack).workers(2))
        .build()
        .await
        .unwrap();
    for _ in 0..100 {
        bus.send("t", b"x".to_vec()).await.unwrap();
    }
    bus.wait_idle(WAIT).await.unwrap();
    bus.audit().flush().await;

    // Oldest first: `.2`, `.1`, then the file being written.
    let rotated = |n: usize| {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        std::path::PathBuf::from(name)
    };
    let files = [rotated(2), rotated(1), path.clone()];
    let mut kept: Vec<AuditRecord> = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        kept.extend(text.lines().map(serde_json_parse));
        assert!(
            std::fs::metadata(f).unwrap().len() < 4096 + 1024,
            "{} did not rotate",
            f.display()
        );
    }
    assert!(!rotated(3).exists(), "only two rotated files are kept");

    // What the files keep is the newest records, contiguous and in the order the bus
    // numbered them: the tail of everything it recorded (its ring holds all 200).
    let mut all = bus.audit().recent(1000);
    all.sort_by_key(|r| r.seq);
    assert_eq!(all.len(), 200, "a start and a finish per message");
    assert!(
        !kept.is_empty() && kept.len() < all.len(),
        "{} of {} records kept: the oldest must have been rotated away",
        kept.len(),
        all.len()
    );
    let seqs = |records: &[AuditRecord]| records.iter().map(|r| r.seq).collect::<Vec<_>>();
    assert_eq!(seqs(&kept), seqs(&all[all.len() - kept.len()..]));
    assert!(kept.iter().all(|r| &*r.topic == "t"));
}

fn serde_json_parse(line: &str) -> AuditRecord {
    EMessage::standard("x", line.as_bytes().to_vec())
        .json_payload()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_records_are_published_in_batches_on_the_system_topic() {
    let probe = Probe::new();
    let watch = Probe::new();
    let bus = event_base::builder()
        .audit(1000)
        .handler(probe.handler("h", "t", |_| Ack::Ack))
        .handler(watch.handler("audit", AUDIT, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    for _ in 0..20 {
        bus.send("t", b"x".to_vec()).await.unwrap();
    }
    bus.wait_idle(WAIT).await.unwrap();
    bus.audit().flush().await;
    bus.wait_idle(WAIT).await.unwrap();
    let published: usize = watch
        .seen()
        .iter()
        .map(|s| {
            EMessage::standard("x", s.payload.clone())
                .json_payload::<Vec<AuditRecord>>()
                .unwrap()
                .len()
        })
        .sum();
    assert_eq!(
        published, 40,
        "a start and a finish per message, none about the audit topic itself"
    );
}

/// Counts records, slowly.
struct SlowCounter(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl event_base::AuditWriter for SlowCounter {
    fn write(&self, records: &[AuditRecord]) -> Result<(), event_base::AuditError> {
        std::thread::sleep(Duration::from_millis(2)); // a slow disk
        self.0
            .fetch_add(records.len(), std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_hands_every_record_to_the_writers_first() {
    let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let probe = Probe::new();
    let bus = event_base::builder()
        .audit_writer(SlowCounter(written.clone()))
        .handler(probe.handler("h", "t", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    for _ in 0..100 {
        bus.send("t", b"x".to_vec()).await.unwrap();
    }
    bus.wait_idle(WAIT).await.unwrap();
    bus.shutdown(event_base::ShutdownStrategy::Force)
        .await
        .unwrap();
    assert_eq!(written.load(std::sync::atomic::Ordering::SeqCst), 200);
}
