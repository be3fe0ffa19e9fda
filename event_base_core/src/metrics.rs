//! Per-topic counters and their snapshot ([`MetricsSnapshot`], [`TopicMetrics`]).
//!
//! Counters are relaxed atomics owned by each topic, bumped on the hot path without locks;
//! a snapshot reads them all at one moment.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Live counters of one topic.
#[derive(Debug, Default)]
pub(crate) struct TopicCounters {
    pub(crate) sent: AtomicU64,
    pub(crate) handled: AtomicU64,
    pub(crate) acked: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) dead: AtomicU64,
}

impl TopicCounters {
    #[inline]
    pub(crate) fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, queue_depth: usize) -> TopicMetrics {
        TopicMetrics {
            sent: self.sent.load(Ordering::Relaxed),
            handled: self.handled.load(Ordering::Relaxed),
            acked: self.acked.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            dead: self.dead.load(Ordering::Relaxed),
            queue_depth: queue_depth as u64,
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
    /// Messages waiting in the topic's queue.
    pub queue_depth: u64,
}

/// Counters of every topic at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsSnapshot {
    /// Per topic, by name.
    pub topics: BTreeMap<String, TopicMetrics>,
}

impl MetricsSnapshot {
    /// The counters of `topic`, if the bus has it.
    pub fn topic(&self, topic: &str) -> Option<TopicMetrics> {
        self.topics.get(topic).copied()
    }
}
