//! How answers are shown: JSON values for scripts (built by hand, so field names are stable
//! and readable: times in RFC 3339, durations in milliseconds, payloads as text when they are
//! UTF-8, else base64) and aligned tables for people.

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use event_base_grpc::pb;
use serde_json::{json, Value};

/// A table: headers and rows, printed with columns aligned.
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            let pad = widths.get(i).copied().unwrap_or(0);
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<pad$}"));
            }
        }
        out.trim_end().to_owned()
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push('\n');
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// `key: value` lines, keys aligned.
pub(crate) fn pairs(items: &[(&str, String)]) -> String {
    let width = items.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    items
        .iter()
        .map(|(k, v)| format!("{k:<width$}  {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) fn time(t: Option<&prost_types::Timestamp>) -> Value {
    t.and_then(|t| SystemTime::try_from(*t).ok())
        .map_or(Value::Null, |t| {
            json!(humantime::format_rfc3339_millis(t).to_string())
        })
}

pub(crate) fn time_text(t: Option<&prost_types::Timestamp>) -> String {
    match time(t) {
        Value::String(s) => s,
        _ => "-".to_owned(),
    }
}

pub(crate) fn millis(d: Option<&prost_types::Duration>) -> Value {
    d.and_then(|d| Duration::try_from(*d).ok())
        .map_or(Value::Null, |d| json!(d.as_secs_f64() * 1000.0))
}

pub(crate) fn duration_text(d: Option<&prost_types::Duration>) -> String {
    d.and_then(|d| Duration::try_from(*d).ok()).map_or_else(
        || "-".to_owned(),
        |d| humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string(),
    )
}

/// A payload: `(encoding, text)`, text as is when it is UTF-8, else base64.
pub(crate) fn payload(bytes: &[u8]) -> (&'static str, String) {
    match std::str::from_utf8(bytes) {
        Ok(text) => ("utf8", text.to_owned()),
        Err(_) => (
            "base64",
            base64::engine::general_purpose::STANDARD.encode(bytes),
        ),
    }
}

fn enum_name(name: Option<&str>, prefix: &str) -> String {
    name.map_or_else(
        || "unknown".to_owned(),
        |n| n.trim_start_matches(prefix).to_ascii_lowercase(),
    )
}

pub(crate) fn worker_status(s: i32) -> String {
    enum_name(
        pb::WorkerStatus::try_from(s).ok().map(|s| s.as_str_name()),
        "WORKER_STATUS_",
    )
}

pub(crate) fn reason_kind(k: i32) -> String {
    enum_name(
        pb::DeadReasonKind::try_from(k)
            .ok()
            .map(|k| k.as_str_name()),
        "DEAD_REASON_KIND_",
    )
}

pub(crate) fn outcome(o: i32) -> String {
    enum_name(
        pb::WorkerOutcome::try_from(o).ok().map(|o| o.as_str_name()),
        "WORKER_OUTCOME_",
    )
}

pub(crate) fn audit_kind(k: i32) -> String {
    enum_name(
        pb::AuditEventKind::try_from(k)
            .ok()
            .map(|k| k.as_str_name()),
        "AUDIT_EVENT_KIND_",
    )
}

pub(crate) fn wal(w: &pb::WalStats) -> Value {
    json!({
        "appended": w.appended, "completed": w.completed, "live": w.live,
        "dead": w.dead, "disk_bytes": w.disk_bytes, "syncs": w.syncs,
        "failed": w.failed, "failure": (!w.failure.is_empty()).then_some(&w.failure),
    })
}

/// The WAL's state in a line: working, or what failed and what to do.
pub(crate) fn wal_state(w: &pb::WalStats) -> String {
    if w.failed {
        format!(
            "FAILED, refusing every send: {}; free disk space or repair the device, then restart the bus",
            w.failure
        )
    } else {
        "working".to_owned()
    }
}

fn latency(l: Option<&pb::Latency>) -> Value {
    l.map_or(Value::Null, |l| {
        json!({
            "count": l.count, "p50_ms": millis(l.p50.as_ref()), "p90_ms": millis(l.p90.as_ref()),
            "p99_ms": millis(l.p99.as_ref()), "max_ms": millis(l.max.as_ref()),
        })
    })
}

pub(crate) fn topic_metrics(m: &pb::TopicMetrics) -> Value {
    json!({
        "sent": m.sent, "accepted": m.accepted, "refused": m.refused, "replayed": m.replayed,
        "handled": m.handled, "acked": m.acked, "retried": m.retried, "dead": m.dead,
        "in_flight": m.in_flight, "queue_depth": m.queue_depth,
        "queue_wait": latency(m.queue_wait.as_ref()),
        "handler_time": latency(m.handler_time.as_ref()),
    })
}

/// A subscription (a handler of a topic): its lag and pause state.
pub(crate) fn subscription(s: &pb::Subscription) -> Value {
    json!({
        "topic": s.topic, "handler": s.handler, "lag": s.lag, "paused": s.paused,
        "queue_depth": s.queue_depth,
    })
}

/// A subscription's state in words: `paused` or `running`.
pub(crate) fn subscription_state(s: &pb::Subscription) -> &'static str {
    if s.paused {
        "paused"
    } else {
        "running"
    }
}

pub(crate) fn worker_metrics(m: &pb::WorkerMetrics) -> Value {
    json!({"handled": m.handled, "acked": m.acked, "retried": m.retried, "dead": m.dead})
}

pub(crate) fn worker(w: &pb::Worker) -> Value {
    json!({
        "name": w.name, "topic": w.topic, "node": w.node, "status": worker_status(w.status),
        "current_message_id": w.current_message_id, "processed": w.processed,
        "last_heartbeat": time(w.last_heartbeat.as_ref()),
        "metrics": w.metrics.as_ref().map(worker_metrics),
    })
}

pub(crate) fn message(m: &pb::Message) -> Value {
    let (encoding, text) = payload(&m.payload);
    let meta = m.metadata.clone().unwrap_or_default();
    let mode = m.delivery_mode.unwrap_or_default();
    json!({
        "id": m.id, "topic": m.topic,
        "payload": text, "payload_encoding": encoding,
        "payload_size": m.payload_size, "payload_truncated": m.payload_truncated,
        "attempts": m.attempts,
        "delivery_mode": enum_name(pb::DeliveryModeKind::try_from(mode.kind).ok().map(|k| k.as_str_name()), "DELIVERY_MODE_KIND_"),
        "repeat_count": mode.repeat_count,
        "deliver_at": time(m.deliver_at.as_ref()), "to_worker": m.to_worker,
        "created_at": time(meta.created_at.as_ref()), "trace_id": meta.trace_id,
        "correlation_id": meta.correlation_id, "causation_id": meta.causation_id,
        "source": meta.source,
    })
}

pub(crate) fn dead_letter(d: &pb::DeadLetter) -> Value {
    let reason = d.reason.clone().unwrap_or_default();
    json!({
        "message": d.message.as_ref().map(message),
        "reason": reason_kind(reason.kind), "reason_detail": reason.detail,
        "reason_text": reason.description,
        "attempts": d.attempts, "died_at": time(d.died_at.as_ref()), "handlers": d.handlers,
    })
}

pub(crate) fn dead_letter_row(d: &pb::DeadLetter) -> Vec<String> {
    let m = d.message.clone().unwrap_or_default();
    let (_, mut text) = payload(&m.payload);
    if m.payload_truncated {
        text.push('…');
    }
    vec![
        m.id,
        m.topic,
        d.reason
            .as_ref()
            .map_or_else(String::new, |r| r.description.clone()),
        d.attempts.to_string(),
        time_text(d.died_at.as_ref()),
        text.replace('\n', "\\n"),
    ]
}

pub(crate) fn audit_record(r: &pb::AuditRecord) -> Value {
    json!({
        "seq": r.seq, "message_id": r.message_id, "topic": r.topic, "worker": r.worker,
        "node": r.node, "attempt": r.attempt, "event": audit_kind(r.event),
        "duration_ms": millis(r.duration.as_ref()), "retry_after_ms": millis(r.retry_after.as_ref()),
        "reason": r.reason, "at": time(r.at.as_ref()),
    })
}

pub(crate) fn report(r: &pb::ShutdownReport) -> Value {
    json!({
        "strategy": r.strategy, "drained": r.drained, "left_for_replay": r.left_for_replay,
        "elapsed_ms": millis(r.elapsed.as_ref()),
        "workers": r.workers.iter().map(|w| json!({
            "name": w.name, "topic": w.topic, "outcome": outcome(w.outcome),
            "interrupted_id": w.interrupted_id,
        })).collect::<Vec<_>>(),
        "wal_flush_error": r.wal_flush_error,
    })
}

pub(crate) fn report_text(r: &pb::ShutdownReport) -> String {
    let head = pairs(&[
        ("strategy", r.strategy.clone()),
        ("drained", r.drained.to_string()),
        ("left for replay", r.left_for_replay.to_string()),
        ("elapsed", duration_text(r.elapsed.as_ref())),
    ]);
    let rows: Vec<Vec<String>> = r
        .workers
        .iter()
        .map(|w| {
            vec![
                w.name.clone(),
                w.topic.clone(),
                outcome(w.outcome),
                w.interrupted_id.clone().unwrap_or_default(),
            ]
        })
        .collect();
    format!(
        "{head}\n\n{}",
        table(&["WORKER", "TOPIC", "OUTCOME", "INTERRUPTED"], &rows)
    )
}

/// A watch event as JSON, and as one line of text.
pub(crate) fn watch_event(e: &pb::WatchResponse) -> (Value, String) {
    use pb::watch_response::Event;
    let at = time(e.at.as_ref());
    let at_text = time_text(e.at.as_ref());
    match &e.event {
        Some(Event::DeadLetter(d)) => {
            let row = dead_letter_row(d);
            (
                json!({"seq": e.seq, "at": at, "kind": "dead_letter", "dead_letter": dead_letter(d)}),
                format!(
                    "{at_text}  dead letter  {} on {}: {} ({})",
                    row[0], row[1], row[2], row[5]
                ),
            )
        }
        Some(Event::Worker(w)) => {
            let change = enum_name(
                pb::WorkerChange::try_from(w.change)
                    .ok()
                    .map(|c| c.as_str_name()),
                "WORKER_CHANGE_",
            );
            let name = w.worker.as_ref().map_or("", |w| w.name.as_str());
            (
                json!({"seq": e.seq, "at": at, "kind": "worker", "change": change, "worker": w.worker.as_ref().map(worker)}),
                format!("{at_text}  worker       {name} {change}"),
            )
        }
        Some(Event::Lifecycle(l)) => {
            let stage = enum_name(
                pb::LifecycleStage::try_from(l.stage)
                    .ok()
                    .map(|s| s.as_str_name()),
                "LIFECYCLE_STAGE_",
            );
            (
                json!({"seq": e.seq, "at": at, "kind": "lifecycle", "stage": stage, "report": l.report.as_ref().map(report)}),
                format!("{at_text}  lifecycle    {stage}"),
            )
        }
        Some(Event::Audit(r)) => {
            let mut text = format!(
                "{at_text}  audit        {} on {} by {} (attempt {}): {}",
                r.message_id,
                r.topic,
                r.worker,
                r.attempt,
                audit_kind(r.event)
            );
            if !r.reason.is_empty() {
                text.push_str(&format!(" ({})", r.reason));
            }
            (
                json!({"seq": e.seq, "at": at, "kind": "audit", "audit": audit_record(r)}),
                text,
            )
        }
        Some(Event::Metrics(m)) => {
            let mut names: Vec<&String> = m.topics.keys().collect();
            names.sort();
            let node = m.node.unwrap_or_default();
            let mut text = format!(
                "{at_text}  metrics      in flight {} ({} on timers), {} workers",
                node.in_flight, node.waiting_on_timers, node.workers
            );
            for name in names {
                let t = &m.topics[name];
                text.push_str(&format!(
                    "; {name}: sent {} acked {} retried {} dead {} in flight {}",
                    t.sent, t.acked, t.retried, t.dead, t.in_flight
                ));
            }
            (
                json!({"seq": e.seq, "at": at, "kind": "metrics",
                       "node": {"in_flight": node.in_flight, "waiting_on_timers": node.waiting_on_timers,
                                "uptime_ms": millis(node.uptime.as_ref()), "workers": node.workers},
                       "topics": m.topics.iter().map(|(k, v)| (k.clone(), topic_metrics(v))).collect::<serde_json::Map<_, _>>()}),
                text,
            )
        }
        Some(Event::Lagged(l)) => (
            json!({"seq": e.seq, "at": at, "kind": "lagged", "skipped": l.skipped}),
            format!(
                "{at_text}  lagged       {} events skipped (reading too slowly)",
                l.skipped
            ),
        ),
        None => (
            json!({"seq": e.seq, "at": at, "kind": "unknown"}),
            format!("{at_text}  (unknown event)"),
        ),
    }
}
