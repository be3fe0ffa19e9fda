//! `GET /metrics`: the bus's snapshot in the Prometheus text format (`crate::prometheus`),
//! rendered at each scrape. Any known token will do: a scrape needs the read scope, and admin
//! includes it.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::gate::Reader;
use super::HttpState;

/// The path Prometheus scrapes.
const METRICS_PATH: &str = "/metrics";

/// The route of `/metrics`.
pub(super) fn routes() -> Router<HttpState> {
    Router::new().route(METRICS_PATH, get(metrics))
}

/// `GET /metrics`: the bus's snapshot, rendered now.
async fn metrics(_reader: Reader, State(state): State<HttpState>) -> Response {
    match crate::prometheus::render(&state.api.bus.metrics_store()) {
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
