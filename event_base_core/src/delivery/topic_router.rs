//! [`TopicRouter`]: the sending side of a system.
//!
//! `send` appends the message to the WAL first, then puts it on its topic's queue. A message is
//! *accepted* when `send` returns `Ok`; from then on the bus owes it a final state (complete or
//! dead letter), across handler failures and, with a persistent WAL, across crashes. A refused
//! message (`try_send` on a full queue, a timeout, a WAL error) is withdrawn from the WAL before
//! the error is returned, so it is never delivered behind the caller's back.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::bus::global;
use crate::bus::shared::BusShared;
use crate::error::CoreError;
use crate::message::emessage::{EMessage, IntoMessage};
use crate::message::id::MessageId;
use crate::message::topic::MessageTopic;

/// Sends messages into a system. Cheap to clone.
#[derive(Clone)]
pub struct TopicRouter {
    shared: Option<Arc<BusShared>>,
}

impl std::fmt::Debug for TopicRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicRouter")
            .field("running", &self.shared.is_some())
            .finish()
    }
}

impl TopicRouter {
    pub(crate) fn for_system(shared: Arc<BusShared>) -> Self {
        TopicRouter {
            shared: Some(shared),
        }
    }

    /// The router of the global system that `start_system!` installed. Without one, every
    /// send fails with [`CoreError::NotStarted`].
    pub fn global() -> TopicRouter {
        TopicRouter {
            shared: global::router_shared(),
        }
    }

    fn shared(&self) -> Result<&Arc<BusShared>, CoreError> {
        self.shared.as_ref().ok_or(CoreError::NotStarted)
    }

    /// Sends `message` to `topic` and returns its id once it is accepted.
    ///
    /// - `try_send: Some(true)`: fail at once with [`CoreError::QueueFull`] if the topic's
    ///   queue is full; otherwise wait for room (backpressure).
    /// - `timeout: Some(t)`: fail with [`CoreError::Timeout`] if the message is not accepted
    ///   within `t`.
    ///
    /// The `topic` argument decides the route; the message's own `topic` field is set to it.
    /// A topic with no handler is refused with [`CoreError::NoHandler`], `_system.` topics with
    /// [`CoreError::ReservedTopic`], an unknown `to_worker` with [`CoreError::UnknownWorker`],
    /// and every send once shutdown began with [`CoreError::SystemShutdown`].
    ///
    /// Like any future, the returned one does nothing until polled: the checks above run
    /// when `send` is called (their error is returned by the first poll), the WAL append
    /// and the enqueue at the first poll. Dropping the future before it finished withdraws
    /// the message: it is not delivered.
    pub fn send(
        &self,
        topic: impl AsRef<str>,
        message: EMessage,
        try_send: Option<bool>,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<MessageId, CoreError>> + Send + '_ {
        // Admitted now, before the future exists: see `BusShared::admit`.
        let admitted = self.shared().and_then(|shared| {
            shared
                .admit(topic.as_ref(), message, true)
                .map(|(entry, message)| (shared, entry, message))
        });
        async move {
            let (shared, entry, message) = admitted?;
            shared
                .accept(entry, message, try_send.unwrap_or(false), timeout)
                .await
        }
    }

    /// Sends many messages to `topic` with one WAL commit (with a persistent WAL, one
    /// `fdatasync` for the lot), then queues them in order, waiting for room. Returns their
    /// ids once all are accepted.
    ///
    /// The batch is validated first, so an unknown `to_worker` refuses all of it before
    /// anything is written. A send future dropped while the batch waits for queue room
    /// leaves the messages accepted (they are in the WAL and will be delivered).
    pub async fn send_batch(
        &self,
        topic: impl AsRef<str>,
        messages: Vec<EMessage>,
    ) -> Result<Vec<MessageId>, CoreError> {
        self.shared()?.send_batch(topic.as_ref(), messages).await
    }

    /// Sends a message or a payload (anything [`IntoMessage`]), waiting for room. Checked
    /// when called, written and queued when first polled, as [`send`](Self::send).
    pub fn publish(
        &self,
        topic: impl AsRef<str>,
        message: impl IntoMessage,
    ) -> impl Future<Output = Result<MessageId, CoreError>> + Send + '_ {
        let admitted = self.shared().and_then(|shared| {
            let topic = topic.as_ref();
            let message = match shared.topic(topic) {
                Some(entry) => message.into_message(&entry.topic),
                None => message.into_message(&MessageTopic::from(topic)),
            };
            shared
                .admit(topic, message, true)
                .map(|(entry, message)| (shared, entry, message))
        });
        async move {
            let (shared, entry, message) = admitted?;
            shared.accept(entry, message, false, None).await
        }
    }

    /// Delivers again every message the WAL holds as `Pending` or `Processing` (those were
    /// interrupted), re-schedules those whose `deliver_at` is still ahead, and dead-letters
    /// those whose topic has no handler any more (`DeadReason::NoHandler`). Dead letters and
    /// completed messages are left alone. Returns how many were re-delivered.
    ///
    /// [`EventBusBuilder::build`](crate::EventBusBuilder::build) calls it once at start.
    /// Calling it again on a running system delivers messages that are in flight right now a
    /// second time: at-least-once still holds, but handlers see duplicates.
    pub async fn replay(&self) -> Result<usize, CoreError> {
        self.shared()?.replay().await
    }

    /// The topics that have handlers.
    pub fn topics(&self) -> Vec<String> {
        match &self.shared {
            Some(s) => {
                let mut t: Vec<String> = s.topics.keys().map(|k| k.0.clone()).collect();
                t.sort();
                t
            }
            None => Vec::new(),
        }
    }

    /// Whether `topic` has a handler.
    pub fn has_topic(&self, topic: &str) -> bool {
        self.shared
            .as_ref()
            .is_some_and(|s| s.topics.contains_key(topic))
    }
}
