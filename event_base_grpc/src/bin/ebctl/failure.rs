//! Why a command failed, and the exit code each reason maps to (listed in `ebctl --help`).

use event_base_grpc::GrpcError;
use tonic::Code;

/// A failed command.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The server answered with an error.
    Status(tonic::Status),
    /// The server could not be reached.
    Unreachable(String),
    /// Local configuration is wrong (address, file, token).
    Config(String),
    /// A destructive command was not confirmed.
    Refused(String),
    /// A bulk operation finished with some items failed.
    Partial(String),
}

impl Failure {
    /// The process exit code.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Failure::Status(s) => code_exit(s.code()),
            Failure::Unreachable(_) => 69,
            Failure::Config(_) => 78,
            Failure::Refused(_) => 1,
            Failure::Partial(_) => 3,
        }
    }

    /// What to print on stderr.
    pub(crate) fn message(&self) -> String {
        match self {
            Failure::Status(s) => format!(
                "ebctl: {} ({})",
                with_commands(s.message()),
                event_base_grpc::code_name(s.code())
            ),
            Failure::Unreachable(m)
            | Failure::Config(m)
            | Failure::Refused(m)
            | Failure::Partial(m) => format!("ebctl: {m}"),
        }
    }
}

impl Failure {
    /// A call that failed in the transport (no gRPC answer: the connection broke, or the
    /// server never answered HTTP/2) becomes "cannot reach `addr`", naming the server. A
    /// status the server sent is left as it is.
    pub(crate) fn naming_server(self, addr: &str) -> Self {
        match self {
            Failure::Status(s)
                if matches!(s.code(), Code::Unavailable | Code::Unknown)
                    && std::error::Error::source(&s).is_some() =>
            {
                Failure::Unreachable(format!(
                    "no gRPC answer from {addr} ({}); is the event_base management API \
                     listening there, and over plain text or TLS as the address says?",
                    s.message()
                ))
            }
            other => other,
        }
    }
}

/// What ebctl says instead of the Rust calls the bus's messages name.
const COMMAND_FOR_CALL: &[(&str, &str)] = &[
    ("EventBus::dead_letters", "`ebctl dlq list`"),
    ("EventBus::workers(topic)", "`ebctl workers`"),
    ("EventBus::router().topics()", "`ebctl topics`"),
];

/// `message` with each Rust call it names replaced by the ebctl command that does the same.
fn with_commands(message: &str) -> String {
    COMMAND_FOR_CALL
        .iter()
        .fold(message.to_owned(), |text, (call, command)| {
            text.replace(call, command)
        })
}

/// The exit code of a gRPC status code (sysexits classes).
pub(crate) fn code_exit(code: Code) -> u8 {
    match code {
        Code::Ok => 0,
        Code::InvalidArgument
        | Code::NotFound
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::AlreadyExists => 65,
        Code::Unavailable => 69,
        Code::Internal | Code::Unknown | Code::DataLoss | Code::Unimplemented => 70,
        Code::DeadlineExceeded | Code::ResourceExhausted | Code::Aborted | Code::Cancelled => 75,
        Code::Unauthenticated | Code::PermissionDenied => 77,
    }
}

impl From<tonic::Status> for Failure {
    fn from(s: tonic::Status) -> Self {
        // A transport failure mid-call (connection refused, reset) arrives as UNAVAILABLE
        // or UNKNOWN with a transport source: that is "cannot reach", not a server answer.
        Failure::Status(s)
    }
}

impl From<GrpcError> for Failure {
    fn from(e: GrpcError) -> Self {
        let text = event_base_grpc_error_text(&e);
        match e {
            GrpcError::Connect { .. } | GrpcError::Transport(_) => Failure::Unreachable(text),
            _ => Failure::Config(text),
        }
    }
}

/// An error's message and its causes on one line.
fn event_base_grpc_error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_hints_name_ebctl_commands() {
        // The bus's own message, as the server sends it.
        let error = event_base_core::CoreError::NotFound("x".to_owned());
        let status = tonic::Status::not_found(error.to_string());
        let message = Failure::Status(status).message();
        assert!(message.contains("`ebctl dlq list`"), "{message}");
        assert!(!message.contains("EventBus::"), "{message}");

        let error = event_base_core::CoreError::UnknownHandler {
            topic: "signup".to_owned(),
            handler: "nobody".to_owned(),
            handlers: vec!["mailer".to_owned()],
        };
        let message = Failure::Status(tonic::Status::not_found(error.to_string())).message();
        assert!(message.contains("[mailer]"), "{message}");
        assert!(message.contains("`ebctl topics`"), "{message}");
        assert!(!message.contains("EventBus::"), "{message}");
    }
}
