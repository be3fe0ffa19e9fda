//! [`MetricsManager`]: exports a bus's metrics to the `metrics` facade (feature `metrics`).
//!
//! With the feature on, [`MetricsManager::export`] publishes the figures of a
//! [`MetricsSnapshot`] to the [`metrics`](https://docs.rs/metrics) facade, so any exporter
//! (Prometheus, OpenTelemetry, ...) picks them up without code of ours.

use std::sync::Arc;

use crate::bus::observe::metrics_store::MetricsStore;
use crate::observe::snapshot::MetricsSnapshot;

/// Exports a system's metrics to the `metrics` facade (feature `metrics`).
///
/// Every series carries a `bus` label (the bus's name, see `EventBusBuilder::name`), so two
/// buses of one process keep apart series. Per topic (`bus`, `topic`): the counters
/// `event_base_{accepted,refused,handled,acked,retried,dead}_total`, the gauges
/// `event_base_in_flight` and `event_base_queue_depth`, and the histograms
/// `event_base_handler_seconds` and `event_base_queue_wait_seconds`. Per worker (`bus`,
/// `worker`): `event_base_worker_{handled,acked,retried,dead}_total`. Per subscription (`bus`,
/// `topic`, `handler`): the gauges `event_base_subscription_lag` and
/// `event_base_subscription_paused` (0 or 1), and `event_base_subscription_rate_limited_seconds`
/// (the time its deliveries waited for the handler's rate, only going up). Per bus:
/// `event_base_node_info` (with `node`, `node_type`) and the gauges `event_base_node_in_flight`,
/// `_waiting_on_timers`, `_workers` and `_uptime_seconds`; the WAL's gauges
/// `event_base_wal_failed` (1 once a write or sync failed: alert on it), `_live`, `_dead`,
/// `_disk_bytes` and the counter `event_base_wal_syncs_total`.
/// `event_base/guide/observability.md` has the table.
///
/// Counters are written with `absolute`, and every one of them only goes up. Histograms are
/// fed at export, not per delivery: each export hands the facade the samples the bus's own
/// histograms gained since the previous export (any manager of the bus), each as its bucket's
/// upper bound, so a delivery costs no facade call and an exported value is at most 25 %
/// above the sample. Call `MetricsManager::export` (feature `metrics`) whenever your exporter
/// scrapes, or let `EventBusBuilder::export_metrics(interval)` do it.
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
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn export(&self) {
        let snap = self.snapshot();
        let bus = snap.bus.clone();
        for (topic, m) in &snap.topics {
            export_topic(&bus, topic, m);
        }
        for (handler, m) in &snap.handlers {
            let labels = [("bus", bus.clone()), ("handler", handler.clone())];
            metrics::counter!("event_base_handler_handled_total", &labels).absolute(m.handled);
            metrics::counter!("event_base_handler_acked_total", &labels).absolute(m.acked);
            metrics::counter!("event_base_handler_retried_total", &labels).absolute(m.retried);
            metrics::counter!("event_base_handler_dead_total", &labels).absolute(m.dead);
            metrics::gauge!("event_base_handler_queue_depth", &labels).set(m.queue_depth as f64);
        }
        for sub in &snap.subscriptions {
            let labels = [
                ("bus", bus.clone()),
                ("topic", sub.topic.clone()),
                ("handler", sub.handler.clone()),
            ];
            metrics::gauge!("event_base_subscription_lag", &labels).set(sub.lag as f64);
            metrics::gauge!("event_base_subscription_paused", &labels)
                .set(f64::from(u8::from(sub.paused)));
            // Seconds, which only go up: a gauge, as the facade's counters are whole numbers.
            metrics::gauge!("event_base_subscription_rate_limited_seconds", &labels)
                .set(sub.rate_limited.as_secs_f64());
        }
        self.export_latencies(&bus);
        for (worker, w) in &snap.workers {
            let labels = [("bus", bus.clone()), ("worker", worker.clone())];
            metrics::counter!("event_base_worker_handled_total", &labels).absolute(w.handled);
            metrics::counter!("event_base_worker_acked_total", &labels).absolute(w.acked);
            metrics::counter!("event_base_worker_retried_total", &labels).absolute(w.retried);
            metrics::counter!("event_base_worker_dead_total", &labels).absolute(w.dead);
        }
        metrics::gauge!("event_base_node_info", "bus" => bus.clone(), "node" => snap.node_name.clone(), "node_type" => snap.node_type.as_str()).set(1.0);
        let labels = [("bus", bus)];
        metrics::gauge!("event_base_node_in_flight", &labels).set(snap.node.in_flight as f64);
        metrics::gauge!("event_base_node_waiting_on_timers", &labels)
            .set(snap.node.waiting_on_timers as f64);
        metrics::gauge!("event_base_node_workers", &labels).set(snap.node.workers as f64);
        metrics::gauge!("event_base_node_uptime_seconds", &labels)
            .set(snap.node.uptime.as_secs_f64());
        let wal = &snap.wal;
        metrics::gauge!("event_base_wal_failed", &labels).set(f64::from(u8::from(wal.failed)));
        metrics::gauge!("event_base_wal_live", &labels).set(wal.live as f64);
        metrics::gauge!("event_base_wal_dead", &labels).set(wal.dead as f64);
        metrics::gauge!("event_base_wal_disk_bytes", &labels).set(wal.disk_bytes as f64);
        metrics::counter!("event_base_wal_syncs_total", &labels).absolute(wal.syncs);
    }

    /// Hands each topic's latency samples recorded since the last export to the facade's
    /// histograms.
    #[cfg(feature = "metrics")]
    fn export_latencies(&self, bus: &str) {
        // A topic's handlers feed one series per topic.
        let subs = self
            .store
            .shared
            .delivery
            .topics
            .iter()
            .flat_map(|(t, r)| r.subs.iter().map(move |s| (t, s)));
        for (topic, entry) in subs {
            let c = &entry.counters;
            let labels = [("bus", bus.to_owned()), ("topic", topic.0.clone())];
            let handler = metrics::histogram!("event_base_handler_seconds", &labels);
            c.exported[0].take_new(&c.handler_time, |v, n| {
                handler.record_many(v.as_secs_f64(), n as usize)
            });
            let wait = metrics::histogram!("event_base_queue_wait_seconds", &labels);
            c.exported[1].take_new(&c.queue_wait, |v, n| {
                wait.record_many(v.as_secs_f64(), n as usize)
            });
        }
    }
}

/// The counters and gauges of one topic.
#[cfg(feature = "metrics")]
fn export_topic(bus: &str, topic: &str, m: &crate::observe::snapshot::TopicMetrics) {
    let labels = [("bus", bus.to_owned()), ("topic", topic.to_owned())];
    metrics::counter!("event_base_accepted_total", &labels).absolute(m.accepted);
    metrics::counter!("event_base_refused_total", &labels).absolute(m.refused);
    metrics::counter!("event_base_replayed_total", &labels).absolute(m.replayed);
    metrics::counter!("event_base_handled_total", &labels).absolute(m.handled);
    metrics::counter!("event_base_acked_total", &labels).absolute(m.acked);
    metrics::counter!("event_base_retried_total", &labels).absolute(m.retried);
    metrics::counter!("event_base_dead_total", &labels).absolute(m.dead);
    metrics::gauge!("event_base_in_flight", &labels).set(m.in_flight as f64);
    metrics::gauge!("event_base_queue_depth", &labels).set(m.queue_depth as f64);
}
