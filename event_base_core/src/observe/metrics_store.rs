//! Metrics: per-topic and per-worker counters and latency histograms, the
//! [`MetricsSnapshot`] that reads them, and the [`MetricsManager`] that exports them.
//!
//! Counters are relaxed atomics owned by each topic and worker, bumped on the hot path
//! without locks; latencies go into lock-free histograms. A snapshot reads everything at one
//! moment. With the `metrics` feature, `MetricsManager::export` publishes the same figures
//! to the [`metrics`](https://docs.rs/metrics) facade, so any exporter (Prometheus,
//! OpenTelemetry, ...) picks them up without code of ours.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::observe::latency_histogram::{LatencyHistogram, LatencySummary};

/// Live counters of one topic.
///
/// Senders bump one counter and workers the others; `in_flight` is derived from both when
/// read instead of being kept by both sides. They are not padded apart: with many topics
/// (a thousand, each with its worker) the extra cache lines cost more than the false
/// sharing they would save on a single busy topic, where no gain could be measured.
#[derive(Debug, Default)]
pub(crate) struct TopicCounters {
    sender: SenderCounts,
    worker: WorkerCounts,
    /// From `created_at` (or a later `deliver_at`) to the first delivery.
    pub(crate) queue_wait: LatencyHistogram,
    /// Time inside the handler (middleware included).
    pub(crate) handler_time: LatencyHistogram,
}

#[derive(Debug, Default)]
struct SenderCounts {
    /// Accepted messages (refused ones are taken back off).
    sent: AtomicU64,
}

#[derive(Debug, Default)]
struct WorkerCounts {
    handled: AtomicU64,
    acked: AtomicU64,
    retried: AtomicU64,
    dead: AtomicU64,
    /// Messages that reached a final state (complete or dead).
    finished: AtomicU64,
}

impl TopicCounters {
    #[inline]
    pub(crate) fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A message was accepted (or replayed).
    #[inline]
    pub(crate) fn accepted(&self) {
        Self::add(&self.sender.sent);
    }

    /// An accepted message was withdrawn after all: it never counted as sent.
    #[inline]
    pub(crate) fn refused(&self) {
        self.sender.sent.fetch_sub(1, Ordering::Relaxed);
    }

    /// A message reached its final state.
    #[inline]
    pub(crate) fn finished(&self) {
        Self::add(&self.worker.finished);
    }

    /// A delivery was handed to a handler.
    #[inline]
    pub(crate) fn handled(&self) {
        Self::add(&self.worker.handled);
    }

    /// A delivery was answered `Ack::Ack`.
    #[inline]
    pub(crate) fn acked(&self) {
        Self::add(&self.worker.acked);
    }

    /// A delivery was scheduled again.
    #[inline]
    pub(crate) fn retried(&self) {
        Self::add(&self.worker.retried);
    }

    /// A message was dead-lettered.
    #[inline]
    pub(crate) fn dead(&self) {
        Self::add(&self.worker.dead);
    }

    pub(crate) fn snapshot(&self, queue_depth: usize) -> TopicMetrics {
        // Finished first: a message is sent before it finishes, so the difference read in
        // this order is never negative.
        let finished = self.worker.finished.load(Ordering::Acquire);
        let sent = self.sender.sent.load(Ordering::Acquire);
        TopicMetrics {
            sent,
            handled: self.worker.handled.load(Ordering::Relaxed),
            acked: self.worker.acked.load(Ordering::Relaxed),
            retried: self.worker.retried.load(Ordering::Relaxed),
            dead: self.worker.dead.load(Ordering::Relaxed),
            in_flight: sent.saturating_sub(finished),
            queue_depth: queue_depth as u64,
            queue_wait: self.queue_wait.summary(),
            handler_time: self.handler_time.summary(),
        }
    }
}

/// Counters of one topic at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMetrics {
    /// Messages accepted by `send` (and replayed at start).
    pub sent: u64,
    /// Deliveries handed to a handler.
    pub handled: u64,
    /// Deliveries answered `Ack::Ack`.
    pub acked: u64,
    /// Deliveries scheduled again (`NoAck`, panic, timeout).
    pub retried: u64,
    /// Messages dead-lettered.
    pub dead: u64,
    /// Accepted messages not yet complete or dead.
    pub in_flight: u64,
    /// Messages waiting in the topic's queue.
    pub queue_depth: u64,
    /// From the message's `created_at` (or its `deliver_at`, if later) to its first
    /// delivery: includes any time between building the message and sending it, and, for a
    /// message replayed after a restart, the time the system was down.
    pub queue_wait: LatencySummary,
    /// Time spent in the handler and its middleware, per delivery.
    pub handler_time: LatencySummary,
}

/// Counters of one worker at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerMetrics {
    /// Deliveries it handled.
    pub handled: u64,
    /// Of those, answered `Ack::Ack`.
    pub acked: u64,
    /// Of those, scheduled again.
    pub retried: u64,
    /// Of those, dead-lettered.
    pub dead: u64,
}

/// Figures of the whole node (process) at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMetrics {
    /// Accepted messages not yet final, all topics.
    pub in_flight: u64,
    /// Of those, waiting on a timer (delayed delivery or retry backoff).
    pub waiting_on_timers: u64,
    /// Time since the system started.
    pub uptime: Duration,
    /// Live workers.
    pub workers: u64,
}

/// Every counter of a system at one moment.
///
/// ```
/// # use event_base_core::MetricsSnapshot;
/// let snap = MetricsSnapshot::default();
/// assert!(snap.topic("orders").is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsSnapshot {
    /// Per topic, by name.
    pub topics: BTreeMap<String, TopicMetrics>,
    /// Per worker, by name.
    pub workers: BTreeMap<String, WorkerMetrics>,
    /// The node as a whole.
    pub node: NodeMetrics,
}

impl MetricsSnapshot {
    /// The counters of `topic`, if the bus has it.
    pub fn topic(&self, topic: &str) -> Option<TopicMetrics> {
        self.topics.get(topic).copied()
    }

    /// The counters of one worker.
    pub fn worker(&self, name: &str) -> Option<WorkerMetrics> {
        self.workers.get(name).copied()
    }
}

/// The live metrics of one system: where snapshots come from.
pub struct MetricsStore {
    pub(crate) shared: Arc<crate::delivery::accept::SystemShared>,
}

impl std::fmt::Debug for MetricsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsStore").finish_non_exhaustive()
    }
}

impl MetricsStore {
    /// Reads every counter now.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let shared = &self.shared;
        let mut snap = MetricsSnapshot::default();
        for (topic, entry) in &shared.topics {
            snap.topics.insert(
                topic.0.clone(),
                entry.counters.snapshot(entry.producer.len()),
            );
        }
        let mut live = 0;
        for state in shared.registry.states() {
            if !matches!(
                state.status(),
                crate::WorkerStatus::Stopped | crate::WorkerStatus::Dead
            ) {
                live += 1;
            }
            snap.workers.insert(state.name.clone(), state.metrics());
        }
        snap.node = NodeMetrics {
            in_flight: shared.in_flight.get(),
            waiting_on_timers: shared.in_flight.timers(),
            uptime: shared.started.elapsed(),
            workers: live,
        };
        snap
    }
}

/// Exports a system's metrics to the `metrics` facade (feature `metrics`).
///
/// Counters become `event_base_<name>_total{topic}` (per worker:
/// `event_base_worker_<name>_total{worker}`), gauges `event_base_<name>{topic}` and
/// `event_base_node_<name>`, latencies `event_base_<name>_seconds{topic, quantile}`. Call
/// `MetricsManager::export` (feature `metrics`) whenever your exporter scrapes, or let
/// `EventBusBuilder::export_metrics(interval)` do it.
#[derive(Debug, Clone)]
pub struct MetricsManager {
    store: Arc<MetricsStore>,
}

impl MetricsManager {
    pub(crate) fn new(store: Arc<MetricsStore>) -> Self {
        MetricsManager { store }
    }

    /// A snapshot now.
    pub fn snapshot(&self) -> MetricsSnapshot {
        self.store.snapshot()
    }

    /// Publishes the current figures to the `metrics` facade.
    #[cfg(feature = "metrics")]
    pub fn export(&self) {
        let snap = self.snapshot();
        for (topic, m) in &snap.topics {
            let t = topic.clone();
            metrics::counter!("event_base_sent_total", "topic" => t.clone()).absolute(m.sent);
            metrics::counter!("event_base_handled_total", "topic" => t.clone()).absolute(m.handled);
            metrics::counter!("event_base_acked_total", "topic" => t.clone()).absolute(m.acked);
            metrics::counter!("event_base_retried_total", "topic" => t.clone()).absolute(m.retried);
            metrics::counter!("event_base_dead_total", "topic" => t.clone()).absolute(m.dead);
            metrics::gauge!("event_base_in_flight", "topic" => t.clone()).set(m.in_flight as f64);
            metrics::gauge!("event_base_queue_depth", "topic" => t.clone())
                .set(m.queue_depth as f64);
            for (q, v) in [
                ("0.5", m.handler_time.p50),
                ("0.9", m.handler_time.p90),
                ("0.99", m.handler_time.p99),
            ] {
                metrics::gauge!("event_base_handler_seconds", "topic" => t.clone(), "quantile" => q).set(v.as_secs_f64());
            }
            for (q, v) in [
                ("0.5", m.queue_wait.p50),
                ("0.9", m.queue_wait.p90),
                ("0.99", m.queue_wait.p99),
            ] {
                metrics::gauge!("event_base_queue_wait_seconds", "topic" => t.clone(), "quantile" => q).set(v.as_secs_f64());
            }
        }
        for (worker, w) in &snap.workers {
            let name = worker.clone();
            metrics::counter!("event_base_worker_handled_total", "worker" => name.clone())
                .absolute(w.handled);
            metrics::counter!("event_base_worker_acked_total", "worker" => name.clone())
                .absolute(w.acked);
            metrics::counter!("event_base_worker_retried_total", "worker" => name.clone())
                .absolute(w.retried);
            metrics::counter!("event_base_worker_dead_total", "worker" => name).absolute(w.dead);
        }
        metrics::gauge!("event_base_node_in_flight").set(snap.node.in_flight as f64);
        metrics::gauge!("event_base_node_waiting_on_timers")
            .set(snap.node.waiting_on_timers as f64);
        metrics::gauge!("event_base_node_workers").set(snap.node.workers as f64);
        metrics::gauge!("event_base_node_uptime_seconds").set(snap.node.uptime.as_secs_f64());
    }
}
