//! Standard messages over 4 competing workers are each handled exactly once.

use std::collections::HashMap;

use event_base::{Ack, EMessage};
use event_base_test::{Probe, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_standard_messages_over_4_workers_are_each_handled_once() {
    const N: usize = 10_000;
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("orders", "orders", |_| Ack::Ack).workers(4))
        .build()
        .await
        .unwrap();
    assert_eq!(bus.workers("orders").len(), 4);

    let mut sent = Vec::with_capacity(N);
    for i in 0..N {
        let id = bus
            .send(
                "orders",
                EMessage::standard("orders", (i as u32).to_le_bytes().to_vec()),
            )
            .await
            .unwrap();
        sent.push(id);
    }
    bus.wait_idle(WAIT).await.unwrap();

    let mut counts: HashMap<_, usize> = HashMap::new();
    for s in probe.seen() {
        *counts.entry(s.id).or_default() += 1;
    }
    assert_eq!(
        probe.count(),
        N,
        "every message handled exactly once in total"
    );
    for id in &sent {
        assert_eq!(
            counts.get(id.as_str()),
            Some(&1),
            "message {id} handled once"
        );
    }
    let m = bus.metrics().topic("orders").unwrap();
    assert_eq!((m.sent, m.handled, m.acked), (N as u64, N as u64, N as u64));
    assert_eq!(bus.wal_stats().live, 0, "completed records are dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kanal_queue_delivers_the_same_way() {
    const N: usize = 2_000;
    let probe = Probe::new();
    let bus = event_base::EventBus::builder()
        .wal(event_base::MemoryWal::new())
        .queue(event_base::MpmcQueueFactory::bounded(16))
        .handler(probe.handler("orders", "orders", |_| Ack::Ack).workers(4))
        .build()
        .await
        .unwrap();
    let mut sent = Vec::with_capacity(N);
    for _ in 0..N {
        sent.push(bus.send("orders", b"k".to_vec()).await.unwrap());
    }
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count(), N);
    for id in sent {
        assert_eq!(probe.count_of(&id), 1);
    }
}
