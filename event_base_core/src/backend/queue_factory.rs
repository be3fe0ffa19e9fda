//! [`QueueFactory`]: what a queue backend offers the bus, a [`TopicQueue`] per topic or per
//! subscription (a handler of a topic), and, for a backend several processes share, the
//! routes to the handlers other processes run ([`RemoteRoutes`]).

use std::sync::Arc;

use crate::backend::queue::TopicQueue;
use crate::backend::rate_limiter::RateLimiter;
use crate::backend::routes::RemoteRoutes;
use crate::error::QueueError;
use crate::handler::rate::Rate;
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

    /// Whether this backend's queues live in this process's memory only, so that the bus
    /// may keep each topic's messages in one log of its own, read by a cursor per handler,
    /// instead of a queue per handler ([`create_subscription`](Self::create_subscription) is
    /// then not called): a message is appended once however many handlers its topic has.
    /// The answer carries the bound the backend's queues would have had. The default,
    /// `None`, is for backends that are the log themselves (Redis: a stream per
    /// subscription); the in-memory `FlumeQueueFactory` and `MpmcQueueFactory` answer
    /// `Some`. `EventBusBuilder::topic_log(false)` keeps a queue per handler anyway.
    ///
    /// ```
    /// use event_base_core::backend::{QueueFactory, TopicLogSpec, TopicQueue};
    /// use event_base_core::{MessageTopic, QueueError};
    ///
    /// struct InMemory;
    ///
    /// impl QueueFactory for InMemory {
    ///     fn create(&self, _topic: &MessageTopic) -> Result<TopicQueue, QueueError> {
    ///         Err(QueueError::Backend("queues come from the topic log".into()))
    ///     }
    ///     fn topic_log(&self) -> Option<TopicLogSpec> {
    ///         Some(TopicLogSpec::bounded(1_000))
    ///     }
    ///     fn name(&self) -> &'static str {
    ///         "in-memory"
    ///     }
    /// }
    /// assert_eq!(InMemory.topic_log().and_then(|s| s.bound()), Some(1_000));
    /// ```
    fn topic_log(&self) -> Option<TopicLogSpec> {
        None
    }

    /// The limiter that paces handler `handler` of `topic` at `rate` across every process
    /// sharing this backend (`HandlerSpec::rate`). The default, `None`, paces each process
    /// on its own (in-memory backends: there is only one). The bus asks once per rated
    /// handler, at build.
    fn rate_limiter(
        &self,
        topic: &MessageTopic,
        handler: &str,
        rate: Rate,
    ) -> Option<Arc<dyn RateLimiter>> {
        let _ = (topic, handler, rate);
        None
    }

    /// A short name for logs (e.g. `"flume"`).
    fn name(&self) -> &'static str;
}

/// The shape of the bus's topic log for an in-memory queue backend
/// ([`QueueFactory::topic_log`]): how many messages one topic's log holds before senders
/// wait (a message counts until every handler of the topic has claimed it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicLogSpec {
    bound: Option<usize>,
}

impl TopicLogSpec {
    /// A log holding at most `n` messages (at least 1).
    pub fn bounded(n: usize) -> Self {
        TopicLogSpec {
            bound: Some(n.max(1)),
        }
    }

    /// A log without a bound: senders never wait, memory grows with the backlog.
    pub fn unbounded() -> Self {
        TopicLogSpec { bound: None }
    }

    /// The bound, if any.
    pub fn bound(&self) -> Option<usize> {
        self.bound
    }
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
    fn topic_log(&self) -> Option<TopicLogSpec> {
        (**self).topic_log()
    }
    fn rate_limiter(
        &self,
        topic: &MessageTopic,
        handler: &str,
        rate: Rate,
    ) -> Option<Arc<dyn RateLimiter>> {
        (**self).rate_limiter(topic, handler, rate)
    }
    fn name(&self) -> &'static str {
        (**self).name()
    }
}
