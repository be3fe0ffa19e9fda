//! A queue that keeps retries (`EConsumer::keeps_retries`, as Redis does) is handed the
//! delayed retry of a claimed entry that stands for one delivery, with its attempt counted;
//! a retry it cannot take stays in the bus's scheduler, and the retries of broadcast copies
//! and of messages addressed to a worker stay in the process as before. The queue here wraps
//! the flume queue: it asks for acks, and keeps a retry by sending it to the topic again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_base::backend::{Claimed, EConsumer, EProducer, QueueFactory, QueuedRetry, TopicQueue};
use event_base::{
    async_trait, Ack, DeliveryMode, EMessage, EventBus, FlumeQueueFactory, HandlerSpec, MemoryWal,
    MessageTopic, QueueError,
};
use event_base_test::{Probe, WAIT};

/// What the queue of topic `t` was asked to keep: (message id, its `attempts`, the delay).
#[derive(Default)]
struct Kept {
    retries: Mutex<Vec<(String, u32, Duration)>>,
    /// Whether `retry_later` fails instead.
    refuse: AtomicBool,
}

struct KeepingFactory {
    inner: FlumeQueueFactory,
    kept: Arc<Kept>,
}

struct KeepingConsumer {
    inner: Arc<dyn EConsumer>,
    producer: Arc<dyn EProducer>,
    kept: Arc<Kept>,
}

impl QueueFactory for KeepingFactory {
    fn create(&self, topic: &MessageTopic) -> Result<TopicQueue, QueueError> {
        let q = self.inner.create(topic)?;
        if topic.as_str() != "t" {
            return Ok(q);
        }
        Ok(TopicQueue {
            producer: q.producer.clone(),
            consumer: Arc::new(KeepingConsumer {
                inner: q.consumer,
                producer: q.producer,
                kept: self.kept.clone(),
            }),
        })
    }
    fn name(&self) -> &'static str {
        "keeping-flume"
    }
}

#[async_trait]
impl EConsumer for KeepingConsumer {
    async fn claim_batch(&self, max: usize, out: &mut Vec<Claimed>) -> Result<usize, QueueError> {
        self.inner.claim_batch(max, out).await
    }
    fn requires_ack(&self) -> bool {
        true
    }
    async fn ack(&self, _: &[Claimed]) -> Result<(), QueueError> {
        Ok(())
    }
    async fn nack(&self, _: &[Claimed]) -> Result<(), QueueError> {
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
    fn keeps_retries(&self) -> bool {
        true
    }
    async fn retry_later(
        &self,
        _claimed: &Claimed,
        next: &Arc<EMessage>,
        delay: Duration,
    ) -> Result<QueuedRetry, QueueError> {
        if self.kept.refuse.load(Ordering::SeqCst) {
            return Err(QueueError::Backend("refused by the test".into()));
        }
        self.kept
            .retries
            .lock()
            .unwrap()
            .push((next.id.clone(), next.attempts, delay));
        // Kept: back in the topic's queue (due later: the bus holds it until then).
        self.producer.send(next.clone()).await?;
        Ok(QueuedRetry::Kept)
    }
}

const DELAY: Duration = Duration::from_millis(50);

/// Fails each message's first delivery with a retry after [`DELAY`], acks the others.
fn fails_once(probe: &Arc<Probe>) -> HandlerSpec {
    probe.handler("h", "t", |m: &EMessage| {
        if m.attempts <= 1 {
            Ack::NoAck {
                retry_after: Some(DELAY),
                max_retries: 3,
            }
        } else {
            Ack::Ack
        }
    })
}

async fn bus(kept: &Arc<Kept>, handler: HandlerSpec) -> EventBus {
    EventBus::builder()
        .wal(MemoryWal::new())
        .queue(KeepingFactory {
            inner: FlumeQueueFactory::default(),
            kept: kept.clone(),
        })
        .handler(handler)
        .build()
        .await
        .unwrap()
}

fn attempts(probe: &Probe, id: &str) -> Vec<u32> {
    probe
        .seen()
        .iter()
        .filter(|s| s.id == id)
        .map(|s| s.attempts)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_keeps_the_delayed_retry_of_a_standard_message() {
    let kept = Arc::new(Kept::default());
    let probe = Probe::new();
    let bus = bus(&kept, fails_once(&probe)).await;
    let id = bus.send("t", b"x".to_vec()).await.unwrap();
    probe.wait_for(2, WAIT).await;
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(attempts(&probe, &id), vec![1, 2]);
    assert_eq!(
        *kept.retries.lock().unwrap(),
        vec![(id.to_string(), 2, DELAY)],
        "handed over with its attempt counted and its delay"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_the_queue_does_not_take_waits_in_the_process() {
    let kept = Arc::new(Kept::default());
    kept.refuse.store(true, Ordering::SeqCst);
    let probe = Probe::new();
    let bus = bus(&kept, fails_once(&probe)).await;
    let id = bus.send("t", b"x".to_vec()).await.unwrap();
    probe.wait_for(2, WAIT).await;
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(attempts(&probe, &id), vec![1, 2], "retried all the same");
    assert!(kept.retries.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_copies_and_addressed_messages_retry_in_the_process() {
    let kept = Arc::new(Kept::default());
    let probe = Probe::new();
    let bus = bus(&kept, fails_once(&probe).workers(2)).await;
    let b = bus
        .send(
            "t",
            EMessage::new("t", b"b".to_vec(), DeliveryMode::Broadcast, None),
        )
        .await
        .unwrap();
    let w = bus
        .send(
            "t",
            EMessage::standard("t", b"w".to_vec()).with_to_worker("h-1"),
        )
        .await
        .unwrap();
    let r = bus
        .send(
            "t",
            EMessage::new("t", b"r".to_vec(), DeliveryMode::Repeated(2), None),
        )
        .await
        .unwrap();
    // Each of the 2 broadcast copies, the addressed one, each of the 2 repeated runs:
    // failed once, then retried.
    probe.wait_for(10, WAIT).await;
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(attempts(&probe, &b).len(), 4);
    assert_eq!(attempts(&probe, &w), vec![1, 2]);
    assert_eq!(attempts(&probe, &r).len(), 4);
    assert!(
        kept.retries.lock().unwrap().is_empty(),
        "one entry stands for several deliveries, or for one worker: not handed over"
    );
}
