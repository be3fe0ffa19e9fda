//! Turning a wall-clock due time (`deliver_at`) into a point on the runtime's clock.
//!
//! Reading both clocks for every conversion is not enough: a thread taken off the CPU between
//! the two reads shifts that one due time by as long as it was away, and two messages due a few
//! microseconds apart then fire in the wrong order. So the scheduler converts against one
//! anchor, a pair of readings taken close together, and conversions against one anchor keep
//! the order of the wall-clock times exactly. The anchor is taken again once a second, so a wall
//! clock that was stepped (NTP, an operator) is followed within that second.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// How long one anchor is used before the clocks are read again.
const ANCHOR_FOR: Duration = Duration::from_secs(1);

/// Attempts at a tight pair of readings; the one with the shortest gap is kept.
const READINGS: usize = 4;

/// The same moment on both clocks.
#[derive(Clone, Copy, Debug)]
struct Anchor {
    instant: Instant,
    wall: SystemTime,
}

impl Anchor {
    /// Reads the wall clock between two reads of the runtime's clock, a few times, and keeps
    /// the tightest pair (a preemption makes one pair loose, rarely all of them).
    fn take() -> Anchor {
        let mut best: Option<(Duration, Anchor)> = None;
        for _ in 0..READINGS {
            let before = Instant::now();
            let wall = SystemTime::now();
            let after = Instant::now();
            let gap = after.saturating_duration_since(before);
            if best.is_none_or(|(g, _)| gap < g) {
                best = Some((
                    gap,
                    Anchor {
                        instant: before + gap / 2,
                        wall,
                    },
                ));
            }
        }
        match best {
            Some((_, anchor)) => anchor,
            None => Anchor {
                instant: Instant::now(),
                wall: SystemTime::now(),
            },
        }
    }

    fn convert(&self, at: SystemTime) -> Instant {
        match at.duration_since(self.wall) {
            // At most `MAX_WAIT` ahead (a `deliver_at` centuries away is never, not a panic).
            Ok(ahead) => crate::clock::instant_after(self.instant, ahead),
            // Already due: an earlier point still keeps due times in order among themselves.
            Err(past) => self
                .instant
                .checked_sub(past.duration())
                .unwrap_or(self.instant),
        }
    }
}

/// The conversion the scheduler's handle uses for every wall-clock due time.
#[derive(Debug)]
pub(crate) struct WallClock {
    anchor: Mutex<Anchor>,
}

impl WallClock {
    pub(crate) fn new() -> WallClock {
        WallClock {
            anchor: Mutex::new(Anchor::take()),
        }
    }

    /// The point on the runtime's clock at which `at` falls due. Two calls against the same
    /// anchor never swap the order of their wall-clock times.
    pub(crate) fn instant_for(&self, at: SystemTime) -> Instant {
        let mut anchor = match self.anchor.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        if Instant::now().saturating_duration_since(anchor.instant) > ANCHOR_FOR {
            *anchor = Anchor::take();
        }
        anchor.convert(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn due_times_keep_their_order_and_their_distance_from_now() {
        let clock = WallClock::new();
        let now = SystemTime::now();
        let times: Vec<SystemTime> = (0..1000u64)
            .map(|i| now + Duration::from_nanos(i * 997 % 5000))
            .collect();
        let mut pairs: Vec<(SystemTime, Instant)> =
            times.iter().map(|&t| (t, clock.instant_for(t))).collect();
        pairs.sort_by_key(|p| p.0);
        assert!(
            pairs.windows(2).all(|w| w[0].1 <= w[1].1),
            "conversion swapped two due times"
        );
        // A time a second ahead lands about a second ahead on the runtime's clock.
        let ahead = clock.instant_for(SystemTime::now() + Duration::from_secs(1));
        let left = ahead.saturating_duration_since(Instant::now());
        assert!(left > Duration::from_millis(500) && left <= Duration::from_secs(1));
    }

    #[tokio::test]
    async fn a_time_long_past_is_due_now_without_panicking() {
        let clock = WallClock::new();
        let at = clock.instant_for(SystemTime::UNIX_EPOCH);
        assert!(at <= Instant::now());
    }
}
