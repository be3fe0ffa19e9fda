//! What a handler answers: [`Ack`], and why a message died: [`DeadReason`].
//!
//! | answer | what the bus does |
//! |---|---|
//! | `Ack::Ack` | the message is complete; its WAL record is finished |
//! | `Ack::NoAck { retry_after, max_retries }` | delivered again after `retry_after` (or at once), at most `1 + max_retries` deliveries in all, then a dead letter with [`DeadReason::MaxRetriesExceeded`] |
//! | `Ack::Dead { dead_reason }` | a dead letter at once |
//!
//! A panic or a timeout in the handler counts as a failed delivery and follows the handler's
//! retry policy (by default 3 retries with a backoff from 100 ms, doubling).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A handler's verdict on one delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ack {
    /// Done: the message is complete.
    Ack,
    /// Not done: deliver again.
    NoAck {
        /// Wait this long before the next delivery (`None`: at once).
        retry_after: Option<Duration>,
        /// Retries allowed after the first delivery (`None`: the handler's `retries`, else 3).
        max_retries: Option<u32>,
    },
    /// Give up: dead-letter the message now.
    Dead {
        /// Why; use [`DeadReason::Explicit`] when the handler simply refuses it.
        dead_reason: DeadReason,
    },
}

impl Ack {
    /// `NoAck` with the handler's default policy, delivered again at once.
    pub fn retry() -> Ack {
        Ack::NoAck {
            retry_after: None,
            max_retries: None,
        }
    }

    /// `NoAck` delivered again after `delay`.
    pub fn retry_after(delay: Duration) -> Ack {
        Ack::NoAck {
            retry_after: Some(delay),
            max_retries: None,
        }
    }

    /// `Dead` with [`DeadReason::Explicit`].
    pub fn dead() -> Ack {
        Ack::Dead {
            dead_reason: DeadReason::Explicit,
        }
    }

    /// A short name of the outcome, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Ack::Ack => "ack",
            Ack::NoAck { .. } => "no_ack",
            Ack::Dead { .. } => "dead",
        }
    }
}

/// Why a message became a dead letter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DeadReason {
    /// The handler answered `Ack::Dead` with no more specific reason.
    Explicit,
    /// `NoAck` (or panics/timeouts) used up the allowed retries.
    MaxRetriesExceeded,
    /// The handler ran past its `timeout` on its last allowed delivery.
    Timeout,
    /// No handler is registered for the message's topic (seen on replay).
    NoHandler,
    /// The message named a worker (`to_worker`) that does not exist.
    UnknownWorker(String),
    /// Anything else, e.g. `"panic: index out of bounds"`.
    Other(String),
}

impl fmt::Display for DeadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeadReason::Explicit => f.write_str("dead-lettered by the handler"),
            DeadReason::MaxRetriesExceeded => f.write_str("maximum retries exceeded"),
            DeadReason::Timeout => f.write_str("handler timed out"),
            DeadReason::NoHandler => f.write_str("no handler for the topic"),
            DeadReason::UnknownWorker(w) => write!(f, "unknown worker `{w}`"),
            DeadReason::Other(s) => f.write_str(s),
        }
    }
}
