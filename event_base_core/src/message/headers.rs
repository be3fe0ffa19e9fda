//! [`MessageHeaders`]: named text values that travel with a message (its ordering key, W3C
//! trace context, the application's own).

use serde::{Deserialize, Serialize};

/// Named text values that travel with a message: the one place for what the bus itself
/// carries beside the payload (the ordering key, W3C trace context) and for the application's
/// own headers.
///
/// A small map kept in insertion order: setting a name that is present replaces its value
/// in place. Names are compared exactly (case-sensitive). Empty headers cost nothing: no
/// allocation, and nothing is written for them in the WAL, in a Redis entry or on the wire.
///
/// Names the bus reads:
///
/// | name | constant | set with | what it does |
/// |---|---|---|---|
/// | `eb-key` | [`MessageHeaders::KEY`] | [`EMessage::with_key`](crate::EMessage::with_key) | order per key (see the guide's "Ordering and subscriptions") |
/// | `traceparent` | [`MessageHeaders::TRACEPARENT`] | the tracing integration | W3C trace context |
/// | `tracestate` | [`MessageHeaders::TRACESTATE`] | the tracing integration | W3C trace context |
///
/// Names beginning `eb-` are the bus's; others are the application's.
///
/// ```
/// use event_base_core::{EMessage, MessageHeaders};
///
/// let msg = EMessage::standard("orders", b"x".to_vec())
///     .with_key("customer-7")
///     .with_header("tenant", "acme");
/// assert_eq!(msg.key(), Some("customer-7"));
/// assert_eq!(msg.headers.get("tenant"), Some("acme"));
/// assert_eq!(msg.headers.get(MessageHeaders::KEY), Some("customer-7"));
/// assert_eq!(msg.headers.len(), 2);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MessageHeaders(Vec<(String, String)>);

impl MessageHeaders {
    /// The ordering key's name ([`EMessage::with_key`](crate::EMessage::with_key)).
    pub const KEY: &'static str = "eb-key";
    /// W3C trace context: the parent span of whoever handles the message.
    pub const TRACEPARENT: &'static str = "traceparent";
    /// W3C trace context: vendor-specific trace state.
    pub const TRACESTATE: &'static str = "tracestate";

    /// No headers.
    pub const fn new() -> Self {
        MessageHeaders(Vec::new())
    }

    /// The value of `name`, if set.
    #[inline]
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Sets `name` to `value`, replacing its value if it was set; returns the old value.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<String>) -> Option<String> {
        let name = name.into();
        let value = value.into();
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => Some(std::mem::replace(v, value)),
            None => {
                self.0.push((name, value));
                None
            }
        }
    }

    /// Removes `name`; returns its value if it was set.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        let at = self.0.iter().position(|(n, _)| n == name)?;
        Some(self.0.remove(at).1)
    }

    /// How many headers are set.
    #[inline]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none is set.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The headers as `(name, value)`, in the order they were first set.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }
}

impl<N: Into<String>, V: Into<String>> FromIterator<(N, V)> for MessageHeaders {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        let mut headers = MessageHeaders::new();
        for (n, v) in iter {
            headers.insert(n, v);
        }
        headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setting_a_name_again_replaces_its_value_in_place() {
        let mut h = MessageHeaders::new();
        assert_eq!(h.insert("a", "1"), None);
        assert_eq!(h.insert("b", "2"), None);
        assert_eq!(h.insert("a", "3"), Some("1".to_owned()));
        assert_eq!(h.iter().collect::<Vec<_>>(), vec![("a", "3"), ("b", "2")]);
        assert_eq!(h.remove("a"), Some("3".to_owned()));
        assert_eq!(h.get("a"), None);
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn headers_are_json_pairs_and_read_back_equal() {
        let h: MessageHeaders = [("eb-key", "k")].into_iter().collect();
        let text = serde_json::to_string(&h).unwrap();
        assert_eq!(text, r#"[["eb-key","k"]]"#);
        assert_eq!(serde_json::from_str::<MessageHeaders>(&text).unwrap(), h);
    }
}
