//! [`MetricsStore`]: reads a running bus's counters (per topic, per worker, for the node)
//! into a [`MetricsSnapshot`].
//!
//! Counters are relaxed atomics owned by each topic and worker, bumped on the hot path
//! without locks (see `observe/topic_counters.rs` and the worker registry); latencies go into
//! lock-free histograms. A snapshot reads everything at one moment.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::observe::latency_histogram::LatencyHistogram;
use crate::observe::snapshot::{MetricsSnapshot, NodeMetrics, SubscriptionMetrics};
use crate::worker::registry::WorkerStatus;

/// The live metrics of one system: where snapshots come from.
pub struct MetricsStore {
    pub(crate) shared: Arc<crate::bus::shared::BusShared>,
}

impl std::fmt::Debug for MetricsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsStore").finish_non_exhaustive()
    }
}

/// The latency histograms of one topic (its handlers' samples together), copied at one
/// moment: what [`MetricsSnapshot`]'s `queue_wait` and `handler_time` summarise, with every
/// bucket ([`LatencyHistogram::buckets`]).
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct TopicLatencies {
    /// From the message's creation (or due time) to its first delivery.
    pub queue_wait: LatencyHistogram,
    /// Time in the handler and its middleware, per delivery.
    pub handler_time: LatencyHistogram,
}

impl MetricsStore {
    /// Every topic's latency histograms, by topic name: copies, taken now. Costs two
    /// histograms (about 4 KiB) per topic; the snapshot's percentiles are cheaper when they
    /// are enough.
    pub fn latencies(&self) -> BTreeMap<String, TopicLatencies> {
        self.shared
            .delivery
            .topics
            .iter()
            .map(|(topic, route)| {
                let subs = || route.subs.iter().map(|s| &s.counters);
                let latencies = TopicLatencies {
                    queue_wait: LatencyHistogram::merged(subs().map(|c| &c.queue_wait)),
                    handler_time: LatencyHistogram::merged(subs().map(|c| &c.handler_time)),
                };
                (topic.0.clone(), latencies)
            })
            .collect()
    }

    /// Reads every counter now.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let shared = &self.shared;
        let mut snap = MetricsSnapshot::default();
        for (topic, route) in &shared.delivery.topics {
            let metrics = match route.single() {
                Some(only) => only.counters.snapshot(only.producer.len()),
                None => route
                    .counters()
                    .snapshot_of_topic(route.subs.iter().map(|s| (&s.counters, s.producer.len()))),
            };
            snap.topics.insert(topic.0.clone(), metrics);
            for sub in route.subs.iter() {
                let metrics = sub.counters.snapshot(sub.producer.len());
                snap.subscriptions.push(SubscriptionMetrics {
                    topic: topic.0.clone(),
                    handler: sub.handler.to_string(),
                    // What `EventBus::lag` reads, from the same reading as the handler's.
                    lag: metrics.in_flight,
                    paused: sub.pause.is_paused(),
                    queue_depth: metrics.queue_depth,
                    rate_limited: sub.counters.rate_limited(),
                });
                snap.handlers.insert(sub.handler.to_string(), metrics);
            }
        }
        snap.subscriptions
            .sort_by(|a, b| (&a.topic, &a.handler).cmp(&(&b.topic, &b.handler)));
        let mut live = 0;
        for state in shared.announcer.registry.states() {
            if !matches!(state.status(), WorkerStatus::Stopped | WorkerStatus::Dead) {
                live += 1;
            }
            snap.workers.insert(state.name.clone(), state.metrics());
        }
        snap.node_name = shared.announcer.node.name.to_string();
        snap.node_type = shared.announcer.node.kind;
        snap.bus = shared.name.to_string();
        snap.wal = shared.delivery.wal.stats();
        snap.node = NodeMetrics {
            in_flight: shared.delivery.in_flight.get(),
            waiting_on_timers: shared.delivery.in_flight.timers(),
            uptime: shared.started.elapsed(),
            workers: live,
        };
        snap
    }
}
