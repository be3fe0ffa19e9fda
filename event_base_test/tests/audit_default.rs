//! Audit is on by default and sees every delivery: a read after `wait_idle` holds a start and
//! a finish for every message, whichever of many busy workers handled it (they stage their
//! records and hand them over in batches), in time order per message; the ring keeps the
//! newest `capacity`; `audit(0)` and `start_system!(audit: 0)` turn it off.

use std::collections::HashMap;

use event_base::prelude::*;
use event_base::{AuditEvent, AuditOutcome};
use event_base_test::{Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_delivery_of_many_workers_is_seen_after_wait_idle() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(
            probe
                .handler("orders", "orders", |m| {
                    if m.attempts == 1 && m.payload.0[0] % 10 == 0 {
                        Ack::retry()
                    } else {
                        Ack::Ack
                    }
                })
                .workers(4),
        )
        .build()
        .await
        .unwrap();
    assert!(bus.audit().is_enabled(), "on with no configuration");
    let mut ids = Vec::new();
    for i in 0..1000u32 {
        ids.push(bus.send("orders", vec![(i % 256) as u8]).await.unwrap());
    }
    bus.wait_idle(WAIT).await.unwrap();

    let mut retried = 0;
    for id in &ids {
        let story = bus.audit().for_message(id);
        let first_try_fails = story.iter().any(|r| {
            matches!(
                &r.event,
                AuditEvent::Finished {
                    outcome: AuditOutcome::Retried { .. },
                    ..
                }
            )
        });
        let expected = if first_try_fails { 4 } else { 2 };
        assert_eq!(story.len(), expected, "{id}: {story:#?}");
        // Start, finish (, start, finish), in time order, attempts in order.
        for (i, r) in story.iter().enumerate() {
            let started = matches!(r.event, AuditEvent::Started);
            assert_eq!(started, i % 2 == 0, "{id}: {story:#?}");
            assert_eq!(r.attempt, 1 + i as u32 / 2);
            assert!(r.message_id == **id);
            assert_eq!(&*r.topic, "orders");
        }
        assert!(story.windows(2).all(|w| w[0].at <= w[1].at));
        retried += usize::from(first_try_fails);
    }
    // Payload bytes 0, 10, .., 250 (26 of every 256) fail once.
    let expected_retries = (0..1000u32).filter(|i| (i % 256) % 10 == 0).count();
    assert_eq!(retried, expected_retries);

    // The whole stream: every seq once.
    let all = bus.audit().recent(usize::MAX);
    assert_eq!(all.len(), 2000 + 2 * expected_retries);
    let mut seqs: Vec<u64> = all.iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), all.len());
    assert!(
        all.windows(2).all(|w| w[0].at <= w[1].at),
        "recent is in time order"
    );
    let per_worker: HashMap<&str, usize> = all.iter().fold(HashMap::new(), |mut m, r| {
        *m.entry(&*r.worker).or_default() += 1;
        m
    });
    assert!(per_worker.values().sum::<usize>() == all.len());
}

#[tokio::test]
async fn the_ring_keeps_the_newest_records_only() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .audit(100)
        .handler(probe.handler("orders", "orders", |_| Ack::Ack).workers(2))
        .build()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..500u32 {
        ids.push(bus.send("orders", i.to_le_bytes().to_vec()).await.unwrap());
    }
    bus.wait_idle(WAIT).await.unwrap();
    let kept = bus.audit().recent(usize::MAX);
    assert_eq!(kept.len(), 100);
    assert!(
        bus.audit().for_message(&ids[0]).is_empty(),
        "the oldest are gone"
    );
    assert_eq!(bus.audit().recent(10).len(), 10);
}

#[tokio::test]
async fn audit_zero_turns_it_off() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .audit(0)
        .handler(probe.handler("orders", "orders", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    assert!(!bus.audit().is_enabled());
    let id = bus.send("orders", "x").await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert!(bus.audit().for_message(&id).is_empty());
    assert!(bus.audit().recent(10).is_empty());
    assert_eq!(probe.count(), 1);
}

#[handler(topic = "audited.orders")]
async fn audited(_msg: &EMessage) -> Ack {
    Ack::Ack
}

#[tokio::test]
async fn start_system_audits_by_default_and_audit_zero_is_the_switch() {
    let bus = start_system!().await.unwrap();
    assert!(bus.audit().is_enabled());
    let id = send_msg!("audited.orders", "x").await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(bus.audit().for_message(&id).len(), 2);
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();

    let bus = start_system!(audit: 0).await.unwrap();
    assert!(!bus.audit().is_enabled());
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}
