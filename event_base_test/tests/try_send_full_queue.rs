//! `try_send` on a full bounded queue fails at once with `QueueFull`, and a refused message is
//! never delivered; every accepted one is.

use std::collections::HashSet;

use event_base::{Ack, CoreError, EMessage, FlumeQueueFactory, MemoryWal};
use event_base_test::{Gate, Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_and_delivered_sets_are_equal_and_refused_never_arrive() {
    const N: usize = 10_000;
    let probe = Probe::new();
    let gate = Gate::new();
    let bus = event_base::EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::bounded(8))
        .batch_size(1)
        .handler(probe.gated_handler("slow", "slow", &gate, |_| Ack::Ack))
        .build()
        .await
        .unwrap();

    let mut accepted = HashSet::new();
    let mut refused = HashSet::new();
    for i in 0..N {
        let msg = EMessage::standard("slow", (i as u32).to_le_bytes().to_vec());
        let id = msg.id.clone();
        match bus
            .send_with("slow", msg, event_base::SendOptions::new().try_send())
            .await
        {
            Ok(got) => {
                assert_eq!(got, id);
                accepted.insert(id);
            }
            Err(CoreError::QueueFull { topic }) => {
                assert_eq!(topic, "slow");
                refused.insert(id);
            }
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }
    // Queue (8) + the shared work channel (1) + the router's hand (1) + the worker's (1).
    assert!(
        accepted.len() <= 11,
        "a stalled bounded bus accepted {} messages",
        accepted.len()
    );
    assert!(!refused.is_empty());
    assert_eq!(
        bus.wal_stats().live as usize,
        accepted.len(),
        "refused sends leave no WAL record"
    );

    gate.open();
    bus.wait_idle(WAIT).await.unwrap();
    let delivered: HashSet<_> = probe.seen().into_iter().map(|s| s.id).collect();
    assert_eq!(delivered, accepted);
    assert!(delivered.is_disjoint(&refused));
    assert_eq!(probe.count(), accepted.len(), "no duplicates");
}

/// Over files, a refused send stays refused across a restart: its withdrawal is as durable
/// as its append, so the next system, opening the directory again, delivers exactly the
/// accepted messages the first one did not finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_sends_do_not_come_back_after_a_restart_over_files() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Probe::new();
    let gate = Gate::new();
    let (accepted, refused) = {
        let bus = event_base::EventBus::builder()
            .wal(event_base::PersistentWal::open(dir.path()).unwrap())
            .queue(FlumeQueueFactory::bounded(4))
            .handler(probe.gated_handler("slow", "slow", &gate, |_| Ack::Ack))
            .build()
            .await
            .unwrap();
        let (mut accepted, mut refused) = (HashSet::new(), HashSet::new());
        for i in 0..200u32 {
            let msg = EMessage::standard("slow", i.to_le_bytes().to_vec());
            let id = msg.id.clone();
            match bus
                .send_with("slow", msg, event_base::SendOptions::new().try_send())
                .await
            {
                Ok(_) => accepted.insert(id),
                Err(CoreError::QueueFull { .. }) => refused.insert(id),
                Err(other) => panic!("unexpected error {other:?}"),
            };
        }
        assert!(!refused.is_empty() && !accepted.is_empty());
        bus.shutdown(event_base::ShutdownStrategy::Force)
            .await
            .unwrap();
        (accepted, refused)
    }; // the first system and its WAL are gone
    let again = Probe::new();
    let bus = event_base::EventBus::builder()
        .wal(event_base::PersistentWal::open(dir.path()).unwrap())
        .queue(FlumeQueueFactory::default())
        .handler(again.handler("slow", "slow", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let replayed: HashSet<String> = again.seen().into_iter().map(|s| s.id).collect();
    assert_eq!(replayed, accepted, "every accepted message, nothing else");
    assert!(replayed.is_disjoint(&refused));
}
