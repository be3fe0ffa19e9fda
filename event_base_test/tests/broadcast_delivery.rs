//! A broadcast reaches every worker of its topic exactly once.

use event_base::{Ack, DeliveryMode, EMessage};
use event_base_test::{Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_is_handled_once_by_every_worker() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("a", "cache", |_| Ack::Ack))
        .handler(probe.handler("b", "cache", |_| Ack::Ack))
        .handler(probe.handler("c", "cache", |_| Ack::Ack).workers(3))
        .build()
        .await
        .unwrap();
    let workers = bus.workers("cache");
    assert_eq!(workers.len(), 5);

    let mut ids = Vec::new();
    for _ in 0..20 {
        let msg = EMessage::new("cache", b"k".to_vec(), DeliveryMode::Broadcast, None);
        ids.push(bus.send("cache", msg).await.unwrap());
    }
    bus.wait_idle(WAIT).await.unwrap();

    for id in ids {
        assert_eq!(probe.count_of(&id), 5, "one delivery per worker");
        let labels: Vec<String> = probe
            .seen()
            .into_iter()
            .filter(|s| s.id == id)
            .map(|s| s.label)
            .collect();
        assert_eq!(labels.iter().filter(|l| *l == "a").count(), 1);
        assert_eq!(labels.iter().filter(|l| *l == "b").count(), 1);
        assert_eq!(labels.iter().filter(|l| *l == "c").count(), 3);
    }
    assert_eq!(
        bus.wal_stats().live,
        0,
        "the record completes when every copy is done"
    );
    assert_eq!(bus.metrics().topic("cache").unwrap().acked, 100);
}
