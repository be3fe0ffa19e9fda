//! [`IntoAck`]: what a `#[handler]` function may return, turned into the [`Ack`] the bus acts
//! on.
//!
//! | returned | the bus does |
//! |---|---|
//! | `Ack` | what the `Ack` says |
//! | `Ok(())` | `Ack::Ack` |
//! | `Ok(ack)` (from `Result<Ack, E>`) | what `ack` says |
//! | `Err(e)` | a failed delivery, as a panic is: retried under the handler's `retries` and backoff, then a dead letter with `DeadReason::Other(e.to_string())` |
//!
//! How an `Err` reaches the worker: `into_ack` keeps `e.to_string()` in the delivery's
//! context (the task-local that also holds the message being handled) and answers
//! `Ack::NoAck`. When the answer that comes out of the middleware is still a `NoAck`, the
//! worker takes the text from the context and treats the delivery as failed. An `Ack::Ack`
//! answer never looks at the context, so handlers that return `Ack` pay nothing for this.

use std::fmt::Display;

use crate::message::ack::Ack;
use crate::message::context::{handler_retries, report_failure};

/// What a handler function returns: `Ack`, `Result<(), E>` or `Result<Ack, E>` with
/// `E: Display`.
///
/// `#[handler]` calls it on the function's result. A hand-written
/// [`EHandler`](crate::EHandler) can call it too, to report a failed delivery with a text:
///
/// ```
/// use event_base_core::{async_trait, Ack, EHandler, EMessage, IntoAck};
///
/// struct Store;
///
/// impl Store {
///     async fn save(&self, _msg: &EMessage) -> Result<(), std::io::Error> {
///         Err(std::io::Error::other("disk full"))
///     }
/// }
///
/// #[async_trait]
/// impl EHandler for Store {
///     async fn handler(&self, msg: &EMessage) -> Ack {
///         // Err: retried like a panic, then dead-lettered with "disk full".
///         self.save(msg).await.into_ack()
///     }
/// }
/// ```
///
/// Outside a handler's task (a handler function called directly, in a unit test) an `Err`
/// is `Ack::NoAck` with the default retry limit, and its text goes nowhere.
#[diagnostic::on_unimplemented(
    message = "a handler returns `Ack`, `Result<(), E>` or `Result<Ack, E>` with `E: Display`, not `{Self}`",
    label = "not a handler's answer",
    note = "return an `Ack`, or a `Result` whose `Ok` is `()` or `Ack` and whose error implements `Display`"
)]
pub trait IntoAck {
    /// The answer this value stands for.
    fn into_ack(self) -> Ack;
}

impl IntoAck for Ack {
    #[inline]
    fn into_ack(self) -> Ack {
        self
    }
}

impl<E: Display> IntoAck for Result<(), E> {
    #[inline]
    fn into_ack(self) -> Ack {
        match self {
            Ok(()) => Ack::Ack,
            Err(e) => failed(e.to_string()),
        }
    }
}

impl<E: Display> IntoAck for Result<Ack, E> {
    #[inline]
    fn into_ack(self) -> Ack {
        match self {
            Ok(Ack::Ack) => Ack::Ack,
            Ok(ack) => {
                // A `NoAck` the handler chose means what it says, whatever an earlier run of
                // the handler in this delivery (a middleware that calls it twice) reported.
                report_failure(None);
                ack
            }
            Err(e) => failed(e.to_string()),
        }
    }
}

/// A failed delivery with `text`: kept in the context for the worker, answered as `NoAck`.
#[cold]
fn failed(text: String) -> Ack {
    report_failure(Some(text));
    Ack::NoAck {
        retry_after: None,
        max_retries: handler_retries(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constant::DEFAULT_MAX_RETRIES;

    #[test]
    fn ok_answers_pass_through_and_err_is_no_ack_outside_a_handler() {
        assert_eq!(Ack::dead().into_ack(), Ack::dead());
        assert_eq!(Ok::<(), String>(()).into_ack(), Ack::Ack);
        assert_eq!(Ok::<Ack, String>(Ack::retry()).into_ack(), Ack::retry());
        let no_ack = Ack::NoAck {
            retry_after: None,
            max_retries: DEFAULT_MAX_RETRIES,
        };
        assert_eq!(Err::<(), _>("boom").into_ack(), no_ack);
        assert_eq!(Err::<Ack, _>("boom").into_ack(), no_ack);
    }
}
