//! [`MessageTopic`]: the name of a topic.

use std::fmt;

use serde::{Deserialize, Serialize};

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
