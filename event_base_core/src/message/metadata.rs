//! [`MessageMetadata`]: where a message came from and how it relates to others.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

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
    pub causation_id: Option<String>,
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
