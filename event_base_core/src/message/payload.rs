//! [`MessagePayload`]: the message body, shared and never copied.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

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
