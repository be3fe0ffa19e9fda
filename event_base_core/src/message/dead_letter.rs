//! [`DeadLetterMessage`]: a message the bus gave up on, with the reason.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::message::ack::DeadReason;
use crate::message::emessage::EMessage;

/// A dead letter: kept in the WAL (state `Failed`) until replayed or purged, and announced on
/// [`DEAD_LETTER`](crate::constant::DEAD_LETTER).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetterMessage {
    /// The message as of its last delivery.
    pub message: EMessage,
    /// Why it died.
    pub reason: DeadReason,
    /// Deliveries made before it died.
    pub attempts: u32,
    /// When it died.
    pub died_at: SystemTime,
    /// The handlers whose copy died (each handler of a topic has its own copy of every
    /// message); empty when it died before reaching one, e.g. [`DeadReason::NoHandler`].
    /// Replaying the dead letter delivers it to these handlers only.
    #[serde(default)]
    pub handlers: Vec<String>,
}
