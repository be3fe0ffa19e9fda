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
        let id = msg.id;
        match bus
            .send_with("slow", msg, None, Some(Duration::from_millis(50)))
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
        probe.count_of(timed_out),
        0,
        "a timed-out send must not be delivered"
    );
}
