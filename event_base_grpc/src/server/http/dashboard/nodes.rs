//! `GET /api/nodes`: the processes sharing the bus's queue backend (Redis), from
//! `EventBus::nodes`: `{"nodes": [{id, name, node_type, pid, last_beat_ms, workers: [{name,
//! topic}]}]}`, by id; `{"nodes": null}` with an in-process backend (the page then shows no
//! Nodes tab). Workers on `_system.` topics (the bus's own) are left off, as in the other
//! tables.

use std::time::UNIX_EPOCH;

use axum::extract::State;
use serde_json::{json, Value};

use super::answer::{ok, Answer};
use crate::server::http::gate::Reader;
use crate::server::http::HttpState;

/// `GET /api/nodes`.
pub(super) async fn nodes(_reader: Reader, State(state): State<HttpState>) -> Answer {
    let Some(nodes) = state.api.bus.nodes().await? else {
        return ok(json!({"nodes": null}));
    };
    let nodes: Vec<Value> = nodes
        .iter()
        .map(|n| {
            let seen = n
                .last_seen
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            json!({
                "id": n.id,
                "name": n.name,
                "node_type": n.kind.map(|k| k.as_str()),
                "pid": n.pid,
                "last_beat_ms": seen,
                "workers": n.workers.iter()
                    .filter(|w| !super::is_system(&w.topic))
                    .map(|w| json!({"name": w.name, "topic": w.topic}))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    ok(json!({ "nodes": nodes }))
}
