//! The message that travels through the bus: [`EMessage`] and its parts.
//!
//! A message is created once by the sender and then shared, never copied: the bus wraps it in an
//! [`Arc`](std::sync::Arc) when it is accepted, and the payload is a reference-counted
//! [`Bytes`] buffer, so a 64 KiB payload costs the same to route as a 64-byte one.

use std::fmt;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use uuid::Uuid;

use crate::error::CoreError;
use crate::message::id::new_message_id;

/// The name of a topic, e.g. `"order.created"`.
///
/// Topics beginning with `_system.` are reserved for the bus itself (see [`crate::constant`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct MessageTopic(pub String);

impl MessageTopic {
    /// The topic as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is a reserved `_system.` topic.
    pub fn is_system(&self) -> bool {
        self.0.starts_with(crate::constant::SYSTEM_PREFIX)
    }
}

impl From<&str> for MessageTopic {
    fn from(s: &str) -> Self {
        MessageTopic(s.to_owned())
    }
}

impl From<String> for MessageTopic {
    fn from(s: String) -> Self {
        MessageTopic(s)
    }
}

impl From<&String> for MessageTopic {
    fn from(s: &String) -> Self {
        MessageTopic(s.clone())
    }
}

impl From<&MessageTopic> for MessageTopic {
    fn from(t: &MessageTopic) -> Self {
        t.clone()
    }
}

impl fmt::Display for MessageTopic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for MessageTopic {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for MessageTopic {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// The message body: shared, immutable bytes.
///
/// `.0` gives the bytes ([`Bytes`] dereferences to `[u8]`). Cloning a payload, or the message
/// that holds it, never copies the bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MessagePayload(pub Bytes);

impl MessagePayload {
    /// The payload bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<Vec<u8>> for MessagePayload {
    fn from(v: Vec<u8>) -> Self {
        MessagePayload(Bytes::from(v))
    }
}

impl From<Bytes> for MessagePayload {
    fn from(b: Bytes) -> Self {
        MessagePayload(b)
    }
}

impl From<&'static [u8]> for MessagePayload {
    fn from(b: &'static [u8]) -> Self {
        MessagePayload(Bytes::from_static(b))
    }
}

impl<const N: usize> From<&'static [u8; N]> for MessagePayload {
    fn from(b: &'static [u8; N]) -> Self {
        MessagePayload(Bytes::from_static(b))
    }
}

impl From<String> for MessagePayload {
    fn from(s: String) -> Self {
        MessagePayload(Bytes::from(s))
    }
}

impl From<&'static str> for MessagePayload {
    fn from(s: &'static str) -> Self {
        MessagePayload(Bytes::from_static(s.as_bytes()))
    }
}

/// Who should handle a message, and how many times.
///
/// | mode | handled by | typical use |
/// |---|---|---|
/// | `Standard` | exactly one worker of the topic (competing consumers) | jobs, commands |
/// | `Broadcast` | every worker subscribed to the topic, once each | cache invalidation, fan-out |
/// | `Repeated(n)` | `n` times in total, by any workers of the topic | load generation, sampling |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum DeliveryMode {
    /// Exactly one worker of the topic handles each delivery.
    #[default]
    Standard,
    /// Handled exactly `n` times in total, by any workers of the topic.
    Repeated(u32),
    /// Every worker subscribed to the topic handles it once.
    Broadcast,
}

/// Where a message came from and how it relates to others.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageMetadata {
    /// When the message was created.
    pub created_at: SystemTime,
    /// Trace id that follows a chain of messages.
    pub trace_id: Option<String>,
    /// Correlation id shared by related messages (e.g. one request).
    pub correlation_id: Option<String>,
    /// Id of the message whose handler sent this one.
    pub causation_id: Option<Uuid>,
    /// Free-form name of the sender (service, node, component).
    pub source: Option<String>,
}

impl Default for MessageMetadata {
    fn default() -> Self {
        MessageMetadata {
            created_at: SystemTime::now(),
            trace_id: None,
            correlation_id: None,
            causation_id: None,
            source: None,
        }
    }
}

/// Version of the [`EMessage`] layout; stored with every message so that decoders can refuse
/// or migrate records written by other versions.
pub const MESSAGE_VERSION: u32 = 1;

/// A message on the bus.
///
/// ```
/// use event_base_core::{EMessage, DeliveryMode};
/// use std::time::Duration;
///
/// let msg = EMessage::new("order.created", b"{\"id\":7}".to_vec(), DeliveryMode::Standard, None)
///     .with_correlation_id("req-42")
///     .with_delay(Duration::from_millis(250));
/// assert_eq!(msg.topic, "order.created");
/// assert_eq!(msg.payload.0.len(), 8);
/// assert!(msg.deliver_at.is_some());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EMessage {
    /// Unique id (UUID v4), given at creation.
    pub id: Uuid,
    /// The topic the message is sent to.
    pub topic: MessageTopic,
    /// The body.
    pub payload: MessagePayload,
    /// Tracing and provenance.
    pub metadata: MessageMetadata,
    /// How many times the message has been handed to a handler, counting the current
    /// delivery: a handler sees `1` on the first delivery, `2` on the first retry, and so on.
    /// `0` until the bus accepts the message.
    pub attempts: u32,
    /// Standard, broadcast or repeated delivery.
    pub delivery_mode: DeliveryMode,
    /// For `Repeated` and `Broadcast`: deliveries completed so far.
    pub consumed_count: u32,
    /// Deliver no earlier than this time (delayed delivery); `None` delivers at once.
    pub deliver_at: Option<SystemTime>,
    /// Only this worker (by name) may handle the message.
    pub to_worker: Option<String>,
    /// Layout version ([`MESSAGE_VERSION`]).
    pub version: u32,
}

impl EMessage {
    /// Creates a message with a fresh UUID v4 id.
    pub fn new(
        topic: impl Into<MessageTopic>,
        payload: impl Into<MessagePayload>,
        delivery_mode: DeliveryMode,
        to_worker: Option<String>,
    ) -> Self {
        EMessage {
            id: new_message_id(),
            topic: topic.into(),
            payload: payload.into(),
            metadata: MessageMetadata::default(),
            attempts: 0,
            delivery_mode,
            consumed_count: 0,
            deliver_at: None,
            to_worker,
            version: MESSAGE_VERSION,
        }
    }

    /// A standard message: the common case.
    pub fn standard(topic: impl Into<MessageTopic>, payload: impl Into<MessagePayload>) -> Self {
        Self::new(topic, payload, DeliveryMode::Standard, None)
    }

    /// A message whose payload is `value` encoded as JSON.
    ///
    /// ```
    /// # use event_base_core::{EMessage, JsonPayload};
    /// #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    /// struct Order { id: u32 }
    /// let msg = EMessage::json("orders", &Order { id: 7 }).unwrap();
    /// assert_eq!(msg.json::<Order>().unwrap(), Order { id: 7 });
    /// ```
    pub fn json<T: Serialize + ?Sized>(
        topic: impl Into<MessageTopic>,
        value: &T,
    ) -> Result<Self, CoreError> {
        let bytes = serde_json::to_vec(value).map_err(|e| CoreError::Encode(e.to_string()))?;
        Ok(Self::standard(topic, bytes))
    }

    /// Decodes the payload as JSON into `T`.
    pub fn json_payload<T: DeserializeOwned>(&self) -> Result<T, CoreError> {
        serde_json::from_slice(&self.payload.0).map_err(|e| CoreError::Decode {
            what: std::any::type_name::<T>().to_owned(),
            reason: e.to_string(),
        })
    }

    /// Sets the delivery mode.
    pub fn with_mode(mut self, mode: DeliveryMode) -> Self {
        self.delivery_mode = mode;
        self
    }

    /// Only the named worker may handle the message.
    pub fn with_to_worker(mut self, worker: impl Into<String>) -> Self {
        self.to_worker = Some(worker.into());
        self
    }

    /// Deliver no earlier than `at`.
    pub fn with_deliver_at(mut self, at: SystemTime) -> Self {
        self.deliver_at = Some(at);
        self
    }

    /// Deliver no earlier than `delay` from now.
    pub fn with_delay(self, delay: Duration) -> Self {
        self.with_deliver_at(SystemTime::now() + delay)
    }

    /// Sets the trace id.
    pub fn with_trace_id(mut self, id: impl Into<String>) -> Self {
        self.metadata.trace_id = Some(id.into());
        self
    }

    /// Sets the correlation id.
    pub fn with_correlation_id(mut self, id: impl Into<String>) -> Self {
        self.metadata.correlation_id = Some(id.into());
        self
    }

    /// Sets the causation id (the message that caused this one).
    pub fn with_causation_id(mut self, id: Uuid) -> Self {
        self.metadata.causation_id = Some(id);
        self
    }

    /// Sets the source.
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.metadata.source = Some(source.into());
        self
    }

    /// Whether the message is due now (no `deliver_at`, or one in the past).
    pub fn is_due(&self, now: SystemTime) -> bool {
        self.deliver_at.is_none_or(|at| at <= now)
    }
}

/// Shorthand so `msg.json::<T>()` reads naturally on a received message.
pub trait JsonPayload {
    /// Decodes the payload as JSON.
    fn json<T: DeserializeOwned>(&self) -> Result<T, CoreError>;
}

impl JsonPayload for EMessage {
    fn json<T: DeserializeOwned>(&self) -> Result<T, CoreError> {
        self.json_payload()
    }
}

/// Anything `send_msg!` accepts as its second argument: a whole [`EMessage`], or a payload
/// (`Vec<u8>`, `&'static [u8]`, `Bytes`, `String`, [`MessagePayload`]) that becomes a
/// standard message.
pub trait IntoMessage {
    /// Turns `self` into a message for `topic`.
    fn into_message(self, topic: &MessageTopic) -> EMessage;
}

impl IntoMessage for EMessage {
    fn into_message(self, _topic: &MessageTopic) -> EMessage {
        self
    }
}

macro_rules! payload_into_message {
    ($($t:ty),*) => {$(
        impl IntoMessage for $t {
            fn into_message(self, topic: &MessageTopic) -> EMessage {
                EMessage::standard(topic.clone(), self)
            }
        }
    )*};
}

payload_into_message!(
    Vec<u8>,
    Bytes,
    String,
    MessagePayload,
    &'static [u8],
    &'static str
);

impl<const N: usize> IntoMessage for &'static [u8; N] {
    fn into_message(self, topic: &MessageTopic) -> EMessage {
        EMessage::standard(topic.clone(), self)
    }
}

impl std::borrow::Borrow<str> for MessageTopic {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for MessageTopic {
    fn as_ref(&self) -> &str {
        &self.0
    }
}
