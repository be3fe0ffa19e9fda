//! The topics table: each topic's counters, summed over its handlers (`MetricsSnapshot::topics`),
//! with rates per second the page works out from two snapshots.

use event_base_core::{MetricsSnapshot, WorkerInfo};
use serde_json::Value;

use super::table::{column, millis, table, Column, Kind, Row};

/// The columns, in the order shown.
const COLUMNS: &[Column] = &[
    column("topic", "Topic", Kind::Text),
    column("workers", "Workers", Kind::Count),
    column("sent", "Sent", Kind::Count),
    column("sent_rate", "Sent/s", Kind::Rate { of: "sent" }),
    column("handled", "Handled", Kind::Count),
    column("handled_rate", "Handled/s", Kind::Rate { of: "handled" }),
    column("acked", "Acked", Kind::Count),
    column("retried", "Retried", Kind::Count),
    column("dead", "Dead", Kind::Count),
    column("dead_rate", "Dead/s", Kind::Rate { of: "dead" }),
    column("in_flight", "In flight", Kind::Count),
    column("queue_depth", "Queued", Kind::Count),
    column("p99_ms", "Handler p99 (ms)", Kind::Millis),
];

/// The table of `topics` (sorted, without the `_system.` ones) as of `metrics`.
pub(super) fn topics_table(
    topics: &[String],
    metrics: &MetricsSnapshot,
    workers: &[WorkerInfo],
) -> Value {
    let rows: Vec<Row> = topics
        .iter()
        .map(|topic| {
            let m = metrics.topic(topic).unwrap_or_default();
            let live = workers
                .iter()
                .filter(|w| w.topic.as_str() == topic && super::workers::is_live(w))
                .count();
            Row::new(topic.clone())
                .cell("topic", topic.clone())
                .cell("workers", live)
                .cell("sent", m.sent)
                .cell("handled", m.handled)
                .cell("acked", m.acked)
                .cell("retried", m.retried)
                .cell("dead", m.dead)
                .cell("in_flight", m.in_flight)
                .cell("queue_depth", m.queue_depth)
                .cell("p99_ms", millis(m.handler_time.p99))
        })
        .collect();
    table(COLUMNS, &rows)
}
