//! [`MetricsSnapshot`] and its parts: every counter of a bus at one moment, as plain data.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backend::WalStats;
use crate::node::NodeType;
use crate::observe::latency_histogram::LatencySummary;

/// Counters of one topic, or of one handler of a topic, at one moment.
///
/// Every handler of a topic receives its own copy of each message. In
/// [`MetricsSnapshot::topics`], `sent`, `accepted`, `refused` and `in_flight` count messages
/// and the delivery counters are summed over the topic's handlers; in
/// [`MetricsSnapshot::handlers`], every figure is that handler's copies alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TopicMetrics {
    /// Messages accepted by `send` (and by dead-letter replays), less those withdrawn because
    /// their send then failed: `accepted - refused`. Messages replayed from the WAL at start
    /// are not sent again: they count in `replayed`. Not monotonic: a send that fails after
    /// its WAL append takes its message back off.
    pub sent: u64,
    /// Messages appended to the WAL by `send`, including those later withdrawn. Only goes up.
    pub accepted: u64,
    /// Accepted messages withdrawn because their send failed after the WAL append (queue full
    /// with `try_send`, timeout, the send future dropped). Only goes up.
    pub refused: u64,
    /// Messages the WAL held unfinished when the bus started (sent by an earlier run), delivered
    /// again by the start-up replay. Only goes up.
    pub replayed: u64,
    /// Sends whose id was sent before (still in the WAL, or completed within the dedup
    /// window), answered `Ok` with that id and not delivered again. Only goes up.
    pub duplicates: u64,
    /// Deliveries handed to a handler.
    pub handled: u64,
    /// Deliveries answered `Ack::Ack`.
    pub acked: u64,
    /// Deliveries scheduled again (`NoAck`, panic, timeout).
    pub retried: u64,
    /// Messages dead-lettered.
    pub dead: u64,
    /// Sent and replayed messages not yet complete or dead.
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
#[non_exhaustive]
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

/// One subscription at one moment: a handler of a topic (each handler gets its own copy of
/// every message sent to the topic), with how far behind it is and whether it is paused.
///
/// `lag` is [`EventBus::lag`](crate::EventBus::lag) and `paused`
/// [`EventBus::is_paused`](crate::EventBus::is_paused), read with the rest of the snapshot:
/// `lag` equals the `in_flight` of the handler's [`MetricsSnapshot::handlers`] entry.
///
/// ```
/// # use event_base_core::MetricsSnapshot;
/// /// The subscriptions more than `limit` messages behind, as `topic/handler`.
/// fn behind(snap: &MetricsSnapshot, limit: u64) -> Vec<String> {
///     snap.subscriptions
///         .iter()
///         .filter(|s| s.lag > limit)
///         .map(|s| format!("{}/{}{}", s.topic, s.handler, if s.paused { " (paused)" } else { "" }))
///         .collect()
/// }
/// assert!(behind(&MetricsSnapshot::default(), 0).is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SubscriptionMetrics {
    /// The topic.
    pub topic: String,
    /// The handler.
    pub handler: String,
    /// Messages accepted for this handler and not yet finished by it (acked or
    /// dead-lettered): queued, waiting for their key or a retry, or being handled. With a
    /// shared backend (Redis), what this process accepted, replayed or claimed for it.
    pub lag: u64,
    /// Whether it is paused ([`EventBus::pause`](crate::EventBus::pause)): it starts nothing
    /// new, and its lag grows with every message sent to its topic.
    pub paused: bool,
    /// Its copies waiting in its queue (part of `lag`).
    pub queue_depth: u64,
    /// The time its deliveries have waited, in all, for its handler's rate
    /// ([`HandlerSpec::rate`](crate::HandlerSpec::rate)) before they started; zero without
    /// a rate.
    pub rate_limited: Duration,
}

/// Figures of the whole node (process) at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
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
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// Per topic, by name.
    pub topics: BTreeMap<String, TopicMetrics>,
    /// Per handler, by name: its copies of its topic's messages.
    pub handlers: BTreeMap<String, TopicMetrics>,
    /// Per subscription (a handler of a topic), sorted by topic, then handler: lag and
    /// pause state. The bus's own `_system.` topics' subscriptions are there too.
    #[serde(default)]
    pub subscriptions: Vec<SubscriptionMetrics>,
    /// Per worker, by name.
    pub workers: BTreeMap<String, WorkerMetrics>,
    /// The node as a whole.
    pub node: NodeMetrics,
    /// The node's name ([`node_name`](crate::node_name), or the builder's).
    pub node_name: String,
    /// The node's type.
    pub node_type: NodeType,
    /// The bus's name (`EventBusBuilder::name`, or `<node name>-<n>` for the process's `n`th
    /// bus, counted from 0): the `bus` label of every exported series.
    pub bus: String,
    /// The WAL's counters, with whether it has failed ([`WalStats::failed`]).
    #[serde(default)]
    pub wal: WalStats,
}

impl MetricsSnapshot {
    /// The counters of `topic`, if the bus has it.
    pub fn topic(&self, topic: &str) -> Option<TopicMetrics> {
        self.topics.get(topic).copied()
    }

    /// The counters of one handler (its copies of its topic's messages).
    pub fn handler(&self, name: &str) -> Option<TopicMetrics> {
        self.handlers.get(name).copied()
    }

    /// The subscription of `handler` on `topic`, if the bus has it.
    pub fn subscription(&self, topic: &str, handler: &str) -> Option<&SubscriptionMetrics> {
        self.subscriptions
            .iter()
            .find(|s| s.topic == topic && s.handler == handler)
    }

    /// The subscriptions of `topic` (one per handler), by handler name.
    pub fn subscriptions_of<'a>(
        &'a self,
        topic: &'a str,
    ) -> impl Iterator<Item = &'a SubscriptionMetrics> + 'a {
        self.subscriptions.iter().filter(move |s| s.topic == topic)
    }

    /// The counters of one worker.
    pub fn worker(&self, name: &str) -> Option<WorkerMetrics> {
        self.workers.get(name).copied()
    }
}
