//! [`FlumeQueueFactory`]: per-topic `flume` channels.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use event_base_core::backend::{
    Claimed, EConsumer, EProducer, QueueFactory, Receipt, TopicLogSpec, TopicQueue, TrySendError,
};
use event_base_core::{EMessage, MessageTopic, QueueError};
use tokio::sync::Notify;

use crate::bell::Bell;

use crate::DEFAULT_QUEUE_BOUND;

/// Makes one bounded `flume` channel per topic.
///
/// ```
/// use event_base_queue::FlumeQueueFactory;
/// let small = FlumeQueueFactory::bounded(100);
/// assert_eq!(small.bound(), Some(100));
/// assert_eq!(FlumeQueueFactory::default().bound(), Some(event_base_queue::DEFAULT_QUEUE_BOUND));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct FlumeQueueFactory {
    bound: Option<usize>,
}

impl Default for FlumeQueueFactory {
    fn default() -> Self {
        Self::bounded(DEFAULT_QUEUE_BOUND)
    }
}

impl FlumeQueueFactory {
    /// Queues that hold at most `n` messages (at least 1).
    pub fn bounded(n: usize) -> Self {
        FlumeQueueFactory {
            bound: Some(n.max(1)),
        }
    }

    /// Queues without a bound: senders never wait, memory grows with the backlog.
    pub fn unbounded() -> Self {
        FlumeQueueFactory { bound: None }
    }

    /// The bound, if any.
    pub fn bound(&self) -> Option<usize> {
        self.bound
    }
}

impl QueueFactory for FlumeQueueFactory {
    fn create(&self, topic: &MessageTopic) -> Result<TopicQueue, QueueError> {
        let (tx, rx) = match self.bound {
            Some(n) => flume::bounded(n),
            None => flume::unbounded(),
        };
        let (ring, bell) = Bell::new();
        Ok(TopicQueue {
            producer: Arc::new(FlumeProducer {
                tx,
                topic: topic.clone(),
                bell: ring,
            }),
            consumer: Arc::new(FlumeConsumer {
                rx,
                topic: topic.clone(),
                bell,
            }),
        })
    }

    /// In memory: the bus keeps each topic in its topic log (a message appended once, a
    /// cursor per handler), with this factory's bound.
    fn topic_log(&self) -> Option<TopicLogSpec> {
        Some(
            self.bound
                .map_or_else(TopicLogSpec::unbounded, TopicLogSpec::bounded),
        )
    }

    fn name(&self) -> &'static str {
        "flume"
    }
}

struct FlumeProducer {
    // Dropped before `bell`: the workers it wakes then find the queue closed.
    tx: flume::Sender<Arc<EMessage>>,
    topic: MessageTopic,
    bell: Bell,
}

#[async_trait]
impl EProducer for FlumeProducer {
    fn try_send(&self, message: Arc<EMessage>) -> Result<(), TrySendError> {
        match self.tx.try_send(message) {
            Ok(()) => {
                self.bell.ring();
                Ok(())
            }
            Err(flume::TrySendError::Full(m)) => Err(TrySendError::Full(m)),
            Err(flume::TrySendError::Disconnected(_)) => Err(TrySendError::Failed(
                QueueError::Closed(self.topic.0.clone()),
            )),
        }
    }

    async fn send(&self, message: Arc<EMessage>) -> Result<(), QueueError> {
        self.tx
            .send_async(message)
            .await
            .map_err(|_| QueueError::Closed(self.topic.0.clone()))?;
        self.bell.ring();
        Ok(())
    }

    fn len(&self) -> usize {
        self.tx.len()
    }
}

struct FlumeConsumer {
    rx: flume::Receiver<Arc<EMessage>>,
    topic: MessageTopic,
    bell: Arc<Notify>,
}

impl FlumeConsumer {
    /// Moves up to `max` waiting messages into `out` without waiting; returns how many, and
    /// whether the queue turned out closed (every producer gone and nothing left).
    fn take_ready(&self, max: usize, out: &mut Vec<Claimed>) -> (usize, bool) {
        let mut n = 0;
        while n < max {
            match self.rx.try_recv() {
                Ok(message) => {
                    out.push(Claimed {
                        message,
                        receipt: Receipt::default(),
                    });
                    n += 1;
                }
                Err(flume::TryRecvError::Empty) => return (n, false),
                Err(flume::TryRecvError::Disconnected) => return (n, true),
            }
        }
        (n, false)
    }
}

#[async_trait]
impl EConsumer for FlumeConsumer {
    async fn claim_batch(&self, max: usize, out: &mut Vec<Claimed>) -> Result<usize, QueueError> {
        let first = match self.rx.try_recv() {
            Ok(m) => m,
            Err(_) => self
                .rx
                .recv_async()
                .await
                .map_err(|_| QueueError::Closed(self.topic.0.clone()))?,
        };
        out.push(Claimed {
            message: first,
            receipt: Receipt::default(),
        });
        // A queue closed after the first message only ends the batch.
        Ok(1 + self.take_ready(max.saturating_sub(1), out).0)
    }

    fn try_claim(&self, max: usize, out: &mut Vec<Claimed>) -> Result<usize, QueueError> {
        match self.take_ready(max, out) {
            (0, true) => Err(QueueError::Closed(self.topic.0.clone())),
            (n, _) => Ok(n),
        }
    }

    fn bell(&self) -> Option<&Notify> {
        Some(&self.bell)
    }

    fn requires_ack(&self) -> bool {
        false
    }

    async fn ack(&self, _claimed: &[Claimed]) -> Result<(), QueueError> {
        Ok(())
    }

    async fn nack(&self, claimed: &[Claimed]) -> Result<(), QueueError> {
        // Nothing is held back by an in-memory claim; the caller re-sends through the WAL.
        let _ = claimed;
        Ok(())
    }

    async fn claim_stale(
        &self,
        _min_idle: Duration,
        _max: usize,
        _out: &mut Vec<Claimed>,
    ) -> Result<usize, QueueError> {
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn claims_in_batches_and_refuses_when_full() {
        let q = FlumeQueueFactory::bounded(3)
            .create(&MessageTopic::from("t"))
            .unwrap();
        for _ in 0..3 {
            q.producer
                .try_send(Arc::new(EMessage::standard("t", b"x".to_vec())))
                .unwrap();
        }
        let extra = Arc::new(EMessage::standard("t", b"y".to_vec()));
        assert!(matches!(
            q.producer.try_send(extra),
            Err(TrySendError::Full(_))
        ));
        let mut out = Vec::new();
        assert_eq!(q.consumer.claim_batch(2, &mut out).await.unwrap(), 2);
        assert_eq!(q.consumer.claim_batch(64, &mut out).await.unwrap(), 1);
        assert_eq!(out.len(), 3);
        assert!(q.producer.is_empty());
    }
}
