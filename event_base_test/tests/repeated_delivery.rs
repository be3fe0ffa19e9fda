//! `Repeated(n)` is handled exactly n times in total.

use event_base::{Ack, DeliveryMode, EMessage};
use event_base_test::{Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_n_is_handled_n_times_by_any_workers() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("load", "load", |_| Ack::Ack).workers(3))
        .build()
        .await
        .unwrap();
    let seven = bus
        .send(
            "load",
            EMessage::new("load", b"x".to_vec(), DeliveryMode::Repeated(7), None),
        )
        .await
        .unwrap();
    let one = bus
        .send(
            "load",
            EMessage::new("load", b"y".to_vec(), DeliveryMode::Repeated(1), None),
        )
        .await
        .unwrap();
    let zero = bus
        .send(
            "load",
            EMessage::new("load", b"z".to_vec(), DeliveryMode::Repeated(0), None),
        )
        .await
        .unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&seven), 7);
    assert_eq!(probe.count_of(&one), 1);
    assert_eq!(probe.count_of(&zero), 0);
    assert_eq!(bus.wal_stats().live, 0);
}
