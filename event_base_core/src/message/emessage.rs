//! The message that travels through the bus: [`EMessage`] and its parts.
//!
//! A message is created once by the sender and then shared, never copied: the bus wraps it in an
//! [`Arc`](std::sync::Arc) when it is accepted, and the payload is a reference-counted
//! [`Bytes`] buffer, so a 64 KiB payload costs the same to route as a 64-byte one.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::error::CoreError;
use crate::message::delivery_mode::DeliveryMode;
use crate::message::headers::MessageHeaders;
use crate::message::id::new_message_id;
use crate::message::metadata::MessageMetadata;
use crate::message::payload::MessagePayload;
use crate::message::topic::MessageTopic;

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
    /// Unique id: a UUID v4 in hyphenated text (36 characters) unless the application set its
    /// own with [`EMessage::with_id`] (1 to [`MAX_ID_BYTES`](crate::constant::MAX_ID_BYTES)
    /// bytes).
    pub id: String,
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
    /// Deliver no earlier than this time (delayed delivery); `None` delivers at once. A time
    /// more than [`MAX_WAIT`](crate::constant::MAX_WAIT) (30 years) ahead is clamped to that
    /// when the message is sent.
    pub deliver_at: Option<SystemTime>,
    /// Only this worker (by name) may handle the message.
    pub to_worker: Option<String>,
    /// Layout version ([`MESSAGE_VERSION`]).
    pub version: u32,
    /// Named values that travel with the message: its ordering key
    /// ([`with_key`](Self::with_key)), W3C trace context, the application's own
    /// ([`with_header`](Self::with_header)). Empty by default, and then free.
    ///
    /// The one field beside the ten of the original documents (whose
    /// [`MessageMetadata`] keeps its five): a struct literal of `EMessage` names it too, or
    /// ends with `..EMessage::standard(..)`.
    #[serde(default, skip_serializing_if = "MessageHeaders::is_empty")]
    pub headers: MessageHeaders,
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
            headers: MessageHeaders::new(),
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
    /// assert_eq!(msg.decode_json::<Order>().unwrap(), Order { id: 7 });
    /// ```
    pub fn json<T: Serialize + ?Sized>(
        topic: impl Into<MessageTopic>,
        value: &T,
    ) -> Result<Self, CoreError> {
        let bytes = serde_json::to_vec(value).map_err(CoreError::Encode)?;
        Ok(Self::standard(topic, bytes))
    }

    /// Decodes the payload as JSON into `T`.
    pub fn json_payload<T: DeserializeOwned>(&self) -> Result<T, CoreError> {
        serde_json::from_slice(&self.payload.0).map_err(|source| CoreError::Decode {
            what: std::any::type_name::<T>().to_owned(),
            source,
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

    /// Deliver no earlier than `at` (clamped, when sent, to
    /// [`MAX_WAIT`](crate::constant::MAX_WAIT) from then; a time in the past delivers at once).
    pub fn with_deliver_at(mut self, at: SystemTime) -> Self {
        self.deliver_at = Some(at);
        self
    }

    /// Deliver no earlier than `delay` from now. A delay of
    /// [`MAX_WAIT`](crate::constant::MAX_WAIT) (30 years) or more is clamped to it.
    pub fn with_delay(self, delay: Duration) -> Self {
        let now = SystemTime::now();
        // Every wall clock reaches 30 years ahead; were one not to, the message is due now
        // rather than the call a panic.
        let at = now
            .checked_add(delay.min(crate::constant::MAX_WAIT))
            .unwrap_or(now);
        self.with_deliver_at(at)
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

    /// Sets the causation id (the id of the message that caused this one).
    pub fn with_causation_id(mut self, id: impl Into<String>) -> Self {
        self.metadata.causation_id = Some(id.into());
        self
    }

    /// Replaces the generated id with the application's own, e.g. `"order-42-created"`.
    ///
    /// An id must be unique among the messages the bus holds: sending a message whose id a
    /// dead letter has replaces that dead letter. It must be 1 to
    /// [`MAX_ID_BYTES`](crate::constant::MAX_ID_BYTES) bytes long, or the send is refused with
    /// [`CoreError::InvalidId`].
    ///
    /// ```
    /// # use event_base_core::EMessage;
    /// let msg = EMessage::standard("orders", b"x".to_vec()).with_id("order-42-created");
    /// assert_eq!(msg.id, "order-42-created");
    /// ```
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// Sets the source.
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.metadata.source = Some(source.into());
        self
    }

    /// Gives the message an ordering key: for each handler of its topic, messages with the
    /// same key are handled one at a time, in the order they were sent, across the handler's
    /// workers, across retries (a failed message holds its key until it is acked or
    /// dead-lettered) and across a restart. Different keys run in parallel; messages without
    /// a key are not ordered.
    ///
    /// Only `Standard` messages for no worker in particular are ordered by their key;
    /// `Broadcast`, `Repeated` and addressed (`to_worker`) messages carry it but are not held
    /// by it. A key is 1 to [`MAX_ID_BYTES`](crate::constant::MAX_ID_BYTES) bytes, or the
    /// send is refused with [`CoreError::InvalidParameter`]. Stored as the header
    /// [`MessageHeaders::KEY`].
    ///
    /// ```
    /// # use event_base_core::EMessage;
    /// let msg = EMessage::standard("payments", b"x".to_vec()).with_key("account-42");
    /// assert_eq!(msg.key(), Some("account-42"));
    /// ```
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.headers.insert(MessageHeaders::KEY, key);
        self
    }

    /// The message's ordering key, if it has one ([`with_key`](Self::with_key)).
    #[inline]
    pub fn key(&self) -> Option<&str> {
        if self.headers.is_empty() {
            return None;
        }
        self.headers.get(MessageHeaders::KEY)
    }

    /// Sets header `name` to `value` (replacing its value if set). See [`MessageHeaders`] for
    /// the names the bus reads itself.
    ///
    /// ```
    /// # use event_base_core::EMessage;
    /// let msg = EMessage::standard("orders", b"x".to_vec()).with_header("tenant", "acme");
    /// assert_eq!(msg.headers.get("tenant"), Some("acme"));
    /// ```
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name, value);
        self
    }

    /// Whether the message is due now (no `deliver_at`, or one in the past).
    pub fn is_due(&self, now: SystemTime) -> bool {
        self.deliver_at.is_none_or(|at| at <= now)
    }
}

/// Decoding a received message's JSON payload: `msg.decode_json::<T>()`.
///
/// (Encoding is [`EMessage::json`], which builds a message; the decoding side has a name of
/// its own so the two are not told apart by their arguments alone.)
pub trait JsonPayload {
    /// Decodes the payload as JSON into `T` (the same as [`EMessage::json_payload`]).
    fn decode_json<T: DeserializeOwned>(&self) -> Result<T, CoreError>;

    /// Decodes the payload as JSON.
    #[deprecated(
        since = "0.1.0",
        note = "`json` reads like the encoding `EMessage::json`; use `decode_json` (or `json_payload`)"
    )]
    fn json<T: DeserializeOwned>(&self) -> Result<T, CoreError> {
        self.decode_json()
    }
}

impl JsonPayload for EMessage {
    fn decode_json<T: DeserializeOwned>(&self) -> Result<T, CoreError> {
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

/// Anything a send turns into a message, where the turning may fail: every [`IntoMessage`]
/// (which cannot fail), and [`Json`](crate::Json) values, encoded on the way. What
/// `EventBus::send`, `TopicRouter::publish` and `send_msg!(topic, ..)` take.
///
/// A conversion that fails refuses the send with its error before anything is written.
pub trait TryIntoMessage {
    /// Turns `self` into a message for `topic`.
    fn try_into_message(self, topic: &MessageTopic) -> Result<EMessage, CoreError>;
}

impl<M: IntoMessage> TryIntoMessage for M {
    #[inline]
    fn try_into_message(self, topic: &MessageTopic) -> Result<EMessage, CoreError> {
        Ok(self.into_message(topic))
    }
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
