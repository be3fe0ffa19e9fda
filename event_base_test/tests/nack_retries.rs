//! `NoAck` redelivers up to `1 + max_retries` times, respects `retry_after`, then
//! dead-letters with `MaxRetriesExceeded`.

use std::time::{Duration, Instant};

use event_base::{Ack, DeadReason};
use event_base_test::{Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_with_max_retries_3_is_handled_4_times_then_dead() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(
            probe
                .handler("flaky", "flaky", |_| Ack::NoAck {
                    retry_after: Some(Duration::from_millis(30)),
                    max_retries: 3,
                })
                .workers(2),
        )
        .build()
        .await
        .unwrap();
    let started = Instant::now();
    let id = bus.send("flaky", b"x".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();

    let seen = probe.seen();
    assert_eq!(seen.len(), 4, "1 delivery + 3 retries");
    assert_eq!(
        seen.iter().map(|s| s.attempts).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert!(
        started.elapsed() >= Duration::from_millis(90),
        "three retry_after waits of 30 ms"
    );

    let dead = bus.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.id, id);
    assert_eq!(dead[0].reason, DeadReason::MaxRetriesExceeded);
    assert_eq!(dead[0].attempts, 4);
    let m = bus.metrics().topic("flaky").unwrap();
    assert_eq!((m.handled, m.retried, m.dead, m.acked), (4, 3, 1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_retries_setting_is_the_default_for_nack() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("flaky", "flaky", |_| Ack::retry()).retries(1))
        .build()
        .await
        .unwrap();
    bus.send("flaky", b"x".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count(), 2);
    assert_eq!(
        bus.dead_letters().await.unwrap()[0].reason,
        DeadReason::MaxRetriesExceeded
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_succeeds_on_retry_is_not_a_dead_letter() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("flaky", "flaky", |m| {
            if m.attempts < 3 {
                Ack::retry()
            } else {
                Ack::Ack
            }
        }))
        .build()
        .await
        .unwrap();
    bus.send("flaky", b"x".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count(), 3);
    assert!(bus.dead_letters().await.unwrap().is_empty());
    assert_eq!(bus.wal_stats().live, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_backoff_spaces_out_nacks_without_retry_after() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(
            probe
                .handler("flaky", "flaky", |_| Ack::retry())
                .retries(2)
                .backoff(event_base::Backoff::fixed(Duration::from_millis(80)).jitter(0.25)),
        )
        .build()
        .await
        .unwrap();
    let started = Instant::now();
    bus.send("flaky", b"x".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count(), 3);
    // Two waits of 60..=80 ms each.
    assert!(
        started.elapsed() >= Duration::from_millis(120),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_literal_no_ack_means_its_own_limit_not_the_handlers() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(
            probe
                .handler("flaky", "flaky", |_| Ack::NoAck {
                    retry_after: None,
                    max_retries: 5,
                })
                .retries(1),
        )
        .build()
        .await
        .unwrap();
    bus.send("flaky", b"x".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count(), 6, "1 delivery + the 5 retries it asked for");
    assert_eq!(
        bus.dead_letters().await.unwrap()[0].reason,
        DeadReason::MaxRetriesExceeded
    );
}
