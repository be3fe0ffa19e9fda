//! Queues that need acknowledgement (like a Redis Streams consumer group) are served by a
//! router task that claims in batches and acks each batch after routing it. This test wraps
//! the flume queue so it asks for acks, and checks that every message is delivered once in
//! every mode and acked exactly once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use event_base::backend::{Claimed, EConsumer, QueueFactory, TopicQueue};
use event_base::{
    async_trait, Ack, DeliveryMode, EMessage, FlumeQueueFactory, MemoryWal, MessageTopic,
    QueueError,
};
use event_base_test::{Probe, WAIT};

struct AckingFactory {
    inner: FlumeQueueFactory,
    acked: Arc<AtomicUsize>,
    batches: Arc<AtomicUsize>,
}

struct AckingConsumer {
    inner: Arc<dyn EConsumer>,
    acked: Arc<AtomicUsize>,
    batches: Arc<AtomicUsize>,
}

impl QueueFactory for AckingFactory {
    fn create(&self, topic: &MessageTopic) -> Result<TopicQueue, QueueError> {
        let q = self.inner.create(topic)?;
        Ok(TopicQueue {
            producer: q.producer,
            consumer: Arc::new(AckingConsumer {
                inner: q.consumer,
                acked: self.acked.clone(),
                batches: self.batches.clone(),
            }),
        })
    }
    fn name(&self) -> &'static str {
        "acking-flume"
    }
}

#[async_trait]
impl EConsumer for AckingConsumer {
    async fn claim_batch(&self, max: usize, out: &mut Vec<Claimed>) -> Result<usize, QueueError> {
        let n = self.inner.claim_batch(max, out).await?;
        assert!(n <= max);
        self.batches.fetch_add(1, Ordering::SeqCst);
        Ok(n)
    }
    fn requires_ack(&self) -> bool {
        true
    }
    async fn ack(&self, claimed: &[Claimed]) -> Result<(), QueueError> {
        self.acked.fetch_add(claimed.len(), Ordering::SeqCst);
        Ok(())
    }
    async fn nack(&self, _claimed: &[Claimed]) -> Result<(), QueueError> {
        Ok(())
    }
    async fn claim_stale(
        &self,
        _: Duration,
        _: usize,
        _: &mut Vec<Claimed>,
    ) -> Result<usize, QueueError> {
        Ok(0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_task_claims_routes_and_acks_every_message() {
    let acked = Arc::new(AtomicUsize::new(0));
    let batches = Arc::new(AtomicUsize::new(0));
    let probe = Probe::new();
    let bus = event_base::EventBus::builder()
        .wal(MemoryWal::new())
        .queue(AckingFactory {
            inner: FlumeQueueFactory::default(),
            acked: acked.clone(),
            batches: batches.clone(),
        })
        .batch_size(16)
        .handler(probe.handler("a", "t", |_| Ack::Ack).workers(2))
        .handler(probe.handler("b", "t", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    for _ in 0..1000 {
        bus.send("t", b"s".to_vec()).await.unwrap();
    }
    let b = bus
        .send(
            "t",
            EMessage::new("t", b"b".to_vec(), DeliveryMode::Broadcast, None),
        )
        .await
        .unwrap();
    let r = bus
        .send(
            "t",
            EMessage::new("t", b"r".to_vec(), DeliveryMode::Repeated(5), None),
        )
        .await
        .unwrap();
    let w = bus
        .send(
            "t",
            EMessage::standard("t", b"w".to_vec()).with_to_worker("b-0"),
        )
        .await
        .unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    // Handlers `a` and `b` each receive every message: standard ones once per handler, the
    // broadcast once per worker (2 + 1), Repeated(5) five times per handler, and the one
    // addressed to `b-0` once.
    assert_eq!(probe.count(), 2 * 1000 + 3 + 2 * 5 + 1);
    assert_eq!(probe.count_of(&b), 3);
    assert_eq!(probe.count_of(&r), 10);
    assert_eq!(
        probe
            .seen()
            .iter()
            .filter(|s| s.id == w)
            .map(|s| s.label.clone())
            .collect::<Vec<_>>(),
        vec!["b"]
    );
    assert_eq!(
        acked.load(Ordering::SeqCst),
        2 * 1002 + 1,
        "every claimed entry acked once (each handler's queue has its own copy)"
    );
    assert!(batches.load(Ordering::SeqCst) <= 2 * 1002 + 1);
}
