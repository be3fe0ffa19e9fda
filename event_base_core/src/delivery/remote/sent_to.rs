//! [`SentTo`]: the subscriptions of shared queues (`QueueFactory::routes`) this bus has sent
//! to, so that `wait_idle` can ask the backend whether their queues hold anything still
//! (`bus/idle.rs`, [`RemoteRoutes::outstanding`](crate::backend::RemoteRoutes::outstanding)).
//!
//! Each shared producer the bus makes (a local handler's on a shared queue, and one per
//! handler elsewhere) is wrapped in a [`Tracked`] one that marks its subscription at the
//! first send. In-process queues are never wrapped: their send path does not change.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::backend::queue::{EProducer, TrySendError};
use crate::error::QueueError;
use crate::message::emessage::EMessage;
use crate::message::topic::MessageTopic;

/// One subscription of a shared queue the bus can send to.
struct Subscription {
    topic: MessageTopic,
    handler: Arc<str>,
    /// Whether a handler of this bus runs it (else only other processes do).
    here: bool,
    sent: Arc<AtomicBool>,
}

/// The shared subscriptions of a bus, and whether it sent to each (see the module docs).
#[derive(Default)]
pub(crate) struct SentTo {
    subs: Mutex<Vec<Subscription>>,
}

impl SentTo {
    /// Wraps `producer`, the sending side of subscription `handler` of `topic` (`here`: a
    /// handler of this bus), so that a send through it marks the subscription.
    pub(crate) fn track(
        &self,
        topic: &MessageTopic,
        handler: &Arc<str>,
        here: bool,
        producer: Arc<dyn EProducer>,
    ) -> Arc<dyn EProducer> {
        let sent = Arc::new(AtomicBool::new(false));
        self.subs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Subscription {
                topic: topic.clone(),
                handler: handler.clone(),
                here,
                sent: sent.clone(),
            });
        Arc::new(Tracked {
            inner: producer,
            sent,
        })
    }

    /// The subscriptions sent to so far (`here_only`: of this bus's own handlers), each once.
    pub(crate) fn sent(&self, here_only: bool) -> Vec<(MessageTopic, Arc<str>)> {
        let subs = self.subs.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<(MessageTopic, Arc<str>)> = Vec::new();
        for s in subs.iter() {
            if !s.sent.load(Ordering::Acquire) || (here_only && !s.here) {
                continue;
            }
            if !out.iter().any(|(t, h)| *t == s.topic && *h == s.handler) {
                out.push((s.topic.clone(), s.handler.clone()));
            }
        }
        out
    }
}

/// A shared queue's producer that marks its subscription as sent to.
struct Tracked {
    inner: Arc<dyn EProducer>,
    sent: Arc<AtomicBool>,
}

impl Tracked {
    #[inline]
    fn mark(&self) {
        // Marked before the message is handed over: a `wait_idle` that begins once the send
        // answered sees the mark.
        if !self.sent.load(Ordering::Relaxed) {
            self.sent.store(true, Ordering::Release);
        }
    }
}

#[async_trait]
impl EProducer for Tracked {
    fn try_send(&self, message: Arc<EMessage>) -> Result<(), TrySendError> {
        self.mark();
        self.inner.try_send(message)
    }

    async fn send(&self, message: Arc<EMessage>) -> Result<(), QueueError> {
        self.mark();
        self.inner.send(message).await
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    fn keeps_delayed(&self) -> bool {
        self.inner.keeps_delayed()
    }

    async fn cancel_delayed(&self, id: &str) -> Result<bool, QueueError> {
        self.inner.cancel_delayed(id).await
    }

    async fn reads_addressed(&self, node: &str) -> Result<bool, QueueError> {
        self.inner.reads_addressed(node).await
    }

    async fn resolve_node(&self, node: &str) -> Result<Option<String>, QueueError> {
        self.inner.resolve_node(node).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sink;

    #[async_trait]
    impl EProducer for Sink {
        fn try_send(&self, _: Arc<EMessage>) -> Result<(), TrySendError> {
            Ok(())
        }
        async fn send(&self, _: Arc<EMessage>) -> Result<(), QueueError> {
            Ok(())
        }
        fn len(&self) -> usize {
            0
        }
    }

    #[tokio::test]
    async fn only_the_subscriptions_sent_to_are_listed_each_once() {
        let sent_to = SentTo::default();
        let orders = MessageTopic::from("orders");
        let (ship, audit): (Arc<str>, Arc<str>) = (Arc::from("ship"), Arc::from("audit"));
        let here = sent_to.track(&orders, &ship, true, Arc::new(Sink));
        let again = sent_to.track(&orders, &ship, true, Arc::new(Sink));
        let there = sent_to.track(&orders, &audit, false, Arc::new(Sink));
        assert!(sent_to.sent(false).is_empty());
        let m = Arc::new(EMessage::standard("orders", b"x".to_vec()));
        here.try_send(m.clone()).expect("sent");
        again.send(m.clone()).await.expect("sent");
        there.send(m).await.expect("sent");
        assert_eq!(
            sent_to.sent(false),
            vec![(orders.clone(), ship.clone()), (orders.clone(), audit)]
        );
        assert_eq!(sent_to.sent(true), vec![(orders, ship)]);
    }
}
