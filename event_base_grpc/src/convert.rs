//! Core types to their wire form and back. Every conversion from the wire checks what it
//! gets and answers a typed [`Status`] (`INVALID_ARGUMENT`, saying which field is wrong), so no
//! value from the network is unwrapped.

use std::time::{Duration, SystemTime};

use event_base_core::{
    AuditEvent, AuditOutcome, AuditRecord, DeadLetterMessage, DeadReason, DeliveryMode, EMessage,
    LatencySummary, MessageMetadata, NodeMetrics, NodeType, ShutdownReport, ShutdownStrategy,
    SubscriptionMetrics, TopicMetrics, WorkerInfo, WorkerMetrics, WorkerOutcome, WorkerShutdown,
    WorkerStatus,
};
use tonic::Status;

use crate::pb;

/// How much of a payload goes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PayloadCut {
    /// None of it.
    Nothing,
    /// The first n bytes.
    Preview(usize),
    /// All of it.
    Whole,
}

pub(crate) fn timestamp(t: SystemTime) -> prost_types::Timestamp {
    prost_types::Timestamp::from(t)
}

pub(crate) fn duration(d: Duration) -> prost_types::Duration {
    // Durations the bus reports are far below the wire form's limit; saturate if not.
    prost_types::Duration::try_from(d).unwrap_or(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 0,
    })
}

/// A wire timestamp as a time; `field` names it in the error.
pub(crate) fn system_time(t: &prost_types::Timestamp, field: &str) -> Result<SystemTime, Status> {
    SystemTime::try_from(*t).map_err(|e| {
        Status::invalid_argument(format!(
            "`{field}` is not a valid timestamp ({e}); give seconds and nanos since the Unix epoch"
        ))
    })
}

/// The longest duration the server takes from the wire: 366 days. Every duration a request
/// carries (a `Publish` timeout, a delay, a shutdown strategy's times, a watch interval) and
/// the gap a replay rate implies is checked against it, and a longer one is refused with
/// `INVALID_ARGUMENT`, so no deadline computed from it can overflow.
pub const MAX_WIRE_DURATION: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// A wire duration as a duration; negative ones and ones over [`MAX_WIRE_DURATION`] are
/// refused, `field` names it in the error.
pub(crate) fn std_duration(d: &prost_types::Duration, field: &str) -> Result<Duration, Status> {
    let d = Duration::try_from(*d).map_err(|e| {
        Status::invalid_argument(format!(
            "`{field}` is not a valid duration ({e}); give a positive number of seconds"
        ))
    })?;
    within_wire_limit(d, field)
}

/// `d` if it is at most [`MAX_WIRE_DURATION`], else `INVALID_ARGUMENT` naming `field`.
pub(crate) fn within_wire_limit(d: Duration, field: &str) -> Result<Duration, Status> {
    if d > MAX_WIRE_DURATION {
        return Err(Status::invalid_argument(format!(
            "`{field}` is {}s, over the limit of {}s (366 days); give a shorter one",
            d.as_secs(),
            MAX_WIRE_DURATION.as_secs()
        )));
    }
    Ok(d)
}

/// An optional wire duration, with a default when absent.
pub(crate) fn duration_or(
    d: Option<&prost_types::Duration>,
    field: &str,
    default: Duration,
) -> Result<Duration, Status> {
    d.map_or(Ok(default), |d| std_duration(d, field))
}

pub(crate) fn node_type(t: NodeType) -> pb::NodeType {
    match t {
        NodeType::Host => pb::NodeType::Host,
        NodeType::Worker => pb::NodeType::Worker,
        #[allow(unreachable_patterns)]
        _ => pb::NodeType::Unspecified,
    }
}

/// The WAL's counters and state, with the cause of its failure if it has failed.
pub(crate) fn wal_stats(wal: &dyn event_base_core::backend::Wal) -> pb::WalStats {
    let s = wal.stats();
    pb::WalStats {
        appended: s.appended,
        completed: s.completed,
        live: s.live,
        dead: s.dead,
        disk_bytes: s.disk_bytes,
        syncs: s.syncs,
        failed: s.failed,
        failure: wal.failure().unwrap_or_default(),
    }
}

fn latency(l: &LatencySummary) -> pb::Latency {
    pb::Latency {
        count: l.count,
        p50: Some(duration(l.p50)),
        p90: Some(duration(l.p90)),
        p99: Some(duration(l.p99)),
        max: Some(duration(l.max)),
    }
}

pub(crate) fn topic_metrics(m: &TopicMetrics) -> pb::TopicMetrics {
    pb::TopicMetrics {
        sent: m.sent,
        accepted: m.accepted,
        refused: m.refused,
        replayed: m.replayed,
        handled: m.handled,
        acked: m.acked,
        retried: m.retried,
        dead: m.dead,
        in_flight: m.in_flight,
        queue_depth: m.queue_depth,
        queue_wait: Some(latency(&m.queue_wait)),
        handler_time: Some(latency(&m.handler_time)),
    }
}

pub(crate) fn subscription(s: &SubscriptionMetrics) -> pb::Subscription {
    pb::Subscription {
        topic: s.topic.clone(),
        handler: s.handler.clone(),
        lag: s.lag,
        paused: s.paused,
        queue_depth: s.queue_depth,
    }
}

pub(crate) fn worker_metrics(m: &WorkerMetrics) -> pb::WorkerMetrics {
    pb::WorkerMetrics {
        handled: m.handled,
        acked: m.acked,
        retried: m.retried,
        dead: m.dead,
    }
}

pub(crate) fn node_metrics(m: &NodeMetrics) -> pb::NodeMetrics {
    pb::NodeMetrics {
        in_flight: m.in_flight,
        waiting_on_timers: m.waiting_on_timers,
        uptime: Some(duration(m.uptime)),
        workers: m.workers,
    }
}

pub(crate) fn worker_status(s: WorkerStatus) -> pb::WorkerStatus {
    match s {
        WorkerStatus::Idle => pb::WorkerStatus::Idle,
        WorkerStatus::Working => pb::WorkerStatus::Working,
        WorkerStatus::Stopping => pb::WorkerStatus::Stopping,
        WorkerStatus::Stopped => pb::WorkerStatus::Stopped,
        WorkerStatus::Dead => pb::WorkerStatus::Dead,
        #[allow(unreachable_patterns)]
        _ => pb::WorkerStatus::Unspecified,
    }
}

pub(crate) fn worker(w: &WorkerInfo, metrics: Option<&WorkerMetrics>) -> pb::Worker {
    pb::Worker {
        name: w.name.clone(),
        topic: w.topic.as_str().to_owned(),
        node: w.node.clone(),
        status: worker_status(w.status) as i32,
        current_message_id: w.current_message.clone(),
        processed: w.processed,
        last_heartbeat: Some(timestamp(w.last_heartbeat)),
        metrics: metrics.map(worker_metrics),
    }
}

pub(crate) fn delivery_mode(m: &DeliveryMode) -> pb::DeliveryMode {
    match m {
        DeliveryMode::Standard => pb::DeliveryMode {
            kind: pb::DeliveryModeKind::Standard as i32,
            repeat_count: 0,
        },
        DeliveryMode::Broadcast => pb::DeliveryMode {
            kind: pb::DeliveryModeKind::Broadcast as i32,
            repeat_count: 0,
        },
        DeliveryMode::Repeated(n) => pb::DeliveryMode {
            kind: pb::DeliveryModeKind::Repeated as i32,
            repeat_count: *n,
        },
    }
}

/// A wire delivery mode as the core's; absent is `Standard`.
pub(crate) fn from_delivery_mode(m: Option<&pb::DeliveryMode>) -> Result<DeliveryMode, Status> {
    let Some(m) = m else {
        return Ok(DeliveryMode::Standard);
    };
    match pb::DeliveryModeKind::try_from(m.kind) {
        Ok(pb::DeliveryModeKind::Unspecified | pb::DeliveryModeKind::Standard) => {
            Ok(DeliveryMode::Standard)
        }
        Ok(pb::DeliveryModeKind::Broadcast) => Ok(DeliveryMode::Broadcast),
        Ok(pb::DeliveryModeKind::Repeated) if m.repeat_count >= 1 => {
            Ok(DeliveryMode::Repeated(m.repeat_count))
        }
        Ok(pb::DeliveryModeKind::Repeated) => Err(Status::invalid_argument(
            "`mode.repeat_count` must be at least 1 for DELIVERY_MODE_KIND_REPEATED",
        )),
        Err(_) => Err(Status::invalid_argument(format!(
            "`mode.kind` {} is not a delivery mode; use STANDARD, BROADCAST or REPEATED",
            m.kind
        ))),
    }
}

fn metadata(m: &MessageMetadata) -> pb::Metadata {
    pb::Metadata {
        created_at: Some(timestamp(m.created_at)),
        trace_id: m.trace_id.clone(),
        correlation_id: m.correlation_id.clone(),
        causation_id: m.causation_id.clone(),
        source: m.source.clone(),
    }
}

pub(crate) fn message(m: &EMessage, cut: PayloadCut) -> pb::Message {
    let bytes = &m.payload.0;
    let payload = match cut {
        PayloadCut::Nothing => event_base_core::Bytes::new(),
        PayloadCut::Preview(n) => bytes.slice(..n.min(bytes.len())),
        PayloadCut::Whole => bytes.clone(),
    };
    pb::Message {
        id: m.id.clone(),
        topic: m.topic.as_str().to_owned(),
        payload_size: bytes.len() as u64,
        payload_truncated: payload.len() < bytes.len(),
        payload,
        metadata: Some(metadata(&m.metadata)),
        attempts: m.attempts,
        delivery_mode: Some(delivery_mode(&m.delivery_mode)),
        deliver_at: m.deliver_at.map(timestamp),
        to_worker: m.to_worker.clone(),
        headers: m
            .headers
            .iter()
            .map(|(name, value)| pb::Header {
                name: name.to_owned(),
                value: value.to_owned(),
            })
            .collect(),
    }
}

pub(crate) fn dead_reason_kind(r: &DeadReason) -> pb::DeadReasonKind {
    match r {
        DeadReason::Explicit => pb::DeadReasonKind::Explicit,
        DeadReason::MaxRetriesExceeded => pb::DeadReasonKind::MaxRetriesExceeded,
        DeadReason::Timeout => pb::DeadReasonKind::Timeout,
        DeadReason::NoHandler => pb::DeadReasonKind::NoHandler,
        DeadReason::UnknownWorker(_) => pb::DeadReasonKind::UnknownWorker,
        DeadReason::Other(_) => pb::DeadReasonKind::Other,
    }
}

fn dead_reason(r: &DeadReason) -> pb::DeadReason {
    let detail = match r {
        DeadReason::UnknownWorker(w) => w.clone(),
        DeadReason::Other(s) => s.clone(),
        _ => String::new(),
    };
    pb::DeadReason {
        kind: dead_reason_kind(r) as i32,
        detail,
        description: r.to_string(),
    }
}

pub(crate) fn dead_letter(d: &DeadLetterMessage, cut: PayloadCut) -> pb::DeadLetter {
    pb::DeadLetter {
        message: Some(message(&d.message, cut)),
        reason: Some(dead_reason(&d.reason)),
        attempts: d.attempts,
        died_at: Some(timestamp(d.died_at)),
        handlers: d.handlers.clone(),
    }
}

pub(crate) fn audit_record(r: &AuditRecord) -> pb::AuditRecord {
    let (event, duration_, retry_after, reason) = match &r.event {
        AuditEvent::Started => (pb::AuditEventKind::Started, None, None, String::new()),
        AuditEvent::Finished {
            outcome,
            duration: d,
        } => match outcome {
            AuditOutcome::Acked => (
                pb::AuditEventKind::Acked,
                Some(duration(*d)),
                None,
                String::new(),
            ),
            AuditOutcome::Retried { after, reason } => (
                pb::AuditEventKind::Retried,
                Some(duration(*d)),
                Some(duration(*after)),
                reason.clone().unwrap_or_default(),
            ),
            AuditOutcome::Dead { reason } => (
                pb::AuditEventKind::Dead,
                Some(duration(*d)),
                None,
                reason.to_string(),
            ),
        },
    };
    pb::AuditRecord {
        seq: r.seq,
        message_id: r.message_id.clone(),
        topic: r.topic.to_string(),
        worker: r.worker.to_string(),
        node: r.node.to_string(),
        attempt: r.attempt,
        event: event as i32,
        duration: duration_,
        retry_after,
        reason,
        at: Some(timestamp(r.at)),
    }
}

fn worker_outcome(o: WorkerOutcome) -> pb::WorkerOutcome {
    match o {
        WorkerOutcome::Completed => pb::WorkerOutcome::Completed,
        WorkerOutcome::Forced => pb::WorkerOutcome::Forced,
        WorkerOutcome::TimedOut => pb::WorkerOutcome::TimedOut,
        WorkerOutcome::Running => pb::WorkerOutcome::Running,
        #[allow(unreachable_patterns)]
        _ => pb::WorkerOutcome::Unspecified,
    }
}

fn worker_shutdown(w: &WorkerShutdown) -> pb::WorkerShutdown {
    pb::WorkerShutdown {
        name: w.name.clone(),
        topic: w.topic.clone(),
        outcome: worker_outcome(w.outcome) as i32,
        interrupted_id: w.interrupted.clone(),
    }
}

pub(crate) fn shutdown_report(r: &ShutdownReport) -> pb::ShutdownReport {
    pb::ShutdownReport {
        strategy: r.strategy.clone(),
        drained: r.drained,
        left_for_replay: r.left_for_replay,
        elapsed: Some(duration(r.elapsed)),
        workers: r.workers.iter().map(worker_shutdown).collect(),
        wal_flush_error: r.wal_flush_error.clone(),
    }
}

/// The strategy a `ShutdownRequest` asks for; an absent duration takes the default given by
/// the strategy's docs in the guide (poll 1 s, force after 30 s, total/timeout 30 s).
pub(crate) fn shutdown_strategy(
    s: Option<&pb::shutdown_request::Strategy>,
) -> Result<ShutdownStrategy, Status> {
    use pb::shutdown_request::Strategy as S;
    const POLL: Duration = Duration::from_secs(1);
    const LIMIT: Duration = Duration::from_secs(30);
    let Some(s) = s else {
        return Err(Status::invalid_argument(
            "`strategy` is not set; choose one of two_stage, force, timeout, graceful, \
             state_based_idle, batched, drain",
        ));
    };
    Ok(match s {
        S::TwoStage(t) => ShutdownStrategy::TwoStage {
            poll_interval: duration_or(t.poll_interval.as_ref(), "two_stage.poll_interval", POLL)?,
            force_timeout: duration_or(t.force_timeout.as_ref(), "two_stage.force_timeout", LIMIT)?,
        },
        S::Force(_) => ShutdownStrategy::Force,
        S::Timeout(t) => ShutdownStrategy::Timeout {
            total: duration_or(t.total.as_ref(), "timeout.total", LIMIT)?,
        },
        S::Graceful(g) => {
            if g.worker_name.is_empty() {
                return Err(Status::invalid_argument(
                    "`graceful.worker_name` is empty; name the worker to stop (see ListWorkers)",
                ));
            }
            ShutdownStrategy::Graceful {
                worker_name: g.worker_name.clone(),
                poll_interval: duration_or(
                    g.poll_interval.as_ref(),
                    "graceful.poll_interval",
                    POLL,
                )?,
            }
        }
        S::StateBasedIdle(_) => ShutdownStrategy::StateBasedIdle,
        S::Batched(b) => {
            if b.batch_size == 0 {
                return Err(Status::invalid_argument(
                    "`batched.batch_size` must be at least 1",
                ));
            }
            ShutdownStrategy::Batched {
                batch_size: b.batch_size as usize,
                interval: duration_or(b.interval.as_ref(), "batched.interval", POLL)?,
            }
        }
        S::Drain(d) => ShutdownStrategy::Drain {
            timeout: duration_or(d.timeout.as_ref(), "drain.timeout", LIMIT)?,
        },
    })
}

/// The time a `schedule` oneof names, if any.
pub(crate) fn deliver_at(
    at: Option<&prost_types::Timestamp>,
    delay: Option<&prost_types::Duration>,
) -> Result<Option<SystemTime>, Status> {
    if let Some(at) = at {
        return system_time(at, "deliver_at").map(Some);
    }
    if let Some(delay) = delay {
        let delay = std_duration(delay, "delay")?;
        return SystemTime::now()
            .checked_add(delay)
            .map(Some)
            .ok_or_else(|| Status::invalid_argument("`delay` is too long"));
    }
    Ok(None)
}

/// The core message an `OutgoingMessage` describes, for `topic`.
pub(crate) fn outgoing(topic: &str, m: &pb::OutgoingMessage) -> Result<EMessage, Status> {
    use pb::outgoing_message::Schedule;
    let mode = from_delivery_mode(m.mode.as_ref())?;
    let mut msg = EMessage::new(topic, m.payload.clone(), mode, m.to_worker.clone());
    if let Some(id) = &m.id {
        msg = msg.with_id(id.clone());
    }
    if let Some(t) = &m.trace_id {
        msg = msg.with_trace_id(t.clone());
    }
    if let Some(c) = &m.correlation_id {
        msg = msg.with_correlation_id(c.clone());
    }
    if let Some(s) = &m.source {
        msg = msg.with_source(s.clone());
    }
    for h in &m.headers {
        msg = msg.with_header(h.name.clone(), h.value.clone());
    }
    let (at, delay) = match &m.schedule {
        Some(Schedule::DeliverAt(t)) => (Some(t), None),
        Some(Schedule::Delay(d)) => (None, Some(d)),
        None => (None, None),
    };
    if let Some(at) = deliver_at(at, delay)? {
        msg = msg.with_deliver_at(at);
    }
    Ok(msg)
}
