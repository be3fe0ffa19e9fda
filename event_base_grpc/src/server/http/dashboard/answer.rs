//! How the dashboard's endpoints answer: JSON on success, and a gRPC [`Status`] from the shared
//! admin code turned into the matching HTTP status with a JSON body
//! `{"error": "<what happened and what to do>", "code": "NOT_FOUND"}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tonic::{Code, Status};

/// What an endpoint answers.
pub(super) type Answer = Result<Json<Value>, Failure>;

/// A refused or failed request: a [`Status`] from the admin code, answered as HTTP.
#[derive(Debug)]
pub(super) struct Failure(pub(super) Status);

impl From<Status> for Failure {
    fn from(status: Status) -> Self {
        Failure(status)
    }
}

impl From<event_base_core::CoreError> for Failure {
    fn from(error: event_base_core::CoreError) -> Self {
        Failure(crate::status_for(&error))
    }
}

impl Failure {
    /// `400` with `why`.
    pub(super) fn bad_request(why: impl Into<String>) -> Self {
        Failure(Status::invalid_argument(why))
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let body = json!({
            "error": self.0.message(),
            "code": crate::code_name(self.0.code()),
        });
        (http_status(self.0.code()), Json(body)).into_response()
    }
}

/// The HTTP status of a gRPC code.
fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted | Code::FailedPrecondition => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded | Code::Cancelled => StatusCode::GATEWAY_TIMEOUT,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// `value` as the answer.
pub(super) fn ok(value: Value) -> Answer {
    Ok(Json(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_become_the_statuses_a_browser_expects() {
        assert_eq!(http_status(Code::NotFound), StatusCode::NOT_FOUND);
        assert_eq!(http_status(Code::InvalidArgument), StatusCode::BAD_REQUEST);
        assert_eq!(http_status(Code::PermissionDenied), StatusCode::FORBIDDEN);
        assert_eq!(
            http_status(Code::Unavailable),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
