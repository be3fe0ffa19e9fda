//! [`TopicRouter`]: the sending side of a system.
//!
//! `send` appends the message to the WAL first, then puts it on its topic's queue. A message is
//! *accepted* when `send` returns `Ok`; from then on the bus owes it a final state (complete or
//! dead letter), across handler failures and, with a persistent WAL, across crashes. A refused
//! message (`try_send` on a full queue, a timeout, a WAL error) is withdrawn from the WAL before
//! the error is returned, so it is never delivered behind the caller's back.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use serde::Serialize;

use crate::delivery::hub::DeliveryHub;
use crate::delivery::subscription::topic_table::Route;
use crate::error::CoreError;
use crate::message::context::handling_bus;
use crate::message::emessage::{EMessage, TryIntoMessage};
use crate::message::id::MessageId;
use crate::message::json::Json;
use crate::message::topic::MessageTopic;

/// What [`TopicRouter::global`] sends into outside a handler: the hub of the default bus
/// (`bus/global.rs` installs it). Read on every `send_msg!`, so lock-free.
static DEFAULT: ArcSwapOption<DeliveryHub> = ArcSwapOption::const_empty();

/// Makes `hub` the one [`TopicRouter::global`] sends into outside a handler.
pub(crate) fn set_default(hub: Arc<DeliveryHub>) {
    DEFAULT.store(Some(hub));
}

/// The hub [`TopicRouter::global`] sends into outside a handler, if a bus is installed.
pub(crate) fn default_hub() -> Option<Arc<DeliveryHub>> {
    DEFAULT.load_full()
}

/// Takes `hub` out of [`TopicRouter::global`]'s reach, if it is the default one.
pub(crate) fn clear_default(hub: &Arc<DeliveryHub>) {
    let current = DEFAULT.load();
    if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, hub)) {
        DEFAULT.store(None);
    }
}

/// Sends messages into a system. Cheap to clone.
///
/// A router does not keep its bus alive: it refers to it weakly, so once the bus's last
/// `EventBus` handle is gone (or [`EventBus::close`](crate::EventBus::close) returned) the bus
/// ends and releases its WAL, and sends through a router kept longer fail with
/// [`CoreError::SystemShutdown`].
#[derive(Clone)]
pub struct TopicRouter {
    /// `None`: no bus was running when the router was made.
    shared: Option<Weak<DeliveryHub>>,
}

impl std::fmt::Debug for TopicRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let running = self
            .shared
            .as_ref()
            .and_then(Weak::upgrade)
            .is_some_and(|s| s.is_accepting());
        f.debug_struct("TopicRouter")
            .field("running", &running)
            .finish()
    }
}

impl TopicRouter {
    pub(crate) fn for_system(shared: &Arc<DeliveryHub>) -> Self {
        TopicRouter {
            shared: Some(Arc::downgrade(shared)),
        }
    }

    /// The router of the bus this code runs in: inside a handler, the bus that runs the
    /// handler (an isolated one built with `EventBus::builder()`, or a `TestBus`, as well as
    /// the global one); anywhere else (including a task a handler spawned), the global system
    /// that `start_system!` (or [`EventBus::install_global`](crate::EventBus::install_global))
    /// installed. Without either, every send fails with [`CoreError::NotStarted`].
    ///
    /// `send_msg!` sends through it, so it follows the same rule.
    pub fn global() -> TopicRouter {
        if let Some(bus) = handling_bus() {
            // Always a `DeliveryHub`: only workers set the context, with their own bus.
            if let Ok(shared) = bus.downcast::<DeliveryHub>() {
                return TopicRouter::for_system(&shared);
            }
        }
        TopicRouter {
            shared: default_hub().map(|s| Arc::downgrade(&s)),
        }
    }

    fn shared(&self) -> Result<Arc<DeliveryHub>, CoreError> {
        match &self.shared {
            None => Err(CoreError::NotStarted),
            Some(weak) => weak.upgrade().ok_or(CoreError::SystemShutdown),
        }
    }

    /// Sends `message` to `topic` and returns its id once it is accepted.
    ///
    /// - `try_send: Some(true)`: fail at once with [`CoreError::QueueFull`] if the topic's
    ///   queue is full; otherwise wait for room (backpressure).
    /// - `timeout: Some(t)`: fail with [`CoreError::Timeout`] if the message is not accepted
    ///   within `t` (`t` of [`MAX_WAIT`](crate::constant::MAX_WAIT), 30 years, or more: no
    ///   limit).
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
    #[must_use = "a send does nothing until awaited"]
    pub fn send(
        &self,
        topic: impl AsRef<str>,
        message: EMessage,
        try_send: Option<bool>,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<MessageId, CoreError>> + Send + 'static {
        let options = SendOptions {
            try_send: try_send.unwrap_or(false),
            timeout,
        };
        self.send_with(topic, message, options)
    }

    /// [`send`](Self::send) with its options as a [`SendOptions`] value.
    ///
    /// ```
    /// # async fn demo(router: event_base_core::TopicRouter, msg: event_base_core::EMessage) -> Result<(), event_base_core::CoreError> {
    /// use event_base_core::SendOptions;
    /// use std::time::Duration;
    /// router.send_with("orders", msg, SendOptions::new().try_send().timeout(Duration::from_secs(1))).await?;
    /// # Ok(()) }
    /// ```
    #[must_use = "a send does nothing until awaited"]
    pub fn send_with(
        &self,
        topic: impl AsRef<str>,
        message: EMessage,
        options: SendOptions,
    ) -> impl Future<Output = Result<MessageId, CoreError>> + Send + 'static {
        // Admitted now, before the future exists: see `DeliveryHub::admit`.
        let admitted = self
            .shared()
            .and_then(|shared| admit_owned(shared, topic.as_ref(), message));
        async move {
            let (shared, route, message) = admitted?;
            shared
                .accept(&route, message, options.try_send, options.timeout)
                .await
        }
    }

    /// Sends many messages to `topic` with one WAL commit (with a persistent WAL, one
    /// `fdatasync` for the lot), then queues them in order, waiting for room. Returns their
    /// ids once all are accepted.
    ///
    /// The batch is validated first, so an unknown `to_worker` refuses all of it before
    /// anything is written. Cancel safety: dropped before the WAL commit is durable, the whole
    /// batch is withdrawn; dropped after (while it waits for queue room, say), every message
    /// is still delivered, queued by a task of its own.
    ///
    /// With a shared backend (Redis), messages addressed to a worker of a node
    /// (`to_worker: "<node id>/<worker>"`) may be mixed in: each node named is checked
    /// first (one round trip per node and handler), so a node that does not run the handler
    /// refuses the whole batch with [`CoreError::UnknownWorker`] before anything is sent.
    /// Then the other messages go as above, and the addressed ones after them, one by one in
    /// the batch's order (as [`send`](Self::send) sends each), by a task of their own. Should
    /// a node be evicted between the check and its message's send, the batch answers
    /// `UnknownWorker` with the other messages and the addressed ones before that message
    /// queued, and it and the addressed ones after it not sent; a call dropped before the
    /// other messages are queued sends none of the addressed ones.
    pub async fn send_batch(
        &self,
        topic: impl AsRef<str>,
        messages: Vec<EMessage>,
    ) -> Result<Vec<MessageId>, CoreError> {
        let shared = self.shared()?;
        shared.send_batch(topic.as_ref(), messages).await
    }

    /// Sends a message or a payload (anything [`TryIntoMessage`]: every
    /// [`IntoMessage`](crate::IntoMessage), and `Json(&value)`), waiting for room. Checked
    /// (and a `Json` value encoded) when called, written and queued when first polled, as
    /// [`send`](Self::send).
    #[must_use = "a send does nothing until awaited"]
    pub fn publish(
        &self,
        topic: impl AsRef<str>,
        message: impl TryIntoMessage,
    ) -> impl Future<Output = Result<MessageId, CoreError>> + Send + 'static {
        let admitted = self.shared().and_then(|shared| {
            let topic = topic.as_ref();
            let message = routed(&shared, topic, message)?;
            admit_owned(shared, topic, message)
        });
        async move {
            let (shared, route, message) = admitted?;
            shared.accept(&route, message, false, None).await
        }
    }

    /// Sends `value` encoded as JSON as a standard message, waiting for room: the sending side
    /// of a `Json<T>` handler parameter. A value that does not serialize is refused with
    /// [`CoreError::Encode`] before anything is written. The same as
    /// `publish(topic, Json(value))`.
    ///
    /// ```
    /// # async fn demo(router: event_base_core::TopicRouter) -> Result<(), event_base_core::CoreError> {
    /// #[derive(serde::Serialize)]
    /// struct Order { id: u32 }
    /// let id = router.send_json("orders", &Order { id: 7 }).await?;
    /// # let _ = id; Ok(()) }
    /// ```
    #[must_use = "a send does nothing until awaited"]
    pub fn send_json<T: Serialize + ?Sized>(
        &self,
        topic: impl AsRef<str>,
        value: &T,
    ) -> impl Future<Output = Result<MessageId, CoreError>> + Send + 'static {
        // Encoded and admitted now, as `publish`; the future owns nothing of `value`.
        let admitted = self.shared().and_then(|shared| {
            let topic = topic.as_ref();
            let message = routed(&shared, topic, Json(value))?;
            admit_owned(shared, topic, message)
        });
        accept_admitted(admitted)
    }

    /// Delivers again every message the WAL holds as `Pending` or `Processing` (those were
    /// interrupted), re-schedules those whose `deliver_at` is still ahead, and dead-letters
    /// those whose topic has no handler any more (`DeadReason::NoHandler`). Dead letters and
    /// completed messages are left alone. Returns how many were re-delivered.
    ///
    /// [`EventBusBuilder::build`](crate::EventBusBuilder::build) calls it once at start.
    /// Cancel safety: dropped part-way, the messages re-sent so far are delivered; the rest
    /// stay in the WAL for the next replay.
    /// Calling it again on a running system delivers messages that are in flight right now a
    /// second time: at-least-once still holds, but handlers see duplicates.
    pub async fn replay(&self) -> Result<usize, CoreError> {
        let shared = self.shared()?;
        shared.replay().await
    }

    /// The topics that have handlers in this process. With a backend shared by several
    /// processes (Redis), a send also reaches topics only other processes handle, which
    /// this does not list: [`EventBus::handlers_elsewhere`](crate::EventBus::handlers_elsewhere)
    /// tells which handlers elsewhere a send to a topic reaches.
    pub fn topics(&self) -> Vec<String> {
        match self.shared() {
            Ok(s) => {
                let mut t: Vec<String> = s.topics.keys().map(|k| k.0.clone()).collect();
                t.sort();
                t
            }
            Err(_) => Vec::new(),
        }
    }

    /// Whether `topic` has a handler in this process (see [`topics`](Self::topics) for the
    /// topics only other processes handle).
    pub fn has_topic(&self, topic: &str) -> bool {
        self.shared().is_ok_and(|s| s.topics.contains_key(topic))
    }
}

/// How a send behaves when it has to wait: the options of [`TopicRouter::send_with`],
/// [`EventBus::send_with`](crate::EventBus::send_with) and `TestBus::send_with`.
///
/// The default waits for room as long as it takes (backpressure).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SendOptions {
    /// Fail at once with [`CoreError::QueueFull`] instead of waiting for room.
    pub try_send: bool,
    /// Fail with [`CoreError::Timeout`] if the message is not accepted within this time. A
    /// timeout of [`MAX_WAIT`](crate::constant::MAX_WAIT) (30 years) or more is none: the
    /// send waits as long as it takes, as with `None`.
    pub timeout: Option<Duration>,
}

impl SendOptions {
    /// Wait for room as long as it takes.
    pub fn new() -> Self {
        SendOptions::default()
    }

    /// Do not wait for room: a full queue refuses the message.
    pub fn try_send(mut self) -> Self {
        self.try_send = true;
        self
    }

    /// Give up (and withdraw the message) after `timeout`. A timeout of
    /// [`MAX_WAIT`](crate::constant::MAX_WAIT) (30 years) or more is none.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// `message` (or a payload) as a message for `topic`; fails if it cannot be one (a `Json`
/// value that does not serialize).
pub(crate) fn routed(
    shared: &DeliveryHub,
    topic: &str,
    message: impl TryIntoMessage,
) -> Result<EMessage, CoreError> {
    match shared.topic(topic) {
        Some(route) => message.try_into_message(&route.topic),
        None => message.try_into_message(&MessageTopic::from(topic)),
    }
}

/// Admits `message` and hands back what the send future needs to own.
type Admitted = (Arc<DeliveryHub>, Arc<Route>, Arc<EMessage>);

/// Accepts an admitted message (or returns the admission's error) when first polled.
async fn accept_admitted(admitted: Result<Admitted, CoreError>) -> Result<MessageId, CoreError> {
    let (shared, route, message) = admitted?;
    shared.accept(&route, message, false, None).await
}

fn admit_owned(
    shared: Arc<DeliveryHub>,
    topic: &str,
    message: EMessage,
) -> Result<Admitted, CoreError> {
    let (route, message) = shared.admit(topic, message, true)?;
    let route = route.clone();
    Ok((shared, route, message))
}
