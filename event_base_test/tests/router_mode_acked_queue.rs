//! Queues that need acknowledgement (like a Redis Streams consumer group) are served by a
//! router task that claims in batches; each claimed entry is acked once its handler's copy
//! has ended, never before. This test wraps the flume queue so it asks for acks, and checks
//! that every message is delivered once in every mode, that nothing is acked while the
//! handlers still hold it, and that every entry is acked exactly once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_base::backend::{Claimed, EConsumer, QueueFactory, TopicQueue};
use event_base::{
    async_trait, Ack, DeliveryMode, EMessage, FlumeQueueFactory, MemoryWal, MessageTopic,
    QueueError,
};
use event_base_test::{Gate, Probe, WAIT};
use tokio::sync::watch;

/// What the router did with the queue of topic `t`.
#[derive(Default)]
struct Calls {
    /// Entries acked, over all `ack` calls.
    acked: watch::Sender<usize>,
    /// `ack` calls.
    acks: AtomicUsize,
    /// The size of every batch claimed, in order.
    batches: Mutex<Vec<usize>>,
    /// Entries claimed, over all batches.
    claimed: watch::Sender<usize>,
}

struct AckingFactory {
    inner: FlumeQueueFactory,
    calls: Arc<Calls>,
}

struct AckingConsumer {
    inner: Arc<dyn EConsumer>,
    /// Only topic `t` is counted (the bus has system topics of its own).
    calls: Option<Arc<Calls>>,
}

impl QueueFactory for AckingFactory {
    fn create(&self, topic: &MessageTopic) -> Result<TopicQueue, QueueError> {
        let q = self.inner.create(topic)?;
        Ok(TopicQueue {
            producer: q.producer,
            consumer: Arc::new(AckingConsumer {
                inner: q.consumer,
                calls: (topic.as_str() == "t").then(|| self.calls.clone()),
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
        if let Some(calls) = &self.calls {
            calls.batches.lock().unwrap().push(n);
            calls.claimed.send_modify(|c| *c += n);
        }
        Ok(n)
    }
    fn requires_ack(&self) -> bool {
        true
    }
    async fn ack(&self, claimed: &[Claimed]) -> Result<(), QueueError> {
        if let Some(calls) = &self.calls {
            calls.acked.send_modify(|n| *n += claimed.len());
            calls.acks.fetch_add(1, Ordering::SeqCst);
        }
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
    const BATCH: usize = 16;
    let calls = Arc::new(Calls::default());
    let probe = Probe::new();
    // The handlers are held while everything is sent, so a backlog builds up in the queue
    // and the router has full batches to claim once they go on.
    let gate = Gate::new();
    let bus = event_base::EventBus::builder()
        .wal(MemoryWal::new())
        .queue(AckingFactory {
            inner: FlumeQueueFactory::default(),
            calls: calls.clone(),
        })
        .batch_size(BATCH)
        .handler(
            probe
                .gated_handler("a", "t", &gate, |_| Ack::Ack)
                .workers(2),
        )
        .handler(probe.gated_handler("b", "t", &gate, |_| Ack::Ack))
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
    // Claimed, but held by the handlers: nothing may be acked yet.
    let mut claimed = calls.claimed.subscribe();
    tokio::time::timeout(WAIT, claimed.wait_for(|&n| n >= BATCH))
        .await
        .expect("the router claims while the handlers are held")
        .unwrap();
    assert_eq!(
        *calls.acked.borrow(),
        0,
        "an entry was acked before its handler finished"
    );
    gate.open();
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
    // Each handler's queue has its own copy of every message but the one addressed to b-0.
    const ENTRIES: usize = 2 * 1002 + 1;
    let batches = calls.batches.lock().unwrap().clone();
    let claimed: usize = batches.iter().sum();
    assert_eq!(claimed, ENTRIES, "every copy claimed once");
    // An entry is acked once its handler's copy ended (the broadcast's and the repeated
    // one's after their last delivery), by a task of its own: shortly after `wait_idle`.
    let mut acked = calls.acked.subscribe();
    tokio::time::timeout(WAIT, acked.wait_for(|&n| n >= ENTRIES))
        .await
        .expect("every claimed entry acked")
        .unwrap();
    assert_eq!(
        *calls.acked.borrow(),
        ENTRIES,
        "every claimed entry acked once"
    );
    // Claimed in batches of up to `batch_size`. Only while the workers take the first
    // messages can a claim find fewer waiting than a batch: after that the backlog fills
    // every claim but the last.
    assert!(
        batches.iter().all(|&n| (1..=BATCH).contains(&n)),
        "{batches:?}"
    );
    let full = batches.iter().filter(|&&n| n == BATCH).count();
    assert!(full * BATCH * 10 >= ENTRIES * 9, "{batches:?}");
    assert!(
        calls.acks.load(Ordering::SeqCst) <= ENTRIES,
        "every ack call acks at least one entry"
    );
}
