//! [`LatencyHistogram`]: a lock-free histogram of durations, and its [`LatencySummary`].
//!
//! Values are recorded in nanoseconds into logarithmic buckets with four linear steps per
//! power of two, so any percentile is known within 25 % whatever the scale, with one relaxed
//! atomic add per sample (plus a rare one for a new maximum) and no lock. Percentiles report the upper bound of their bucket.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

const BUCKETS: usize = 64 * 4;

/// A histogram of durations, shared by any number of recorders.
pub struct LatencyHistogram {
    buckets: Box<[AtomicU64]>,
    max_ns: AtomicU64,
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("summary", &self.summary())
            .finish()
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max_ns: AtomicU64::new(0),
        }
    }
}

fn bucket_of(ns: u64) -> usize {
    if ns < 4 {
        return ns as usize;
    }
    let log = 63 - ns.leading_zeros() as usize; // >= 2
    let step = ((ns >> (log - 2)) & 3) as usize;
    ((log - 1) * 4 + step).min(BUCKETS - 1)
}

fn upper_bound(bucket: usize) -> u64 {
    if bucket < 4 {
        return bucket as u64;
    }
    let log = bucket / 4 + 1;
    let step = (bucket % 4) as u64;
    // Bucket covers [(4 + step) << (log - 2), (5 + step) << (log - 2)).
    ((5 + step) << (log - 2)).saturating_sub(1)
}

impl LatencyHistogram {
    /// Records one sample.
    #[inline]
    pub fn record(&self, d: Duration) {
        let ns = d.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        // The maximum rarely changes: a plain load first keeps this to one atomic write.
        if ns > self.max_ns.load(Ordering::Relaxed) {
            self.max_ns.fetch_max(ns, Ordering::Relaxed);
        }
    }

    /// One histogram holding the samples of all of `parts` (a topic's, from its handlers').
    pub(crate) fn merged<'a>(parts: impl IntoIterator<Item = &'a LatencyHistogram>) -> Self {
        let out = LatencyHistogram::default();
        for part in parts {
            for (sum, b) in out.buckets.iter().zip(part.buckets.iter()) {
                sum.fetch_add(b.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            out.max_ns
                .fetch_max(part.max_ns.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        out
    }

    fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// The value below which `q` (0..=1) of the samples fall.
    pub fn percentile(&self, q: f64) -> Duration {
        let total = self.count();
        if total == 0 {
            return Duration::ZERO;
        }
        let rank = ((total as f64) * q.clamp(0.0, 1.0)).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            seen += b.load(Ordering::Relaxed);
            if seen >= rank {
                let max = self.max_ns.load(Ordering::Relaxed);
                return Duration::from_nanos(upper_bound(i).min(max));
            }
        }
        Duration::from_nanos(self.max_ns.load(Ordering::Relaxed))
    }

    /// The samples by bucket, smallest first: for every bucket holding any, its upper bound
    /// (never above the largest sample, as [`percentile`](Self::percentile) reports it) and
    /// how many samples it holds. Each sample is at most its bucket's bound and at least 4/5
    /// of it. What an exporter needs to build histograms of its own buckets (the server's
    /// `GET /metrics` does).
    ///
    /// ```
    /// # use event_base_core::LatencyHistogram;
    /// # use std::time::Duration;
    /// let h = LatencyHistogram::default();
    /// h.record(Duration::from_millis(1));
    /// h.record(Duration::from_millis(1));
    /// h.record(Duration::from_secs(2));
    /// let buckets = h.buckets();
    /// assert_eq!(buckets.iter().map(|(_, n)| n).sum::<u64>(), 3);
    /// assert_eq!(buckets.last(), Some(&(Duration::from_secs(2), 1)));
    /// assert!(buckets[0].0 >= Duration::from_millis(1) && buckets[0].0 <= Duration::from_micros(1250));
    /// ```
    pub fn buckets(&self) -> Vec<(Duration, u64)> {
        let max = self.max_ns.load(Ordering::Relaxed);
        self.buckets
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                let n = b.load(Ordering::Relaxed);
                (n > 0).then(|| (Duration::from_nanos(upper_bound(i).min(max)), n))
            })
            .collect()
    }

    /// Count, p50, p90, p99 and max.
    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            count: self.count(),
            p50: self.percentile(0.50),
            p90: self.percentile(0.90),
            p99: self.percentile(0.99),
            max: Duration::from_nanos(self.max_ns.load(Ordering::Relaxed)),
        }
    }
}

/// How much of a [`LatencyHistogram`] has been exported to the `metrics` facade, so that each
/// export hands on only the samples recorded since the one before (feature `metrics`).
///
/// Kept per bus (beside the histogram it follows), not per exporter, so that any number of
/// `MetricsManager`s of one bus, exporting at once or in turn, never hand a sample on twice.
#[cfg(feature = "metrics")]
#[derive(Debug, Default)]
pub(crate) struct ExportedBuckets {
    /// Per bucket, the count already handed on; allocated at the first export.
    seen: std::sync::OnceLock<Box<[AtomicU64]>>,
}

#[cfg(feature = "metrics")]
impl ExportedBuckets {
    /// Calls `f(value, n)` for every bucket of `h` with `n` samples recorded since the last
    /// call, `value` being the bucket's upper bound (never above the largest sample), as
    /// [`LatencyHistogram::percentile`] reports it.
    pub(crate) fn take_new(&self, h: &LatencyHistogram, mut f: impl FnMut(Duration, u64)) {
        let seen = self
            .seen
            .get_or_init(|| (0..BUCKETS).map(|_| AtomicU64::new(0)).collect());
        let max = h.max_ns.load(Ordering::Relaxed);
        for (i, (bucket, seen)) in h.buckets.iter().zip(seen.iter()).enumerate() {
            let now = bucket.load(Ordering::Relaxed);
            // `fetch_max`: of two exports at once, the one that read less hands on nothing.
            let before = seen.fetch_max(now, Ordering::Relaxed);
            if now > before {
                f(Duration::from_nanos(upper_bound(i).min(max)), now - before);
            }
        }
    }
}

/// Percentiles of a [`LatencyHistogram`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LatencySummary {
    /// Samples recorded.
    pub count: u64,
    /// Median.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Largest sample.
    pub max: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_within_a_quarter() {
        let h = LatencyHistogram::default();
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        let p50 = h.percentile(0.5).as_micros() as f64;
        let p99 = h.percentile(0.99).as_micros() as f64;
        assert!((500.0..=625.0).contains(&p50), "p50 {p50}");
        assert!((990.0..=1000.0).contains(&p99), "p99 {p99}");
        assert_eq!(h.summary().count, 1000);
        assert_eq!(h.summary().max, Duration::from_micros(1000));
    }

    #[cfg(feature = "metrics")]
    #[test]
    fn an_export_hands_on_each_sample_once() {
        let h = LatencyHistogram::default();
        let exported = ExportedBuckets::default();
        let total = |e: &ExportedBuckets| {
            let mut n = 0;
            e.take_new(&h, |_, k| n += k);
            n
        };
        for us in 1..=10u64 {
            h.record(Duration::from_micros(us));
        }
        assert_eq!(total(&exported), 10);
        assert_eq!(total(&exported), 0);
        h.record(Duration::from_millis(3));
        let mut values = Vec::new();
        exported.take_new(&h, |v, k| values.push((v, k)));
        assert_eq!(values.len(), 1);
        let (v, k) = values[0];
        assert_eq!(k, 1);
        assert!(
            v <= Duration::from_millis(3) && v >= Duration::from_micros(2250),
            "{v:?}"
        );
    }

    #[test]
    fn buckets_are_monotonic() {
        let mut last = 0;
        for ns in (0..100_000u64).step_by(7) {
            let b = bucket_of(ns);
            assert!(b >= last);
            assert!(upper_bound(b) >= ns, "{ns} above bucket {b}");
            last = b;
        }
    }
}
