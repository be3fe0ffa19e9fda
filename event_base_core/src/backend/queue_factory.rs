//! [`QueueFactory`]: what a queue backend offers the bus, a [`TopicQueue`] per topic or per
//! subscription (a handler of a topic), and, for a backend several processes share, the
//! routes to the handlers other processes run ([`RemoteRoutes`]).

use std::sync::Arc;

use crate::backend::queue::TopicQueue;
use crate::backend::routes::RemoteRoutes;
use crate::error::QueueError;
use crate::message::topic::MessageTopic;

/// Makes a queue per topic.
pub trait QueueFactory: Send + Sync + 'static {
    /// Creates the queue for `topic`.
    fn create(&self, topic: &MessageTopic) -> Result<TopicQueue, QueueError>;

    /// Creates the queue of one subscription: the handler called `handler` of `topic`. The
    /// bus calls this once per handler of a topic (every handler receives a copy of every
    /// message). Backends shared by several processes use the name to find the same queue
    /// again in each of them (the Redis backend: the handler's stream and consumer group);
    /// the default ignores it and calls [`create`](Self::create).
    fn create_subscription(
        &self,
        topic: &MessageTopic,
        handler: &str,
    ) -> Result<TopicQueue, QueueError> {
        let _ = handler;
        self.create(topic)
    }

    /// The cluster's registry of handlers, for a backend shared by several processes: with
    /// it, a bus sends to topics that only other processes handle (see [`RemoteRoutes`]).
    /// The bus asks once, at build. The default, for backends within one process, is
    /// `None`: a topic with no handler in the process is refused with `NoHandler`.
    fn routes(&self) -> Option<Arc<dyn RemoteRoutes>> {
        None
    }

    /// A short name for logs (e.g. `"flume"`).
    fn name(&self) -> &'static str;
}

impl<Q: QueueFactory + ?Sized> QueueFactory for Arc<Q> {
    fn create(&self, topic: &MessageTopic) -> Result<TopicQueue, QueueError> {
        (**self).create(topic)
    }
    fn create_subscription(
        &self,
        topic: &MessageTopic,
        handler: &str,
    ) -> Result<TopicQueue, QueueError> {
        (**self).create_subscription(topic, handler)
    }
    fn routes(&self) -> Option<Arc<dyn RemoteRoutes>> {
        (**self).routes()
    }
    fn name(&self) -> &'static str {
        (**self).name()
    }
}
