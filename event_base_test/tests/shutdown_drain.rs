//! `Drain`: sends are refused from the start, everything queued and due is finished, and a
//! message due later stays in the WAL without holding the shutdown up.

use std::collections::HashSet;
use std::time::Duration;

use event_base::{CoreError, EMessage, ShutdownStrategy};
use event_base_test::shutdown_scenario::Scenario;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_finishes_the_backlog_but_not_the_future() {
    let s = Scenario::start(2, 30).await;
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
    let s = Scenario::start(2, 4).await;
    s.gate.open();
    let mut senders = Vec::new();
    for t in 0..4u8 {
        let bus = s.bus.clone();
        senders.push(tokio::spawn(async move {
            let mut ok = Vec::new();
            let mut refused = 0;
            for i in 0..500u32 {
                let msg = EMessage::standard("jobs", vec![t, (i % 251) as u8]);
                match bus.send("jobs", msg).await {
                    Ok(id) => ok.push(id),
                    Err(CoreError::SystemShutdown) => refused += 1,
                    Err(e) => panic!("unexpected {e:?}"),
                }
                tokio::task::yield_now().await;
            }
            (ok, refused)
        }));
    }
    tokio::task::yield_now().await;
    let report = s
        .bus
        .shutdown(ShutdownStrategy::Drain {
            timeout: Duration::from_secs(30),
        })
        .await
        .unwrap();
    let mut accepted = HashSet::new();
    let mut refused = 0;
    for t in senders {
        let (ok, r) = t.await.unwrap();
        accepted.extend(ok);
        refused += r;
    }
    assert!(report.drained, "{report:?}");
    let handled: HashSet<_> = s.probe.finished().into_iter().collect();
    let expected: HashSet<String> = accepted
        .iter()
        .map(|id| id.to_string())
        .chain(s.sent.iter().cloned())
        .collect();
    assert_eq!(
        handled, expected,
        "every accepted send was handled, no refused one was"
    );
    assert_eq!(accepted.len() + refused, 2000);
    assert!(s.restart_and_check().await.is_empty());
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
