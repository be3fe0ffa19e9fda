//! [`Json<T>`]: a payload as a typed value, encoded and decoded with `serde_json`.
//!
//! The same wrapper works both ways:
//!
//! - receiving: a `#[handler]` parameter `order: Json<Order>` is the payload decoded into an
//!   `Order`. A payload that does not decode is a dead letter at once (bad input does not get
//!   better with retries) whose [`DeadReason::Other`] text names the type and serde's message;
//!   the handler function does not run. By hand: [`Json::decode`].
//! - sending: `Json(&order)` is a [`TryIntoMessage`], so `bus.send(topic, Json(&order))`,
//!   `router.publish(..)` and `send_msg!(topic, Json(&order))` encode it into a standard
//!   message, or refuse the send with [`CoreError::Encode`] if it does not serialize.

use std::ops::{Deref, DerefMut};

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::message::ack::{Ack, DeadReason};
use crate::message::emessage::{EMessage, TryIntoMessage};
use crate::message::topic::MessageTopic;

/// A payload as a value of `T`, in JSON.
///
/// ```
/// use event_base_core::{EMessage, Json, MessageTopic, TryIntoMessage};
///
/// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
/// struct Order { id: u32 }
///
/// // Sending side: `Json(&value)` becomes a message.
/// let msg = Json(&Order { id: 7 }).try_into_message(&MessageTopic::from("orders")).unwrap();
/// assert_eq!(msg.payload.as_bytes(), br#"{"id":7}"#);
///
/// // Receiving side: what a `Json<Order>` handler parameter gets.
/// let Json(order) = Json::<Order>::decode(&msg).unwrap();
/// assert_eq!(order, Order { id: 7 });
///
/// // A payload that is not an `Order` is an error naming the type.
/// let bad = EMessage::standard("orders", "not json");
/// let err = Json::<Order>::decode(&bad).unwrap_err();
/// assert!(err.to_string().contains("Order"), "{err}");
/// ```
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Json<T>(pub T);

impl<T> Json<T> {
    /// The value inside.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<'de, T: Deserialize<'de>> Json<T> {
    /// Decodes `msg`'s payload as JSON into `T`; fails with [`CoreError::Decode`] naming `T`
    /// (its source is serde's message). `T` may borrow from the payload (`&'de str` fields).
    pub fn decode(msg: &'de EMessage) -> Result<Self, CoreError> {
        serde_json::from_slice(msg.payload.as_bytes())
            .map(Json)
            .map_err(|source| CoreError::Decode {
                what: std::any::type_name::<T>().to_owned(),
                source,
            })
    }
}

impl<T> Deref for Json<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for Json<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<T> From<T> for Json<T> {
    fn from(value: T) -> Self {
        Json(value)
    }
}

/// `Json(value)` (or `Json(&value)`) as a standard message whose payload is the value in
/// JSON; a value that does not serialize (a map with non-string keys, a `Serialize` impl that
/// fails) is [`CoreError::Encode`].
impl<T: Serialize> TryIntoMessage for Json<T> {
    fn try_into_message(self, topic: &MessageTopic) -> Result<EMessage, CoreError> {
        let bytes = serde_json::to_vec(&self.0).map_err(CoreError::Encode)?;
        Ok(EMessage::standard(topic.clone(), bytes))
    }
}

/// What a `Json<T>` parameter of a `#[handler]` gets: the payload decoded, or the answer
/// that dead-letters the message at once, with a reason naming `T` and serde's message.
/// Called by the macro's expansion; not part of the API.
#[doc(hidden)]
pub fn decode_param<'de, T: Deserialize<'de>>(msg: &'de EMessage) -> Result<Json<T>, Ack> {
    Json::decode(msg).map_err(|e| {
        let text = match &e {
            CoreError::Decode { source, .. } => format!("{e}: {source}"),
            other => other.to_string(),
        };
        Ack::Dead {
            dead_reason: DeadReason::Other(text),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Order<'a> {
        id: u32,
        note: &'a str,
    }

    #[test]
    fn a_payload_that_does_not_decode_is_dead_with_the_type_and_serdes_message() {
        let msg = EMessage::standard("orders", r#"{"note":"x"}"#);
        match decode_param::<Order<'_>>(&msg) {
            Err(Ack::Dead {
                dead_reason: DeadReason::Other(text),
            }) => {
                assert!(text.contains(std::any::type_name::<Order<'_>>()), "{text}");
                assert!(text.contains("missing field `id`"), "{text}");
            }
            other => panic!("expected a dead answer, got {other:?}"),
        }
    }

    #[test]
    fn decoding_may_borrow_from_the_payload() {
        let msg = EMessage::standard("orders", r#"{"id":1,"note":"fragile"}"#);
        let Json(order) = decode_param::<Order<'_>>(&msg).unwrap();
        assert_eq!(
            order,
            Order {
                id: 1,
                note: "fragile"
            }
        );
    }

    #[test]
    fn a_value_that_does_not_serialize_is_an_encode_error() {
        let map = std::collections::HashMap::from([((1u8, 2u8), "v")]);
        let err = Json(&map)
            .try_into_message(&MessageTopic::from("t"))
            .unwrap_err();
        assert!(matches!(err, CoreError::Encode(_)), "{err:?}");
    }
}
