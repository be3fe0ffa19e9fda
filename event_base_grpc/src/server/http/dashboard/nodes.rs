//! `GET /api/nodes`: the nodes (processes) sharing the bus's queue backend.

use axum::extract::State;
use serde_json::json;

use super::answer::{ok, Answer};
use crate::server::http::gate::Reader;
use crate::server::http::HttpState;

/// `GET /api/nodes`: `{"nodes": null}` with an in-process backend.
pub(super) async fn nodes(_reader: Reader, State(_state): State<HttpState>) -> Answer {
    ok(json!({"nodes": null}))
}
