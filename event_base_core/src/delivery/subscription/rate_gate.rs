//! [`RateGate`]: what paces a subscription's handler starts when its handler has a
//! [`Rate`]: in one process a GCRA clock (`Gcra`), on a shared backend the backend's
//! [`RateLimiter`]. Deciding how long to wait is here; the worker waits
//! (`worker/mod.rs`, before a delivery starts).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::rate_limiter::RateLimiter;
use crate::handler::rate::Rate;

/// A subscription's pace.
pub(crate) enum RateGate {
    /// Kept in this process.
    Local(Gcra),
    /// Kept by the shared backend, for every process running the handler.
    Shared(Arc<dyn RateLimiter>),
}

impl RateGate {
    /// Reserves the next start; how long to wait before it (zero: now).
    pub(crate) async fn reserve(&self) -> Duration {
        match self {
            RateGate::Local(gcra) => gcra.reserve(),
            RateGate::Shared(limiter) => match limiter.reserve().await {
                Ok(wait) => wait,
                Err(e) => {
                    tracing::warn!(target: crate::constant::target::DELIVERY, error = %e, "the shared rate limit did not answer; starting the delivery without waiting");
                    Duration::ZERO
                }
            },
        }
    }
}

/// The generic cell rate algorithm with no burst: a theoretical arrival time (`tat`) that
/// each start pushes one interval on. A start due before the clock reads now goes at once;
/// otherwise it waits until its slot. Lock-free: a reservation is one compare-and-swap.
/// Read on the runtime's clock, so a test's paused clock paces it.
pub(crate) struct Gcra {
    origin: Instant,
    interval: u64,
    /// Nanoseconds since `origin` of the next free slot.
    tat: AtomicU64,
}

impl Gcra {
    pub(crate) fn new(rate: Rate) -> Gcra {
        Gcra {
            origin: Instant::now(),
            interval: u64::try_from(rate.interval().as_nanos()).unwrap_or(u64::MAX),
            tat: AtomicU64::new(0),
        }
    }

    /// Reserves the next slot: how long until it.
    pub(crate) fn reserve(&self) -> Duration {
        let now = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            let slot = tat.max(now);
            match self.tat.compare_exchange_weak(
                tat,
                slot.saturating_add(self.interval),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Duration::from_nanos(slot - now),
                Err(seen) => tat = seen,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn starts_are_spaced_one_interval_apart_and_idle_time_is_not_saved_up() {
        let gcra = Gcra::new(Rate::per_second(10).unwrap());
        assert_eq!(gcra.reserve(), Duration::ZERO);
        assert_eq!(gcra.reserve(), Duration::from_millis(100));
        assert_eq!(gcra.reserve(), Duration::from_millis(200));
        tokio::time::advance(Duration::from_secs(5)).await;
        // Five idle seconds give no burst: the next start goes now, the one after waits.
        assert_eq!(gcra.reserve(), Duration::ZERO);
        assert_eq!(gcra.reserve(), Duration::from_millis(100));
    }
}
