//! The subscriptions table: one row per handler of a topic (a subscription: each handler gets
//! its own copy of every message), with that handler's counters
//! (`MetricsSnapshot::handlers`) and live workers.
//!
//! A handler's topic is the topic of its workers (`<handler>-<n>` in the registry); a
//! handler the registry no longer lists (every worker ended and pruned) keeps its counters,
//! with no topic.

use std::collections::BTreeMap;

use event_base_core::{MetricsSnapshot, WorkerInfo};
use serde_json::Value;

use super::table::{column, millis, table, Column, Kind, Row};

// TODO(issue 34): lag and pause/resume go here, and only here. Add the columns `lag`
// (`EventBus::lag(topic, handler)`, Kind::Count) and `paused` (Kind::State, from whatever
// issue 34 gives to read it) to COLUMNS and fill them in `row` (a `lag` that fails for a
// subscription leaves its cell empty); give `row` a "Pause" or "Resume" `Action` posting to
// `api/subscriptions/{topic}/{handler}/pause` (or `/resume`, path segments made with
// `table::segment`), with a `confirm` text; and add `routes()` here with those two `POST`
// endpoints (extractor `gate::Admin`, calling `EventBus::pause`/`resume`), merged in
// `dashboard::routes`. The page draws new columns and buttons from this table as it is.

/// The columns, in the order shown.
const COLUMNS: &[Column] = &[
    column("topic", "Topic", Kind::Text),
    column("handler", "Handler", Kind::Text),
    column("workers", "Workers", Kind::Count),
    column("handled", "Handled", Kind::Count),
    column("handled_rate", "Handled/s", Kind::Rate { of: "handled" }),
    column("acked_rate", "Acked/s", Kind::Rate { of: "acked" }),
    column("retried", "Retried", Kind::Count),
    column("dead", "Dead", Kind::Count),
    column("in_flight", "In flight", Kind::Count),
    column("queue_depth", "Queued", Kind::Count),
    column("p99_ms", "Handler p99 (ms)", Kind::Millis),
];

/// A subscription: a handler and its topic (empty when unknown).
#[derive(Debug, Default)]
struct Subscription {
    topic: String,
    live_workers: usize,
}

/// The table of every handler of the bus's topics (not the `_system.` ones), sorted by
/// topic, then handler.
pub(super) fn subscriptions_table(metrics: &MetricsSnapshot, workers: &[WorkerInfo]) -> Value {
    let mut subs: BTreeMap<String, Subscription> = metrics
        .handlers
        .keys()
        .map(|h| (h.clone(), Subscription::default()))
        .collect();
    for w in workers {
        let handler = super::workers::handler_of(&w.name);
        let sub = subs.entry(handler.to_owned()).or_default();
        sub.topic = w.topic.as_str().to_owned();
        if super::workers::is_live(w) {
            sub.live_workers += 1;
        }
    }
    let mut rows: Vec<(&String, &Subscription)> = subs
        .iter()
        .filter(|(_, s)| !super::is_system(&s.topic))
        .collect();
    rows.sort_by(|a, b| (&a.1.topic, a.0).cmp(&(&b.1.topic, b.0)));
    let rows: Vec<Row> = rows
        .into_iter()
        .map(|(handler, sub)| row(handler, sub, metrics))
        .collect();
    table(COLUMNS, &rows)
}

/// The row of one subscription.
fn row(handler: &str, sub: &Subscription, metrics: &MetricsSnapshot) -> Row {
    let m = metrics.handler(handler).unwrap_or_default();
    Row::new(format!("{}/{handler}", sub.topic))
        .cell("topic", sub.topic.clone())
        .cell("handler", handler.to_owned())
        .cell("workers", sub.live_workers)
        .cell("handled", m.handled)
        .cell("acked", m.acked)
        .cell("retried", m.retried)
        .cell("dead", m.dead)
        .cell("in_flight", m.in_flight)
        .cell("queue_depth", m.queue_depth)
        .cell("p99_ms", millis(m.handler_time.p99))
}
