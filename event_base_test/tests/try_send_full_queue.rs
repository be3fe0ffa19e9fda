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
