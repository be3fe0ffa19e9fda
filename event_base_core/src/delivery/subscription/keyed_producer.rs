//! [`KeyedProducer`]: a subscription's queue, seen through its key lines.
//!
//! For a queue whose workers claim for themselves (no acks, in memory), a keyed message
//! takes its place in its key's line ([`KeyOrder::enter`]) just before the queue takes it,
//! and leaves it again if the queue refuses it, so the line's order is the order the queue
//! received them in. Messages without a key pass straight through (one look at their empty
//! headers).

use std::sync::Arc;

use async_trait::async_trait;

use crate::backend::queue::{EProducer, TrySendError};
use crate::delivery::subscription::key_order::{ordering_key, KeyOrder};
use crate::error::QueueError;
use crate::message::emessage::EMessage;

/// A queue's producer that puts keyed messages in their lines as it queues them.
pub(crate) struct KeyedProducer {
    inner: Arc<dyn EProducer>,
    keys: Arc<KeyOrder>,
}

impl KeyedProducer {
    pub(crate) fn new(inner: Arc<dyn EProducer>, keys: Arc<KeyOrder>) -> Self {
        KeyedProducer { inner, keys }
    }
}

/// Takes a message out of its line again unless disarmed: a send cancelled (its timeout
/// passed) or refused after the message entered its line.
struct LeaveOnDrop<'a> {
    keys: &'a KeyOrder,
    message: Option<Arc<EMessage>>,
}

impl LeaveOnDrop<'_> {
    fn disarm(mut self) {
        self.message = None;
    }
}

impl Drop for LeaveOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(m) = self.message.take() {
            self.keys.leave(&m);
        }
    }
}

#[async_trait]
impl EProducer for KeyedProducer {
    #[inline]
    fn try_send(&self, message: Arc<EMessage>) -> Result<(), TrySendError> {
        if ordering_key(&message).is_none() {
            return self.inner.try_send(message);
        }
        if self.keys.is_full() {
            return Err(TrySendError::Full(message));
        }
        self.keys.enter(&message);
        let guard = LeaveOnDrop {
            keys: &self.keys,
            message: Some(message.clone()),
        };
        let sent = self.inner.try_send(message);
        if sent.is_ok() {
            guard.disarm();
        }
        sent
    }

    async fn send(&self, message: Arc<EMessage>) -> Result<(), QueueError> {
        if ordering_key(&message).is_none() {
            return self.inner.send(message).await;
        }
        self.keys.room().await;
        self.keys.enter(&message);
        let guard = LeaveOnDrop {
            keys: &self.keys,
            message: Some(message.clone()),
        };
        let sent = self.inner.send(message).await;
        if sent.is_ok() {
            guard.disarm();
        }
        sent
    }

    fn len(&self) -> usize {
        self.inner.len()
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
