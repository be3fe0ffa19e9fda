//! The workers table (the registry: live workers and the most recent ended ones) and its one
//! action, stopping a worker (`POST api/workers/{name}/stop`, the `RemoveWorker` RPC's code).

use std::time::SystemTime;

use axum::extract::{Path, State};
use axum::routing::post;
use axum::Router;
use event_base_core::{MetricsSnapshot, WorkerInfo, WorkerStatus};
use serde_json::Value;

use super::answer::{ok, Answer};
use super::table::{column, segment, table, Action, Column, Kind, Row};
use crate::pb;
use crate::server::http::gate::Admin;
use crate::server::http::HttpState;

/// The columns, in the order shown.
const COLUMNS: &[Column] = &[
    column("name", "Worker", Kind::Text),
    column("topic", "Topic", Kind::Text),
    column("node", "Node", Kind::Text),
    column("status", "State", Kind::State),
    column("current", "Handling", Kind::Text),
    column("processed", "Processed", Kind::Count),
    column(
        "processed_rate",
        "Processed/s",
        Kind::Rate { of: "processed" },
    ),
    column("dead", "Dead", Kind::Count),
    column("heartbeat_ms", "Last seen (ms ago)", Kind::Millis),
];

/// The action's route.
pub(super) fn routes() -> Router<HttpState> {
    Router::new().route("/api/workers/{name}/stop", post(stop))
}

/// The handler a worker runs: its name without the `-<n>` suffix.
pub(super) fn handler_of(worker: &str) -> &str {
    worker
        .rsplit_once('-')
        .map_or(worker, |(handler, _)| handler)
}

/// Whether a worker has not ended.
pub(super) fn is_live(w: &WorkerInfo) -> bool {
    !matches!(w.status, WorkerStatus::Stopped | WorkerStatus::Dead)
}

/// The state's name, lower case.
fn status_name(s: WorkerStatus) -> &'static str {
    match s {
        WorkerStatus::Idle => "idle",
        WorkerStatus::Working => "working",
        WorkerStatus::Stopping => "stopping",
        WorkerStatus::Stopped => "stopped",
        WorkerStatus::Dead => "dead",
        _ => "unknown",
    }
}

/// The table of `workers` (without those of `_system.` topics), by topic, then name.
pub(super) fn workers_table(workers: &[WorkerInfo], metrics: &MetricsSnapshot) -> Value {
    let now = SystemTime::now();
    let mut shown: Vec<&WorkerInfo> = workers
        .iter()
        .filter(|w| !super::is_system(w.topic.as_str()))
        .collect();
    shown.sort_by(|a, b| (a.topic.as_str(), &a.name).cmp(&(b.topic.as_str(), &b.name)));
    let rows: Vec<Row> = shown
        .into_iter()
        .map(|w| {
            let m = metrics.worker(&w.name).unwrap_or_default();
            let seen = now
                .duration_since(w.last_heartbeat)
                .map(super::table::millis)
                .unwrap_or(0.0);
            let row = Row::new(w.name.clone())
                .cell("name", w.name.clone())
                .cell("topic", w.topic.as_str().to_owned())
                .cell("node", w.node.clone())
                .cell("status", status_name(w.status))
                .cell("current", w.current_message.clone().unwrap_or_default())
                .cell("processed", w.processed)
                .cell("dead", m.dead)
                .cell("heartbeat_ms", seen.round());
            if is_live(w) {
                row.action(Action {
                    label: "Stop",
                    post: format!("api/workers/{}/stop", segment(&w.name)),
                    confirm: format!(
                        "Stop worker {}? It finishes the message it holds, then ends.",
                        w.name
                    ),
                })
            } else {
                row
            }
        })
        .collect();
    table(COLUMNS, &rows)
}

/// `POST /api/workers/{name}/stop`: stops one worker, as `RemoveWorker` does.
async fn stop(_admin: Admin, State(state): State<HttpState>, Path(name): Path<String>) -> Answer {
    let answer = state
        .api
        .scale_down(&pb::RemoveWorkerRequest { name })
        .await?;
    let report = answer.report.unwrap_or_default();
    ok(serde_json::json!({
        "strategy": report.strategy,
        "drained": report.drained,
        "workers": report.workers.iter().map(|w| &w.name).collect::<Vec<_>>(),
    }))
}
