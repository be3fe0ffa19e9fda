//! Every [`CoreError`] as one gRPC status code, with the error's own message (what happened
//! and what to do) and its causes, never its `Debug` form.
//!
//! | `CoreError` | code |
//! |---|---|
//! | `NotFound`, `UnknownHandler` | `NOT_FOUND` |
//! | `InvalidTopic`, `ReservedTopic`, `InvalidId`, `Config`, `Encode`, `Decode`, `Wal(RecordTooLarge)` | `INVALID_ARGUMENT` |
//! | `NoHandler`, `UnknownWorker`, `AlreadyStarted`, `Queue(AmbiguousNode)` | `FAILED_PRECONDITION` |
//! | `QueueFull`, `Queue(Full)` | `RESOURCE_EXHAUSTED` |
//! | `Timeout`, `IdleTimeout` | `DEADLINE_EXCEEDED` |
//! | `SystemShutdown`, `NotStarted`, `Queue(Closed)` | `UNAVAILABLE` |
//! | `Wal(..)`, `Queue(Backend)`, `Internal`, `NoRuntime`, `ShutdownFlush`, anything newer | `INTERNAL` |

use event_base_core::{CoreError, QueueError, WalError};
use tonic::{Code, Status};

/// The gRPC code a [`CoreError`] maps to (see the module docs for the table).
///
/// ```
/// use event_base_core::CoreError;
/// use tonic::Code;
/// assert_eq!(event_base_grpc::code_for(&CoreError::NotFound("x".into())), Code::NotFound);
/// assert_eq!(event_base_grpc::code_for(&CoreError::SystemShutdown), Code::Unavailable);
/// ```
pub fn code_for(error: &CoreError) -> Code {
    match error {
        CoreError::NotFound(_) | CoreError::UnknownHandler { .. } => Code::NotFound,
        CoreError::InvalidTopic { .. }
        | CoreError::ReservedTopic(_)
        | CoreError::InvalidId { .. }
        | CoreError::Config(_)
        | CoreError::Encode(_)
        | CoreError::Decode { .. }
        | CoreError::Wal(WalError::RecordTooLarge { .. }) => Code::InvalidArgument,
        CoreError::NoHandler { .. }
        | CoreError::UnknownWorker { .. }
        | CoreError::AlreadyStarted
        | CoreError::Queue(QueueError::AmbiguousNode { .. }) => Code::FailedPrecondition,
        CoreError::QueueFull { .. } | CoreError::Queue(QueueError::Full(_)) => {
            Code::ResourceExhausted
        }
        CoreError::Timeout { .. } | CoreError::IdleTimeout { .. } => Code::DeadlineExceeded,
        CoreError::SystemShutdown
        | CoreError::NotStarted
        | CoreError::Queue(QueueError::Closed(_)) => Code::Unavailable,
        _ => Code::Internal,
    }
}

/// A [`CoreError`] as a [`Status`]: the code of [`code_for`], and the error's message
/// followed by its causes (`message: cause: cause`).
pub fn status_for(error: &CoreError) -> Status {
    Status::new(code_for(error), message_of(error))
}

/// An error's message and the chain of its sources, on one line.
pub(crate) fn message_of(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // `#[error(transparent)]` repeats its source's message: say it once.
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// `.map_err(core)` on a core result.
pub(crate) fn core(error: CoreError) -> Status {
    status_for(&error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_core_error_has_its_code_and_message() {
        let io = std::io::Error::other("disk on fire");
        let cases: Vec<(CoreError, Code)> = vec![
            (CoreError::NotFound("m1".into()), Code::NotFound),
            (CoreError::NotStarted, Code::Unavailable),
            (CoreError::AlreadyStarted, Code::FailedPrecondition),
            (CoreError::SystemShutdown, Code::Unavailable),
            (
                CoreError::NoHandler { topic: "t".into() },
                Code::FailedPrecondition,
            ),
            (
                CoreError::UnknownWorker {
                    topic: "t".into(),
                    worker: "w".into(),
                },
                Code::FailedPrecondition,
            ),
            (
                CoreError::Queue(QueueError::AmbiguousNode {
                    topic: "t".into(),
                    handler: "h".into(),
                    name: "b".into(),
                    ids: vec!["1-aaaaaaaaaaaa".into(), "2-bbbbbbbbbbbb".into()],
                }),
                Code::FailedPrecondition,
            ),
            (
                CoreError::InvalidTopic {
                    topic: String::new(),
                    reason: "empty",
                },
                Code::InvalidArgument,
            ),
            (
                CoreError::ReservedTopic("_system.x".into()),
                Code::InvalidArgument,
            ),
            (
                CoreError::QueueFull { topic: "t".into() },
                Code::ResourceExhausted,
            ),
            (
                CoreError::IdleTimeout {
                    in_flight: 1,
                    shared: None,
                    after: Duration::from_secs(1),
                },
                Code::DeadlineExceeded,
            ),
            (CoreError::NoRuntime, Code::Internal),
            (
                CoreError::Timeout {
                    operation: "send".into(),
                    after: Duration::from_secs(1),
                },
                Code::DeadlineExceeded,
            ),
            (CoreError::Config("bad".into()), Code::InvalidArgument),
            (
                CoreError::InvalidId {
                    id: String::new(),
                    len: 0,
                    max: 255,
                },
                Code::InvalidArgument,
            ),
            (
                CoreError::Wal(WalError::RecordTooLarge {
                    id: "m".into(),
                    size: 10,
                    limit: 5,
                }),
                Code::InvalidArgument,
            ),
            (
                CoreError::Wal(WalError::Io {
                    path: "/wal".into(),
                    source: io,
                }),
                Code::Internal,
            ),
            (
                CoreError::Queue(QueueError::Full("t".into())),
                Code::ResourceExhausted,
            ),
            (
                CoreError::Queue(QueueError::Closed("t".into())),
                Code::Unavailable,
            ),
            (CoreError::Internal("boom".into()), Code::Internal),
        ];
        for (error, code) in cases {
            let status = status_for(&error);
            assert_eq!(status.code(), code, "{error}");
            assert!(
                status.message().starts_with(&error.to_string()),
                "the message is the error's own: {}",
                status.message()
            );
        }
    }

    #[test]
    fn an_unknown_handler_is_not_found_naming_the_topics_handlers() {
        let error = CoreError::UnknownHandler {
            topic: "signup".into(),
            handler: "nobody".into(),
            handlers: vec!["mailer".into(), "crm".into()],
        };
        let status = status_for(&error);
        assert_eq!(status.code(), Code::NotFound);
        assert!(
            status.message().contains("[mailer, crm]"),
            "{}",
            status.message()
        );
    }

    #[test]
    fn causes_follow_the_message() {
        let error = CoreError::Wal(WalError::Io {
            path: "/wal/00000001.log".into(),
            source: std::io::Error::other("disk on fire"),
        });
        assert_eq!(
            status_for(&error).message(),
            "WAL I/O error on /wal/00000001.log: disk on fire"
        );
    }
}
