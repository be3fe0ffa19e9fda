//! What a handler answers: [`Ack`], and why a message died: [`DeadReason`].
//!
//! | answer | what the bus does |
//! |---|---|
//! | `Ack::Ack` | the message is complete; its WAL record is finished |
//! | `Ack::NoAck { retry_after, max_retries }` | delivered again after `retry_after` (or at once), at most `1 + max_retries` deliveries in all, then a dead letter with [`DeadReason::MaxRetriesExceeded`] |
//! | [`Ack::retry()`](Ack::retry), [`Ack::retry_after(d)`](Ack::retry_after) | `NoAck` with the handler's own `retries` (`#[handler(retries = n)]`, default 3) as `max_retries` |
//! | `Ack::Dead { dead_reason }` | a dead letter at once |
//!
//! A panic or a timeout in the handler, and an `Err` from a handler function that returns a
//! `Result` (see [`IntoAck`](crate::IntoAck)), count as a failed delivery and follow the
//! handler's retry policy (by default 3 retries with a backoff from 100 ms, doubling).
//!
//! `#[handler(retries = n)]` is that policy: the limit for panics, timeouts and `Err`s, and
//! what the shorthands put into the `NoAck` they make. A `NoAck` written out in full means
//! exactly what it says: `Ack::NoAck { retry_after: None, max_retries: 5 }` allows five
//! retries whatever the handler's `retries`.
//!
//! ```
//! use event_base_core::Ack;
//! // Outside a handler the shorthand uses the default, 3.
//! assert_eq!(Ack::retry(), Ack::NoAck { retry_after: None, max_retries: 3 });
//! ```

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::message::context::handler_retries;

/// A handler's verdict on one delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ack {
    /// Done: the message is complete.
    Ack,
    /// Not done: deliver again.
    NoAck {
        /// Wait this long before the next delivery (`None`: at once).
        retry_after: Option<Duration>,
        /// Retries allowed after the first delivery: the message is delivered at most
        /// `1 + max_retries` times in all. [`Ack::retry`] fills in the handler's `retries`.
        max_retries: u32,
    },
    /// Give up: dead-letter the message now.
    Dead {
        /// Why; use [`DeadReason::Explicit`] when the handler simply refuses it.
        dead_reason: DeadReason,
    },
}

impl Ack {
    /// `NoAck`, delivered again at once (or after the handler's backoff), with the retry limit
    /// of the handler that answers it: its `retries` (`#[handler(retries = n)]`,
    /// `HandlerSpec::retries`), else 3. Outside a handler's task the limit is 3.
    pub fn retry() -> Ack {
        Ack::NoAck {
            retry_after: None,
            max_retries: handler_retries(),
        }
    }

    /// `NoAck` delivered again after `delay`, with the handler's retry limit as
    /// [`Ack::retry`] has it.
    pub fn retry_after(delay: Duration) -> Ack {
        Ack::NoAck {
            retry_after: Some(delay),
            max_retries: handler_retries(),
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
    /// Anything else, e.g. `"panic: index out of bounds"`, the text of a handler's last `Err`,
    /// or a `Json<T>` payload that did not decode (naming `T` and serde's message).
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
