//! [`MetricsManager`]: exports a bus's metrics to the `metrics` facade (feature `metrics`).
//!
//! With the feature on, [`MetricsManager::export`] publishes the figures of a
//! [`MetricsSnapshot`] to the [`metrics`](https://docs.rs/metrics) facade, so any exporter
//! (Prometheus, OpenTelemetry, ...) picks them up without code of ours.

use std::sync::Arc;

use crate::observe::metrics_store::MetricsStore;
use crate::observe::snapshot::MetricsSnapshot;

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
        metrics::gauge!("event_base_node_info", "node" => snap.node_name.clone(), "node_type" => snap.node_type.as_str()).set(1.0);
        metrics::gauge!("event_base_node_in_flight").set(snap.node.in_flight as f64);
        metrics::gauge!("event_base_node_waiting_on_timers")
            .set(snap.node.waiting_on_timers as f64);
        metrics::gauge!("event_base_node_workers").set(snap.node.workers as f64);
        metrics::gauge!("event_base_node_uptime_seconds").set(snap.node.uptime.as_secs_f64());
    }
}
