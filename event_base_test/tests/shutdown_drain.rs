//! `Drain`: sends are refused from the start, everything queued and due is finished, and a
//! message due later stays in the WAL without holding the shutdown up.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use event_base::{CoreError, EMessage, ShutdownStrategy};
use event_base_test::shutdown_scenario::{Scenario, Storage};
use event_base_test::WAIT;
use tokio::sync::Notify;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_finishes_the_backlog_but_not_the_future() {
    drain_finishes_the_backlog_but_not_the_future_on(Storage::Memory).await;
}

/// The same over files: the next system opens the WAL directory again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_finishes_the_backlog_but_not_the_future_over_files() {
    drain_finishes_the_backlog_but_not_the_future_on(Storage::Files).await;
}

async fn drain_finishes_the_backlog_but_not_the_future_on(storage: Storage) {
    let s = Scenario::start_on(storage, 2, 30).await;
    let later = s
        .bus
        .send(
            "jobs",
            EMessage::standard("jobs", b"later".to_vec()).with_delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    s.gate.open();
    let report = s
        .bus
        .shutdown(ShutdownStrategy::Drain {
            timeout: Duration::from_secs(30),
        })
        .await
        .unwrap();
    assert!(
        report.elapsed < Duration::from_secs(10),
        "did not wait for the delayed message"
    );
    assert_eq!(s.probe.finished().len(), 30);
    assert_eq!(report.left_for_replay, 1);
    let wal_live: Vec<_> = event_base::backend::Wal::pending(&*s.wal).await.unwrap();
    assert_eq!(wal_live.len(), 1);
    assert_eq!(wal_live[0].message.id, later);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_send_during_drain_is_either_handled_or_refused() {
    /// Sends accepted before the shutdown begins.
    const K: usize = 40;
    /// Sends each sender makes after its first refusal (all must be refused too).
    const AFTER: usize = 5;
    // The workers stay held until the shutdown has begun: what was accepted before it is a
    // backlog the drain must work through.
    let s = Scenario::start(2, 4).await;
    let accepted_so_far = Arc::new(AtomicUsize::new(0));
    let enough = Arc::new(Notify::new());
    // Set just before the shutdown is called: a send that returned before it was accepted
    // before the shutdown began.
    let shutting_down = Arc::new(AtomicBool::new(false));
    let mut senders = Vec::new();
    for t in 0..4u8 {
        let bus = s.bus.clone();
        let accepted_so_far = accepted_so_far.clone();
        let enough = enough.clone();
        let shutting_down = shutting_down.clone();
        // Each sender sends until it has been refused, then a few more times: both
        // branches run whatever the timing.
        senders.push(tokio::spawn(async move {
            let (mut before, mut during) = (Vec::new(), Vec::new());
            let mut refused = 0;
            let mut i = 0u32;
            while refused <= AFTER {
                let msg = EMessage::standard("jobs", vec![t, (i % 251) as u8]);
                i += 1;
                match bus.send("jobs", msg).await {
                    Ok(id) => {
                        assert_eq!(refused, 0, "a send accepted after one was refused");
                        if shutting_down.load(Ordering::SeqCst) {
                            during.push(id.to_string());
                        } else {
                            before.push(id.to_string());
                        }
                        if accepted_so_far.fetch_add(1, Ordering::SeqCst) + 1 == K {
                            enough.notify_one();
                        }
                    }
                    Err(CoreError::SystemShutdown) => refused += 1,
                    Err(e) => panic!("unexpected {e:?}"),
                }
                tokio::task::yield_now().await;
            }
            (before, during, refused, i as usize)
        }));
    }
    tokio::time::timeout(WAIT, enough.notified())
        .await
        .expect("the senders got K sends accepted");
    shutting_down.store(true, Ordering::SeqCst);
    // `join!` polls the shutdown first: sends are refused before the gate opens.
    let (report, ()) = tokio::join!(
        s.bus.shutdown(ShutdownStrategy::Drain {
            timeout: Duration::from_secs(30),
        }),
        async { s.gate.open() }
    );
    let report = report.unwrap();
    let (mut before, mut during) = (HashSet::new(), HashSet::new());
    let mut refused = 0;
    let mut attempts = 0;
    for t in senders {
        let (b, d, r, n) = t.await.unwrap();
        before.extend(b);
        during.extend(d);
        refused += r;
        attempts += n;
    }
    assert!(
        before.len() >= K,
        "{} accepted before the shutdown",
        before.len()
    );
    assert_eq!(refused, 4 * (AFTER + 1), "every sender was refused");
    assert_eq!(before.len() + during.len() + refused, attempts);

    // The backlog accepted before the shutdown began, and the messages in hand, were all
    // handled by the drain.
    let handled: HashSet<String> = s.probe.finished().into_iter().collect();
    let missing: Vec<&String> = before
        .iter()
        .chain(&s.sent)
        .filter(|id| !handled.contains(*id))
        .collect();
    assert!(
        missing.is_empty(),
        "{} accepted before the shutdown were not handled, among them {:?}",
        missing.len(),
        &missing[..missing.len().min(3)]
    );
    // Nothing refused was handled.
    let accepted: HashSet<&String> = before.iter().chain(&during).chain(&s.sent).collect();
    let strangers: Vec<&String> = handled.iter().filter(|id| !accepted.contains(id)).collect();
    assert!(
        strangers.is_empty(),
        "handled but never accepted: {strangers:?}"
    );
    // A send that raced with the start of the shutdown and was accepted is handled by the
    // drain too: a send counts as in flight before it checks that the bus accepts, so the
    // drain cannot miss it. Nothing accepted is left in the WAL, and the report says so.
    let handled_during: Vec<&String> = during.iter().filter(|id| !handled.contains(*id)).collect();
    assert!(
        handled_during.is_empty(),
        "accepted while the shutdown began, not handled by the drain: {handled_during:?}"
    );
    let left: Vec<String> = event_base::backend::Wal::pending(&*s.wal)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.message.id.clone())
        .collect();
    assert!(left.is_empty(), "left in the WAL after a drain: {left:?}");
    assert!(report.drained, "{report:?}");
    let replayed = s.restart_and_check().await;
    assert!(replayed.is_empty(), "replayed after a drain: {replayed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_waits_for_a_retry_whose_backoff_ends_before_the_deadline() {
    use event_base::Ack;
    use event_base_test::Probe;
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("flaky", "flaky", |m| {
            if m.attempts < 2 {
                Ack::retry_after(Duration::from_millis(200))
            } else {
                Ack::Ack
            }
        }))
        .build()
        .await
        .unwrap();
    bus.send("flaky", b"x".to_vec()).await.unwrap();
    probe.wait_for(1, event_base_test::WAIT).await;
    let report = bus
        .shutdown(ShutdownStrategy::Drain {
            timeout: Duration::from_secs(5),
        })
        .await
        .unwrap();
    assert!(report.drained, "{report:?}");
    assert_eq!(
        probe.finished().len(),
        2,
        "the retry was handled before stopping"
    );
}
