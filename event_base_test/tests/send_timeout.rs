//! A send that cannot get into a full queue within its timeout fails with `Timeout` and the
//! message is never delivered later.

use event_base::{Ack, CoreError, EMessage, FlumeQueueFactory, MemoryWal};
use event_base_test::{Gate, Probe, WAIT};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_send_is_withdrawn() {
    let probe = Probe::new();
    let gate = Gate::new();
    let bus = event_base::EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::bounded(1))
        .batch_size(1)
        .handler(probe.gated_handler("slow", "slow", &gate, |_| Ack::Ack))
        .build()
        .await
        .unwrap();

    // Fill the pipeline until a send times out.
    let mut accepted = Vec::new();
    let timed_out = loop {
        let msg = EMessage::standard("slow", b"x".to_vec());
        let id = msg.id.clone();
        match bus
            .send_with(
                "slow",
                msg,
                event_base::SendOptions::new().timeout(Duration::from_millis(50)),
            )
            .await
        {
            Ok(_) => accepted.push(id),
            Err(CoreError::Timeout { operation, after }) => {
                assert!(operation.contains("slow"));
                assert_eq!(after, Duration::from_millis(50));
                break id;
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
        assert!(accepted.len() < 100, "the bounded queue never pushed back");
    };
    gate.open();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count(), accepted.len());
    assert_eq!(
        probe.count_of(&timed_out),
        0,
        "a timed-out send must not be delivered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_dropped_while_waiting_for_room_is_withdrawn() {
    let probe = Probe::new();
    let gate = Gate::new();
    let bus = event_base::EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::bounded(1))
        .batch_size(1)
        .handler(probe.gated_handler("slow", "slow", &gate, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    // Send until one send has to wait, then drop it from outside (an external timeout).
    let mut accepted = 0;
    let dropped = loop {
        let msg = EMessage::standard("slow", b"x".to_vec());
        let id = msg.id.clone();
        match tokio::time::timeout(Duration::from_millis(50), bus.send("slow", msg)).await {
            Ok(r) => {
                r.unwrap();
                accepted += 1;
            }
            Err(_) => break id,
        }
        assert!(accepted < 100, "the bounded queue never pushed back");
    };
    assert_eq!(
        bus.wal_stats().live,
        accepted as u64,
        "the dropped send left no record"
    );
    gate.open();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count(), accepted);
    assert_eq!(probe.count_of(&dropped), 0);
}
