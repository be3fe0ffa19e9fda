//! The subscriptions table: one row per handler of a topic (a subscription: each handler gets
//! its own copy of every message), with its state (running or paused), lag, that handler's
//! counters (`MetricsSnapshot::handlers`) and live workers; and its actions, pausing and
//! resuming it (`POST api/subscriptions/{topic}/{handler}/pause` and `/resume`, the
//! `PauseSubscription` and `ResumeSubscription` RPCs' code).
//!
//! The rows are the snapshot's subscriptions (`MetricsSnapshot::subscriptions`, read with the
//! counters), so every row has its topic. A handler's live workers are the registry's workers
//! of that topic named `<handler>-<n>`. Its lag is its `in_flight` (accepted for it, not yet
//! finished by it), so the table shows it once, as `lag`; the row still carries `in_flight`
//! for scripts.

use axum::extract::{Path, State};
use axum::routing::post;
use axum::Router;
use event_base_core::{MetricsSnapshot, SubscriptionMetrics, WorkerInfo};
use serde_json::{json, Value};

use super::answer::{ok, Answer};
use super::table::{column, millis, segment, table, Action, Column, Kind, Row};
use crate::pb;
use crate::server::http::gate::Admin;
use crate::server::http::HttpState;

/// The columns, in the order shown.
const COLUMNS: &[Column] = &[
    column("topic", "Topic", Kind::Text),
    column("handler", "Handler", Kind::Text),
    column("state", "State", Kind::State),
    column("workers", "Workers", Kind::Count),
    column("handled", "Handled", Kind::Count),
    column("handled_rate", "Handled/s", Kind::Rate { of: "handled" }),
    column("acked_rate", "Acked/s", Kind::Rate { of: "acked" }),
    column("retried", "Retried", Kind::Count),
    column("dead", "Dead", Kind::Count),
    column("lag", "Lag", Kind::Count),
    column("queue_depth", "Queued", Kind::Count),
    column("p99_ms", "Handler p99 (ms)", Kind::Millis),
];

/// The actions' routes.
pub(super) fn routes() -> Router<HttpState> {
    Router::new()
        .route("/api/subscriptions/{topic}/{handler}/pause", post(pause))
        .route("/api/subscriptions/{topic}/{handler}/resume", post(resume))
}

/// The table of every handler of the bus's topics (not the `_system.` ones), sorted by
/// topic, then handler.
pub(super) fn subscriptions_table(metrics: &MetricsSnapshot, workers: &[WorkerInfo]) -> Value {
    let rows: Vec<Row> = metrics
        .subscriptions
        .iter()
        .filter(|s| !super::is_system(&s.topic))
        .map(|sub| {
            let live = workers
                .iter()
                .filter(|w| {
                    w.topic.as_str() == sub.topic
                        && super::workers::handler_of(&w.name) == sub.handler
                        && super::workers::is_live(w)
                })
                .count();
            row(sub, live, metrics)
        })
        .collect();
    table(COLUMNS, &rows)
}

/// The row of one subscription, with its Pause or Resume button.
fn row(sub: &SubscriptionMetrics, live_workers: usize, metrics: &MetricsSnapshot) -> Row {
    let (topic, handler) = (&sub.topic, &sub.handler);
    let m = metrics.handler(handler).unwrap_or_default();
    let path = |verb: &str| {
        format!(
            "api/subscriptions/{}/{}/{verb}",
            segment(topic),
            segment(handler)
        )
    };
    let action = if sub.paused {
        Action {
            label: "Resume",
            post: path("resume"),
            confirm: format!(
                "Resume handler {handler} of {topic}? It takes up the {} messages that waited, in order.",
                sub.lag
            ),
        }
    } else {
        Action {
            label: "Pause",
            post: path("pause"),
            confirm: format!(
                "Pause handler {handler} of {topic}? It starts nothing new and its messages wait \
                 (its lag grows) until it is resumed; the topic's other handlers go on."
            ),
        }
    };
    Row::new(format!("{topic}/{handler}"))
        .cell("topic", topic.clone())
        .cell("handler", handler.clone())
        .cell("state", if sub.paused { "paused" } else { "running" })
        .cell("workers", live_workers)
        .cell("handled", m.handled)
        .cell("acked", m.acked)
        .cell("retried", m.retried)
        .cell("dead", m.dead)
        .cell("lag", sub.lag)
        .cell("in_flight", m.in_flight)
        .cell("queue_depth", sub.queue_depth)
        .cell("p99_ms", millis(m.handler_time.p99))
        .action(action)
}

/// The answer of a pause or resume: the subscription after it, whether the call found it so
/// already, and (resume) its lag just before.
fn answer(sub: Option<pb::Subscription>, already: bool, waited: Option<u64>) -> Answer {
    let sub = sub.unwrap_or_default();
    let mut answer = json!({
        "topic": sub.topic,
        "handler": sub.handler,
        "paused": sub.paused,
        "lag": sub.lag,
        "queue_depth": sub.queue_depth,
        "already": already,
    });
    if let Some(waited) = waited {
        answer["waited"] = json!(waited);
    }
    ok(answer)
}

/// `POST /api/subscriptions/{topic}/{handler}/pause`: pauses one handler of a topic, as
/// `PauseSubscription` does.
async fn pause(
    _admin: Admin,
    State(state): State<HttpState>,
    Path((topic, handler)): Path<(String, String)>,
) -> Answer {
    let paused = state.api.pause(&topic, &handler)?;
    answer(paused.subscription, paused.already, None)
}

/// `POST /api/subscriptions/{topic}/{handler}/resume`: resumes one handler of a topic, as
/// `ResumeSubscription` does.
async fn resume(
    _admin: Admin,
    State(state): State<HttpState>,
    Path((topic, handler)): Path<(String, String)>,
) -> Answer {
    let resumed = state.api.resume(&topic, &handler)?;
    answer(resumed.subscription, resumed.already, Some(resumed.waited))
}
