//! The server's HTTP/1.1 listener ([`GrpcServerBuilder::http_addr`](super::GrpcServerBuilder::http_addr)):
//! `GET /metrics` in the Prometheus text format (`crate::prometheus`).
//!
//! A port of its own rather than beside gRPC: the gRPC port speaks HTTP/2 only (and TLS when
//! configured), while Prometheus scrapes over HTTP/1.1, usually in plain text on an internal
//! network. Keeping them apart leaves the gRPC transport, its limits and interceptors as
//! they are, and lets the two be exposed (or firewalled) separately.
//!
//! Same tokens as gRPC, checked by the same code (`Tokens::scope_of_header`): with tokens
//! set, `/metrics` needs `Authorization: Bearer <read or admin token>` and answers `401`
//! otherwise; without tokens it is open (and the server listens on loopback only, unless
//! `allow_unauthenticated`).

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use event_base_core::EventBus;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::{AuthFailure, Tokens};

/// The path Prometheus scrapes.
pub(crate) const METRICS_PATH: &str = "/metrics";

/// What the handlers need.
#[derive(Clone)]
struct HttpState {
    bus: EventBus,
    tokens: Tokens,
}

/// Serves `listener` until `stop` is cancelled; connections under way finish first.
pub(crate) async fn serve(
    listener: TcpListener,
    bus: EventBus,
    tokens: Tokens,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route(METRICS_PATH, get(metrics))
        .with_state(HttpState { bus, tokens });
    axum::serve(listener, app)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}

/// `GET /metrics`: the bus's snapshot, rendered now.
async fn metrics(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    let authorization = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes());
    // Any known token will do: a scrape needs the read scope, and admin includes it.
    if let Err(failure) = state.tokens.scope_of_header(authorization) {
        return unauthorized(failure);
    }
    match crate::prometheus::render(&state.bus.metrics_store()) {
        Ok(text) => (
            [(header::CONTENT_TYPE, crate::prometheus::CONTENT_TYPE)],
            text,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "could not render /metrics");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "could not render the metrics; see the server's log\n",
            )
                .into_response()
        }
    }
}

/// `401` with a `WWW-Authenticate: Bearer` challenge and a body that says what to send.
fn unauthorized(failure: AuthFailure) -> Response {
    let why = match failure {
        AuthFailure::Missing => {
            "this server needs a token: send `Authorization: Bearer <token>` with its read or admin token (Prometheus: `authorization: {credentials: ...}` in the scrape config)\n"
        }
        AuthFailure::NotBearer => {
            "the Authorization header is not `Bearer <token>`; send the token as a bearer token\n"
        }
        AuthFailure::Unknown => {
            "the token is not one this server accepts; use its read or admin token\n"
        }
    };
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer realm=\"event_base\"")],
        why,
    )
        .into_response()
}
