//! The one place that turns how a delivery ended into what happens to the message next.
//!
//! [`decide`] is policy only (how many attempts, how long to wait); the worker carries the
//! [`Decision`] out (`worker/mod.rs`: WAL state, counters, audit, the scheduler). Keeping them
//! apart lets the policy be read, and tested, without a running bus.

use std::time::Duration;

use crate::constant::DEFAULT_MAX_RETRIES;
use crate::handler::backoff::Backoff;
use crate::message::ack::{Ack, DeadReason};

/// How one delivery ended, before policy is applied.
pub(crate) enum Outcome {
    /// The handler (or a middleware) answered.
    Answered(Ack),
    /// The handler panicked, with this message.
    Panicked(String),
    /// The handler ran past its `timeout`.
    TimedOut,
    /// The handler returned `Err` with this text (see `IntoAck`); `retry_after` is the wait a
    /// middleware put on the `NoAck` that carried it, if any.
    Failed {
        text: String,
        retry_after: Option<Duration>,
    },
}

/// What happens to the message next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    /// Done: the WAL record completes.
    Complete,
    /// Deliver again after `delay`; `reason` says why when the handler did not answer.
    Retry {
        delay: Duration,
        reason: Option<String>,
    },
    /// A dead letter now.
    Dead(DeadReason),
}

/// The retry policy of one handler: `#[handler(retries = n)]` and its backoff.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    /// Retries after the first delivery (default [`DEFAULT_MAX_RETRIES`]): the limit for
    /// panics, timeouts and `Err` returns. (`NoAck` carries its own limit.)
    pub(crate) retries: Option<u32>,
    /// Backoff between failed attempts; `NoAck` without `retry_after` and no backoff retries
    /// at once.
    pub(crate) backoff: Option<Backoff>,
}

/// Decides what a delivery's `outcome` means for a message delivered `attempts` times so far
/// (the first delivery is attempt 1).
pub(crate) fn decide(outcome: Outcome, attempts: u32, policy: RetryPolicy) -> Decision {
    match outcome {
        Outcome::Answered(Ack::Ack) => Decision::Complete,
        Outcome::Answered(Ack::NoAck {
            retry_after,
            max_retries,
        }) => {
            // The answer's own limit, as written (`Ack::retry()` filled in the handler's).
            if attempts > max_retries {
                return Decision::Dead(DeadReason::MaxRetriesExceeded);
            }
            let delay = match (retry_after, policy.backoff) {
                (Some(d), _) => d,
                (None, Some(b)) => b.delay(attempts),
                (None, None) => Duration::ZERO,
            };
            Decision::Retry {
                delay,
                reason: None,
            }
        }
        Outcome::Answered(Ack::Dead { dead_reason }) => Decision::Dead(dead_reason),
        Outcome::Panicked(text) => failed(
            DeadReason::Other(format!("panic: {text}")),
            attempts,
            policy,
        ),
        Outcome::TimedOut => failed(DeadReason::Timeout, attempts, policy),
        Outcome::Failed { text, retry_after } => {
            match failed(DeadReason::Other(text), attempts, policy) {
                Decision::Retry { delay, reason } => Decision::Retry {
                    delay: retry_after.unwrap_or(delay),
                    reason,
                },
                dead => dead,
            }
        }
    }
}

/// A panic, a timeout or an `Err`: retried with backoff while retries remain, then dead for
/// `reason`.
fn failed(reason: DeadReason, attempts: u32, policy: RetryPolicy) -> Decision {
    let max = policy.retries.unwrap_or(DEFAULT_MAX_RETRIES);
    if attempts > max {
        return Decision::Dead(reason);
    }
    Decision::Retry {
        delay: policy.backoff.unwrap_or_default().delay(attempts),
        reason: Some(reason.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_BACKOFF: RetryPolicy = RetryPolicy {
        retries: Some(2),
        backoff: None,
    };

    fn no_ack(max_retries: u32) -> Outcome {
        Outcome::Answered(Ack::NoAck {
            retry_after: None,
            max_retries,
        })
    }

    #[test]
    fn ack_completes_and_dead_is_dead_at_once() {
        assert_eq!(
            decide(Outcome::Answered(Ack::Ack), 1, NO_BACKOFF),
            Decision::Complete
        );
        let dead = Outcome::Answered(Ack::Dead {
            dead_reason: DeadReason::Other("bad input".into()),
        });
        assert_eq!(
            decide(dead, 1, NO_BACKOFF),
            Decision::Dead(DeadReason::Other("bad input".into()))
        );
    }

    #[test]
    fn no_ack_retries_up_to_its_own_limit_whatever_the_handlers() {
        // max_retries 5 with a handler allowing 2: the answer's 5 holds.
        assert!(matches!(
            decide(no_ack(5), 5, NO_BACKOFF),
            Decision::Retry { .. }
        ));
        assert_eq!(
            decide(no_ack(5), 6, NO_BACKOFF),
            Decision::Dead(DeadReason::MaxRetriesExceeded)
        );
        // max_retries 0: the first delivery was the only one.
        assert_eq!(
            decide(no_ack(0), 1, NO_BACKOFF),
            Decision::Dead(DeadReason::MaxRetriesExceeded)
        );
    }

    #[test]
    fn no_ack_waits_retry_after_else_the_backoff_else_nothing() {
        let after = Outcome::Answered(Ack::NoAck {
            retry_after: Some(Duration::from_millis(250)),
            max_retries: 3,
        });
        assert_eq!(
            decide(after, 1, NO_BACKOFF),
            Decision::Retry {
                delay: Duration::from_millis(250),
                reason: None
            }
        );
        assert_eq!(
            decide(no_ack(3), 1, NO_BACKOFF),
            Decision::Retry {
                delay: Duration::ZERO,
                reason: None
            }
        );
        let fixed = Backoff::fixed(Duration::from_millis(40));
        let with_backoff = RetryPolicy {
            retries: Some(2),
            backoff: Some(fixed),
        };
        assert_eq!(
            decide(no_ack(3), 1, with_backoff),
            Decision::Retry {
                delay: fixed.delay(1),
                reason: None
            }
        );
    }

    #[test]
    fn panics_and_timeouts_retry_under_the_handlers_limit_with_a_reason() {
        match decide(Outcome::Panicked("boom".into()), 1, NO_BACKOFF) {
            Decision::Retry { reason, .. } => assert_eq!(reason.as_deref(), Some("panic: boom")),
            other => panic!("expected a retry, got {other:?}"),
        }
        assert_eq!(
            decide(Outcome::Panicked("boom".into()), 3, NO_BACKOFF),
            Decision::Dead(DeadReason::Other("panic: boom".into()))
        );
        assert_eq!(
            decide(Outcome::TimedOut, 3, NO_BACKOFF),
            Decision::Dead(DeadReason::Timeout)
        );
        let default = RetryPolicy {
            retries: None,
            backoff: None,
        };
        let last_retry = DEFAULT_MAX_RETRIES;
        assert!(matches!(
            decide(Outcome::TimedOut, last_retry, default),
            Decision::Retry { .. }
        ));
        assert_eq!(
            decide(Outcome::TimedOut, last_retry + 1, default),
            Decision::Dead(DeadReason::Timeout)
        );
    }

    fn failed_with(text: &str, retry_after: Option<Duration>) -> Outcome {
        Outcome::Failed {
            text: text.into(),
            retry_after,
        }
    }

    #[test]
    fn an_err_is_a_failed_delivery_with_its_text_kept() {
        // Retried under the handler's limit and backoff (the default one here), the text as
        // the reason, whatever the carrying NoAck's own limit was.
        let default_backoff = RetryPolicy {
            retries: Some(2),
            backoff: None,
        };
        assert_eq!(
            decide(failed_with("db down", None), 1, default_backoff),
            Decision::Retry {
                delay: Backoff::default().delay(1),
                reason: Some("db down".into())
            }
        );
        assert_eq!(
            decide(failed_with("db down", None), 3, default_backoff),
            Decision::Dead(DeadReason::Other("db down".into()))
        );
        // A wait a middleware put on the NoAck holds.
        let after = Duration::from_millis(7);
        assert_eq!(
            decide(failed_with("db down", Some(after)), 2, default_backoff),
            Decision::Retry {
                delay: after,
                reason: Some("db down".into())
            }
        );
    }
}
