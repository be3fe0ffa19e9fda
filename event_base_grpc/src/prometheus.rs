//! A bus's metrics in the Prometheus text exposition format (version 0.0.4): what the
//! server's `GET /metrics` answers (see [`GrpcServerBuilder::http_addr`]), and
//! [`render`] for serving them from an HTTP server of your own.
//!
//! Rendered from a [`MetricsSnapshot`] and the topics' latency histograms
//! ([`MetricsStore::latencies`]) taken at scrape time, with
//! [`prometheus_client`]'s encoder: no global recorder, no state kept between scrapes, one
//! bus per server. The names, types and labels are those of the `metrics` facade export
//! (`MetricsManager::export`, the table in the guide's observability page), so dashboards
//! and alerts work with either: `event_base_…_total` counters, gauges, every series labelled
//! `bus`, plus `topic`, `handler` or `worker` (a subscription's `event_base_subscription_lag`
//! and `event_base_subscription_paused`: `topic` and `handler`); the node's name is on
//! `event_base_node_info`.
//!
//! The latency histograms `event_base_handler_seconds` and `event_base_queue_wait_seconds`
//! (per `bus`, `topic`) have the buckets of [`LATENCY_BUCKETS`]. Each sample is counted at
//! its bus-side bucket's upper bound (at most 25 % above the sample, never above the largest
//! one), so a `le` bucket never holds a sample above `le`, and one just below `le` may be
//! counted in the next; `_sum` adds those bounds, so it is at most 25 % high. Unlike the
//! facade export, nothing is handed on and forgotten: each scrape reads the whole histograms,
//! so scrapes and exports do not take samples from each other.
//!
//! [`GrpcServerBuilder::http_addr`]: crate::GrpcServerBuilder::http_addr

use std::collections::BTreeMap;

use event_base_core::{
    LatencyHistogram, MetricsSnapshot, MetricsStore, SubscriptionMetrics, TopicLatencies,
    TopicMetrics, WorkerMetrics,
};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// The `Content-Type` of what [`render`] writes: the Prometheus text format, version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The upper bounds (`le`, in seconds) of the latency histograms' buckets, `+Inf` aside:
/// 100 µs to 5 minutes, the usual Prometheus steps.
pub const LATENCY_BUCKETS: [f64; 19] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Renders the metrics of `store`'s bus now in the Prometheus text format
/// ([`CONTENT_TYPE`]): `# HELP` and `# TYPE` lines, then the samples, one family per name.
///
/// Fails only if the encoder does (it writes to a `String`, so in practice it does not).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use event_base_core::{handler_fn, Ack, EMessage, EventBus, HandlerSpec};
/// let bus = EventBus::builder()
/// #   .wal(event_base_wal::MemoryWal::new())
/// #   .queue(event_base_queue::FlumeQueueFactory::default())
///     .name("billing")
///     .handler(HandlerSpec::new("orders", "orders", handler_fn(|_m: EMessage| async { Ack::Ack })))
///     .build()
///     .await?;
/// bus.send("orders", "x").await?;
/// bus.wait_idle(std::time::Duration::from_secs(5)).await?;
///
/// let text = event_base_grpc::prometheus::render(&bus.metrics_store())?;
/// assert!(text.contains("# TYPE event_base_acked_total counter\n"));
/// assert!(text.contains("event_base_acked_total{bus=\"billing\",topic=\"orders\"} 1\n"));
/// assert!(text.contains("event_base_handler_seconds_count{bus=\"billing\",topic=\"orders\"} 1\n"));
/// # Ok(()) }
/// ```
pub fn render(store: &MetricsStore) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector {
        snapshot: store.snapshot(),
        latencies: store.latencies(),
    }));
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)?;
    Ok(text)
}

/// Encodes one snapshot and the latencies read with it; registered afresh for every scrape.
#[derive(Debug)]
struct SnapshotCollector {
    snapshot: MetricsSnapshot,
    latencies: BTreeMap<String, TopicLatencies>,
}

/// A counter or gauge of a topic (or handler, or worker) and where its value comes from.
type Field<T> = (&'static str, &'static str, MetricType, fn(&T) -> u64);

const TOPIC: &[Field<TopicMetrics>] = &[
    (
        "event_base_accepted",
        "Messages appended to the WAL by send, including those later withdrawn.",
        MetricType::Counter,
        |m| m.accepted,
    ),
    (
        "event_base_refused",
        "Accepted messages withdrawn because their send failed after the WAL append.",
        MetricType::Counter,
        |m| m.refused,
    ),
    (
        "event_base_replayed",
        "Unfinished messages of an earlier run, delivered again at start.",
        MetricType::Counter,
        |m| m.replayed,
    ),
    (
        "event_base_handled",
        "Deliveries handed to a handler (summed over the topic's handlers).",
        MetricType::Counter,
        |m| m.handled,
    ),
    (
        "event_base_acked",
        "Deliveries answered Ack::Ack.",
        MetricType::Counter,
        |m| m.acked,
    ),
    (
        "event_base_retried",
        "Deliveries scheduled again (NoAck, a panic, a timeout).",
        MetricType::Counter,
        |m| m.retried,
    ),
    (
        "event_base_dead",
        "Messages dead-lettered.",
        MetricType::Counter,
        |m| m.dead,
    ),
    (
        "event_base_in_flight",
        "Sent and replayed messages not yet complete or dead.",
        MetricType::Gauge,
        |m| m.in_flight,
    ),
    (
        "event_base_queue_depth",
        "Messages waiting in the topic's queue.",
        MetricType::Gauge,
        |m| m.queue_depth,
    ),
];

const HANDLER: &[Field<TopicMetrics>] = &[
    (
        "event_base_handler_handled",
        "Deliveries of the handler's copies.",
        MetricType::Counter,
        |m| m.handled,
    ),
    (
        "event_base_handler_acked",
        "The handler's deliveries answered Ack::Ack.",
        MetricType::Counter,
        |m| m.acked,
    ),
    (
        "event_base_handler_retried",
        "The handler's deliveries scheduled again.",
        MetricType::Counter,
        |m| m.retried,
    ),
    (
        "event_base_handler_dead",
        "The handler's copies dead-lettered.",
        MetricType::Counter,
        |m| m.dead,
    ),
    (
        "event_base_handler_queue_depth",
        "The handler's copies waiting in its queue.",
        MetricType::Gauge,
        |m| m.queue_depth,
    ),
];

/// A gauge of a subscription: its name, help, and where its value comes from.
type SubscriptionGauge = (&'static str, &'static str, fn(&SubscriptionMetrics) -> u64);

/// The gauges of a subscription.
const SUBSCRIPTION: [SubscriptionGauge; 2] = [
    (
        "event_base_subscription_lag",
        "Messages accepted for the handler and not yet finished by it (acked or dead-lettered): queued, waiting for their key or a retry, or being handled.",
        |s| s.lag,
    ),
    (
        "event_base_subscription_paused",
        "1 while the handler is paused (it starts nothing new; its lag grows), else 0.",
        |s| u64::from(s.paused),
    ),
];

const WORKER: &[Field<WorkerMetrics>] = &[
    (
        "event_base_worker_handled",
        "Deliveries the worker handled.",
        MetricType::Counter,
        |w| w.handled,
    ),
    (
        "event_base_worker_acked",
        "The worker's deliveries answered Ack::Ack.",
        MetricType::Counter,
        |w| w.acked,
    ),
    (
        "event_base_worker_retried",
        "The worker's deliveries scheduled again.",
        MetricType::Counter,
        |w| w.retried,
    ),
    (
        "event_base_worker_dead",
        "The worker's deliveries dead-lettered.",
        MetricType::Counter,
        |w| w.dead,
    ),
];

/// Encodes one family: `name` with one sample per `(label value, figures)` of `rows`.
fn family<'a, T: 'a>(
    encoder: &mut DescriptorEncoder<'_>,
    (name, help, kind, value): &Field<T>,
    bus: &str,
    label: &'static str,
    rows: impl IntoIterator<Item = (&'a String, &'a T)>,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, *kind)?;
    for (key, figures) in rows {
        let labels = [("bus", bus), (label, key.as_str())];
        sample(&mut metric.encode_family(&labels)?, *kind, value(figures))?;
    }
    Ok(())
}

/// One sample of a counter or gauge.
fn sample(
    metric: &mut prometheus_client::encoding::MetricEncoder<'_>,
    kind: MetricType,
    value: u64,
) -> Result<(), std::fmt::Error> {
    if kind == MetricType::Counter {
        metric.encode_counter::<NoLabelSet, _, u64>(&value, None)
    } else {
        metric.encode_gauge(&value)
    }
}

/// A family of one sample, labelled `labels`.
fn single(
    encoder: &mut DescriptorEncoder<'_>,
    (name, help, kind): (&str, &str, MetricType),
    labels: &impl EncodeLabelSet,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    sample(&mut metric.encode_family(labels)?, kind, value)
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let snap = &self.snapshot;
        let bus = snap.bus.as_str();
        for field in TOPIC {
            family(&mut encoder, field, bus, "topic", &snap.topics)?;
        }
        self.encode_latencies(&mut encoder)?;
        for field in HANDLER {
            family(&mut encoder, field, bus, "handler", &snap.handlers)?;
        }
        self.encode_subscriptions(&mut encoder)?;
        for field in WORKER {
            family(&mut encoder, field, bus, "worker", &snap.workers)?;
        }
        self.encode_node(&mut encoder)
    }
}

/// A latency histogram of a topic: its name, help and which of the topic's histograms.
type Latency = (
    &'static str,
    &'static str,
    fn(&TopicLatencies) -> &LatencyHistogram,
);

const LATENCIES: [Latency; 2] = [
    (
        "event_base_handler_seconds",
        "Time in the handler and its middleware, one sample per delivery.",
        |l| &l.handler_time,
    ),
    (
        "event_base_queue_wait_seconds",
        "From a message's creation (or due time) to its first delivery.",
        |l| &l.queue_wait,
    ),
];

impl SnapshotCollector {
    /// The latency histograms, per topic.
    fn encode_latencies(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let bus = self.snapshot.bus.as_str();
        for (name, help, histogram) in LATENCIES {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
            for (topic, l) in &self.latencies {
                let (sum, count, buckets) = histogram_of(histogram(l));
                metric
                    .encode_family(&[("bus", bus), ("topic", topic.as_str())])?
                    .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
            }
        }
        Ok(())
    }

    /// Per subscription (`topic`, `handler`): its lag, whether it is paused, and the time it
    /// waited for its rate.
    fn encode_subscriptions(
        &self,
        encoder: &mut DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        let bus = self.snapshot.bus.as_str();
        for (name, help, value) in SUBSCRIPTION {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for sub in &self.snapshot.subscriptions {
                let labels = [
                    ("bus", bus),
                    ("topic", sub.topic.as_str()),
                    ("handler", sub.handler.as_str()),
                ];
                metric.encode_family(&labels)?.encode_gauge(&value(sub))?;
            }
        }
        let mut metric = encoder.encode_descriptor(
            "event_base_subscription_rate_limited_seconds",
            "Time the handler's deliveries waited, in all, for its rate (HandlerSpec::rate) before they started; only goes up.",
            None,
            MetricType::Gauge,
        )?;
        for sub in &self.snapshot.subscriptions {
            let labels = [
                ("bus", bus),
                ("topic", sub.topic.as_str()),
                ("handler", sub.handler.as_str()),
            ];
            metric
                .encode_family(&labels)?
                .encode_gauge(&sub.rate_limited.as_secs_f64())?;
        }
        Ok(())
    }

    /// The node's and the WAL's figures.
    fn encode_node(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let snap = &self.snapshot;
        let bus = snap.bus.as_str();

        let info = [
            ("bus", bus),
            ("node", snap.node_name.as_str()),
            ("node_type", snap.node_type.as_str()),
        ];
        single(
            encoder,
            (
                "event_base_node_info",
                "Which node the bus runs on (always 1).",
                MetricType::Gauge,
            ),
            &info,
            1,
        )?;
        let labels = [("bus", bus)];
        let node = &snap.node;
        let wal = &snap.wal;
        let gauges = [
            (
                "event_base_node_in_flight",
                "Accepted messages not yet final, all topics.",
                node.in_flight,
            ),
            (
                "event_base_node_waiting_on_timers",
                "In-flight messages waiting on a timer (delayed delivery or retry backoff).",
                node.waiting_on_timers,
            ),
            ("event_base_node_workers", "Live workers.", node.workers),
            (
                "event_base_wal_failed",
                "1 once a write or sync of the WAL failed and it refuses every send; restart once the cause is fixed.",
                u64::from(wal.failed),
            ),
            (
                "event_base_wal_live",
                "WAL records pending or processing.",
                wal.live,
            ),
            (
                "event_base_wal_dead",
                "Dead letters the WAL holds.",
                wal.dead,
            ),
            (
                "event_base_wal_disk_bytes",
                "Bytes of the WAL on disk (0 in memory).",
                wal.disk_bytes,
            ),
        ];
        for (name, help, value) in gauges {
            single(encoder, (name, help, MetricType::Gauge), &labels, value)?;
        }
        let mut uptime = encoder.encode_descriptor(
            "event_base_node_uptime_seconds",
            "Time since the bus started.",
            None,
            MetricType::Gauge,
        )?;
        uptime
            .encode_family(&labels)?
            .encode_gauge(&node.uptime.as_secs_f64())?;
        single(
            encoder,
            (
                "event_base_wal_syncs",
                "fdatasync calls of the WAL since open (0 in memory).",
                MetricType::Counter,
            ),
            &labels,
            wal.syncs,
        )
    }
}

/// `h` in [`LATENCY_BUCKETS`] (and `+Inf`): its sum in seconds, its count, and per bucket
/// the samples that fall in it (not cumulated: the encoder adds them up).
fn histogram_of(h: &LatencyHistogram) -> (f64, u64, Vec<(f64, u64)>) {
    let mut buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
        .iter()
        .chain(&[f64::INFINITY])
        .map(|le| (*le, 0))
        .collect();
    let (mut sum, mut count) = (0.0, 0);
    for (bound, n) in h.buckets() {
        let seconds = bound.as_secs_f64();
        sum += seconds * n as f64;
        count += n;
        // The first `le` at or above the bound: `+Inf` at the latest.
        let at = LATENCY_BUCKETS.partition_point(|le| *le < seconds);
        buckets[at].1 += n;
    }
    (sum, count, buckets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn samples_land_in_the_first_bucket_at_or_above_their_bound() {
        let h = LatencyHistogram::default();
        h.record(Duration::from_micros(50)); // <= 0.0001
        h.record(Duration::from_micros(900)); // bound <= 0.001
                                              // 1 s lies in a bus-side bucket whose bound is above 1 s: counted in the next `le`.
        h.record(Duration::from_secs(1));
        h.record(Duration::from_secs(400)); // past the last: +Inf
        let (sum, count, buckets) = histogram_of(&h);
        assert_eq!(count, 4);
        assert_eq!(buckets.len(), LATENCY_BUCKETS.len() + 1);
        let at = |le: f64| buckets.iter().find(|(b, _)| *b == le).unwrap().1;
        assert_eq!(at(0.0001), 1);
        assert_eq!(at(0.001), 1);
        assert_eq!((at(1.0), at(2.5)), (0, 1));
        assert_eq!(at(f64::INFINITY), 1);
        assert_eq!(buckets.iter().map(|(_, n)| n).sum::<u64>(), 4);
        let true_sum = 400.0 + 1.0 + 0.0009 + 0.00005;
        assert!(sum >= true_sum && sum <= true_sum * 1.25, "{sum}");
    }
}
