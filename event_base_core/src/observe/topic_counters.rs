//! [`TopicCounters`]: the hot-path recorder of one topic, bumped by senders and workers.
//!
//! Relaxed atomics, no locks; latencies go into lock-free histograms. Nothing here reads a
//! running bus: [`MetricsStore`](crate::MetricsStore) reads these counters into a snapshot.

use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(feature = "metrics")]
use crate::observe::latency_histogram::ExportedBuckets;
use crate::observe::latency_histogram::LatencyHistogram;
use crate::observe::snapshot::TopicMetrics;

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
    /// What of `queue_wait` and `handler_time` was exported already (feature `metrics`).
    #[cfg(feature = "metrics")]
    pub(crate) exported: [ExportedBuckets; 2],
}

#[derive(Debug, Default)]
struct SenderCounts {
    /// Accepted messages, refused ones included: only ever goes up.
    accepted: AtomicU64,
    /// Accepted messages withdrawn after all (their send failed): only ever goes up.
    refused: AtomicU64,
    /// Messages the WAL held unfinished at start, delivered again.
    replayed: AtomicU64,
    /// Sends answered as duplicates (dedup window), not delivered again.
    duplicates: AtomicU64,
}

#[derive(Debug, Default)]
struct WorkerCounts {
    handled: AtomicU64,
    acked: AtomicU64,
    retried: AtomicU64,
    dead: AtomicU64,
    /// Messages that reached a final state (complete or dead).
    finished: AtomicU64,
    /// Nanoseconds deliveries waited for their handler's rate (`HandlerSpec::rate`).
    rate_waited_ns: AtomicU64,
}

impl TopicCounters {
    #[inline]
    pub(crate) fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A message was accepted by a send.
    #[inline]
    pub(crate) fn accepted(&self) {
        Self::add(&self.sender.accepted);
    }

    /// A send was a duplicate: its id was sent before, within the dedup window.
    pub(crate) fn duplicate(&self) {
        Self::add(&self.sender.duplicates);
    }

    /// A message the WAL held unfinished at start is delivered again.
    pub(crate) fn replayed(&self) {
        Self::add(&self.sender.replayed);
    }

    /// An accepted message was withdrawn after all: it does not count as sent. Counted apart
    /// rather than taken off `accepted`, so that every counter only goes up.
    #[inline]
    pub(crate) fn refused(&self) {
        Self::add(&self.sender.refused);
    }

    /// A message reached its final state.
    #[inline]
    pub(crate) fn finished(&self) {
        Self::add(&self.worker.finished);
    }

    /// A delivery waited `waited` for its handler's rate before it started.
    pub(crate) fn rate_waited(&self, waited: std::time::Duration) {
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.worker.rate_waited_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The time deliveries waited for their handler's rate, in all.
    pub(crate) fn rate_limited(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.worker.rate_waited_ns.load(Ordering::Relaxed))
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

    /// The counters of a topic with several handlers: its messages as `self` counted them,
    /// its deliveries summed over its handlers' counters (`subs`, with their queue depths).
    pub(crate) fn snapshot_of_topic<'a>(
        &self,
        subs: impl Iterator<Item = (&'a TopicCounters, usize)> + Clone,
    ) -> TopicMetrics {
        let mut m = self.snapshot(0);
        for (c, depth) in subs.clone() {
            m.handled += c.worker.handled.load(Ordering::Relaxed);
            m.acked += c.worker.acked.load(Ordering::Relaxed);
            m.retried += c.worker.retried.load(Ordering::Relaxed);
            m.dead += c.worker.dead.load(Ordering::Relaxed);
            m.queue_depth += depth as u64;
        }
        m.queue_wait = LatencyHistogram::merged(subs.clone().map(|(c, _)| &c.queue_wait)).summary();
        m.handler_time = LatencyHistogram::merged(subs.map(|(c, _)| &c.handler_time)).summary();
        m
    }

    /// Messages of the topic accepted (or replayed) and not yet final, read as
    /// [`snapshot`](Self::snapshot) reads them (so never negative).
    pub(crate) fn in_flight(&self) -> u64 {
        let finished = self.worker.finished.load(Ordering::Acquire);
        let refused = self.sender.refused.load(Ordering::Acquire);
        let replayed = self.sender.replayed.load(Ordering::Acquire);
        let accepted = self.sender.accepted.load(Ordering::Acquire);
        (accepted.saturating_sub(refused) + replayed).saturating_sub(finished)
    }

    pub(crate) fn snapshot(&self, queue_depth: usize) -> TopicMetrics {
        // Finished first, accepted last: a message is accepted before it is refused or
        // finishes, so the difference read in this order is never negative.
        let finished = self.worker.finished.load(Ordering::Acquire);
        let refused = self.sender.refused.load(Ordering::Acquire);
        let replayed = self.sender.replayed.load(Ordering::Acquire);
        let accepted = self.sender.accepted.load(Ordering::Acquire);
        let sent = accepted.saturating_sub(refused);
        TopicMetrics {
            sent,
            accepted,
            refused,
            replayed,
            duplicates: self.sender.duplicates.load(Ordering::Relaxed),
            handled: self.worker.handled.load(Ordering::Relaxed),
            acked: self.worker.acked.load(Ordering::Relaxed),
            retried: self.worker.retried.load(Ordering::Relaxed),
            dead: self.worker.dead.load(Ordering::Relaxed),
            in_flight: (sent + replayed).saturating_sub(finished),
            queue_depth: queue_depth as u64,
            queue_wait: self.queue_wait.summary(),
            handler_time: self.handler_time.summary(),
        }
    }
}
