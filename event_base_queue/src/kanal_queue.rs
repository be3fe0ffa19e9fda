//! The `kanal` queue backend: [`MpmcQueueFactory`] makes one bounded `kanal` channel per topic.
//!
//! It keeps the name `MpmcQueueFactory` (from before the file was named after its backend);
//! it behaves as [`FlumeQueueFactory`](crate::FlumeQueueFactory) does, only over `kanal`: no
//! acknowledgement (`ack`/`nack` do nothing, `claim_stale` finds nothing), `try_send` on a
//! full queue hands the message back.
//!
//! The consumer never waits inside kanal. A kanal receive that waits is handed the message
//! straight from the sender, and dropping it then drops the message (kanal's receive future
//! is not cancel-safe), while the bus drops a worker's waiting claim whenever other work
//! reaches the worker first. So a claim waits on a [`Notify`] that the producer rings after
//! each send, and takes messages only with `try_recv`: what the queue holds stays in it
//! until a claim returns it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::bell::Bell;

use async_trait::async_trait;
use event_base_core::backend::{
    Claimed, EConsumer, EProducer, QueueFactory, Receipt, TopicLogSpec, TopicQueue, TrySendError,
};
use event_base_core::{EMessage, MessageTopic, QueueError};

use crate::DEFAULT_QUEUE_BOUND;

/// Makes one bounded `kanal` channel per topic; a drop-in alternative to
/// [`FlumeQueueFactory`](crate::FlumeQueueFactory).
///
/// ```
/// use event_base_queue::MpmcQueueFactory;
/// assert_eq!(MpmcQueueFactory::bounded(10).bound(), 10);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct MpmcQueueFactory {
    bound: usize,
}

impl Default for MpmcQueueFactory {
    fn default() -> Self {
        Self::bounded(DEFAULT_QUEUE_BOUND)
    }
}

impl MpmcQueueFactory {
    /// Queues that hold at most `n` messages (at least 1).
    pub fn bounded(n: usize) -> Self {
        MpmcQueueFactory { bound: n.max(1) }
    }

    /// The bound.
    pub fn bound(&self) -> usize {
        self.bound
    }
}

impl QueueFactory for MpmcQueueFactory {
    fn create(&self, topic: &MessageTopic) -> Result<TopicQueue, QueueError> {
        let (tx, rx) = kanal::bounded_async(self.bound);
        let (ring, bell) = Bell::new();
        Ok(TopicQueue {
            producer: Arc::new(KanalProducer {
                tx,
                topic: topic.clone(),
                bell: ring,
            }),
            consumer: Arc::new(KanalConsumer {
                rx,
                topic: topic.clone(),
                bell,
            }),
        })
    }

    /// In memory: the bus keeps each topic in its topic log (a message appended once, a
    /// cursor per handler), with this factory's bound.
    fn topic_log(&self) -> Option<TopicLogSpec> {
        Some(TopicLogSpec::bounded(self.bound))
    }

    fn name(&self) -> &'static str {
        "kanal"
    }
}

struct KanalProducer {
    // Dropped before `bell`: the waiting claims it wakes then find the queue closed.
    tx: kanal::AsyncSender<Arc<EMessage>>,
    topic: MessageTopic,
    bell: Bell,
}

#[async_trait]
impl EProducer for KanalProducer {
    fn try_send(&self, message: Arc<EMessage>) -> Result<(), TrySendError> {
        let mut slot = Some(message);
        match self.tx.try_send_option(&mut slot) {
            Ok(true) => {
                self.bell.ring();
                Ok(())
            }
            Ok(false) => match slot {
                Some(m) => Err(TrySendError::Full(m)),
                None => {
                    self.bell.ring();
                    Ok(())
                }
            },
            Err(_) => Err(TrySendError::Failed(QueueError::Closed(
                self.topic.0.clone(),
            ))),
        }
    }

    async fn send(&self, message: Arc<EMessage>) -> Result<(), QueueError> {
        self.tx
            .send(message)
            .await
            .map_err(|_| QueueError::Closed(self.topic.0.clone()))?;
        self.bell.ring();
        Ok(())
    }

    fn len(&self) -> usize {
        self.tx.len()
    }
}

struct KanalConsumer {
    rx: kanal::AsyncReceiver<Arc<EMessage>>,
    topic: MessageTopic,
    bell: Arc<Notify>,
}

impl KanalConsumer {
    /// Moves up to `max` waiting messages into `out` without waiting; returns how many, and
    /// whether the queue turned out closed.
    fn take_ready(&self, max: usize, out: &mut Vec<Claimed>) -> (usize, bool) {
        let mut n = 0;
        while n < max {
            match self.rx.try_recv() {
                Ok(Some(message)) => {
                    out.push(Claimed {
                        message,
                        receipt: Receipt::default(),
                    });
                    n += 1;
                }
                Ok(None) => return (n, false),
                Err(_) => return (n, true),
            }
        }
        (n, false)
    }
}

#[async_trait]
impl EConsumer for KanalConsumer {
    async fn claim_batch(&self, max: usize, out: &mut Vec<Claimed>) -> Result<usize, QueueError> {
        loop {
            // Listening before looking: a send after the look rings a bell already heard.
            // Dropped unwoken, nothing is lost; dropped woken, tokio passes the wake on to
            // another waiting claim.
            let rung = self.bell.notified();
            tokio::pin!(rung);
            rung.as_mut().enable();
            match self.take_ready(max.max(1), out) {
                // A queue closed after the first message only ends the batch.
                (0, true) => return Err(QueueError::Closed(self.topic.0.clone())),
                (0, false) => rung.await,
                (n, _) => return Ok(n),
            }
        }
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

    async fn nack(&self, _claimed: &[Claimed]) -> Result<(), QueueError> {
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
    async fn full_queue_hands_the_message_back() {
        let q = MpmcQueueFactory::bounded(1)
            .create(&MessageTopic::from("t"))
            .unwrap();
        q.producer
            .try_send(Arc::new(EMessage::standard("t", b"a".to_vec())))
            .unwrap();
        let b = Arc::new(EMessage::standard("t", b"b".to_vec()));
        match q.producer.try_send(b.clone()) {
            Err(TrySendError::Full(back)) => assert_eq!(back.id, b.id),
            other => panic!("expected Full, got {other:?}"),
        }
        let mut out = Vec::new();
        assert_eq!(q.consumer.claim_batch(8, &mut out).await.unwrap(), 1);
    }
}
