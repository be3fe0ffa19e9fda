//! Points in time computed from durations an application gave (a send's timeout, a delay, a
//! shutdown strategy's durations, a retry's delay, a batch's linger).
//!
//! `Instant::now() + Duration::MAX` panics, and a panic after the WAL append strands a message
//! (DESIGN §14). So no caller-supplied duration is added to a clock reading anywhere else: it
//! goes through one of these, which clamp it to [`MAX_WAIT`] and add with checked arithmetic.
//!
//! - [`deadline_after`]: a time limit. `None` (no limit) for a wait of `MAX_WAIT` or more.
//! - [`instant_after`]: a timer that must fire at some point (a delayed delivery, a shutdown
//!   deadline): at most `MAX_WAIT` ahead, which is never in practice.
//! - [`system_after`]: the same on the wall clock (a retry's `deliver_at`); [`latest_due`]
//!   clamps a `deliver_at` the application set.
//! - [`period`]: the period of a `tokio::time::interval`, which panics on zero and overflows
//!   past `MAX_WAIT`.
//! - [`Pace`]: a rate (things per second, a float) as the gap between two things: refused
//!   unless it is a finite number of at least one per `MAX_WAIT` (`1.0 / 1e-300` seconds
//!   overflows `Duration`).

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::constant::MAX_WAIT;
use crate::error::CoreError;

/// The shortest period a repeating timer runs at.
const MIN_PERIOD: Duration = Duration::from_millis(1);

/// The deadline `wait` after `from`, or `None` (no time limit) for a wait of [`MAX_WAIT`] or
/// more, or one past what the clock can represent.
pub(crate) fn deadline_after(from: Instant, wait: Duration) -> Option<Instant> {
    if wait >= MAX_WAIT {
        return None;
    }
    from.checked_add(wait)
}

/// The point `wait` after `from` for a timer that has to have one: `wait` clamped to
/// [`MAX_WAIT`] (and, on a clock that cannot reach even that far, halved until it can).
pub(crate) fn instant_after(from: Instant, wait: Duration) -> Instant {
    let mut wait = wait.min(MAX_WAIT);
    loop {
        // Terminates: `from + 0` is `from`.
        if let Some(at) = from.checked_add(wait) {
            return at;
        }
        wait /= 2;
    }
}

/// [`instant_after`] on the wall clock.
pub(crate) fn system_after(from: SystemTime, wait: Duration) -> SystemTime {
    let mut wait = wait.min(MAX_WAIT);
    loop {
        if let Some(at) = from.checked_add(wait) {
            return at;
        }
        wait /= 2;
    }
}

/// `at`, or, if it is further ahead, [`MAX_WAIT`] from now: the latest `deliver_at` the bus
/// keeps, so that every clock and backend can count down to it.
pub(crate) fn latest_due(at: SystemTime) -> SystemTime {
    at.min(system_after(SystemTime::now(), MAX_WAIT))
}

/// `every` as the period of a repeating timer: 1 ms to [`MAX_WAIT`].
pub(crate) fn period(every: Duration) -> Duration {
    every.clamp(MIN_PERIOD, MAX_WAIT)
}

/// At most so many things a second: thing `i` is due `i` gaps after the start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Pace {
    gap: Duration,
}

impl Pace {
    /// `per_second` things a second, or [`CoreError::InvalidParameter`] (named `name`) unless
    /// it is finite and at least one per [`MAX_WAIT`]. A rate whose gap is under a
    /// nanosecond has no gap.
    pub(crate) fn per_second(name: &'static str, per_second: f64) -> Result<Pace, CoreError> {
        let slowest = 1.0 / MAX_WAIT.as_secs_f64();
        if !per_second.is_finite() || per_second < slowest {
            return Err(CoreError::InvalidParameter {
                name,
                value: format!("{per_second:?}"),
                reason: format!(
                    "a rate is a finite number of at least {slowest:e} per second (one per 30 years, `constant::MAX_WAIT`); pass a positive rate such as 10.0"
                ),
            });
        }
        // In range: at most `MAX_WAIT` (rounding aside, which `min` takes back).
        let gap = Duration::try_from_secs_f64(1.0 / per_second)
            .unwrap_or(MAX_WAIT)
            .min(MAX_WAIT);
        Ok(Pace { gap })
    }

    /// The gap between two things.
    #[cfg(test)]
    pub(crate) fn gap(&self) -> Duration {
        self.gap
    }

    /// When thing number `i` (from 0) is due, for things paced from `start`: at most
    /// [`MAX_WAIT`] after it.
    pub(crate) fn due(&self, start: Instant, i: usize) -> Instant {
        let after = u32::try_from(i)
            .ok()
            .and_then(|i| self.gap.checked_mul(i))
            .unwrap_or(MAX_WAIT);
        instant_after(start, after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_past_the_maximum_is_no_deadline() {
        let now = Instant::now();
        assert_eq!(deadline_after(now, Duration::MAX), None);
        assert_eq!(deadline_after(now, MAX_WAIT), None);
        let second = Duration::from_secs(1);
        assert_eq!(deadline_after(now, second), Some(now + second));
    }

    #[test]
    fn a_timer_past_the_maximum_fires_at_the_maximum() {
        let now = Instant::now();
        assert_eq!(instant_after(now, Duration::MAX), now + MAX_WAIT);
        assert_eq!(instant_after(now, Duration::ZERO), now);
        let wall = SystemTime::now();
        assert_eq!(system_after(wall, Duration::MAX), wall + MAX_WAIT);
    }

    #[test]
    fn a_pace_is_a_finite_rate_of_at_least_one_per_max_wait() {
        for bad in [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -1.0,
            0.0,
            1e-300,
            f64::MIN_POSITIVE,
            5e-324,
        ] {
            match Pace::per_second("max_per_second", bad) {
                Err(CoreError::InvalidParameter { name, .. }) => assert_eq!(name, "max_per_second"),
                other => panic!("{bad}: expected InvalidParameter, got {other:?}"),
            }
        }
        let slowest = 1.0 / MAX_WAIT.as_secs_f64();
        assert!(Pace::per_second("r", slowest).unwrap().gap() <= MAX_WAIT);
        assert_eq!(Pace::per_second("r", 1e300).unwrap().gap(), Duration::ZERO);
        let ten = Pace::per_second("r", 10.0).unwrap();
        assert_eq!(ten.gap(), Duration::from_millis(100));
        let now = Instant::now();
        assert_eq!(ten.due(now, 0), now);
        assert_eq!(ten.due(now, 20), now + Duration::from_secs(2));
        let slow = Pace::per_second("r", slowest).unwrap();
        assert_eq!(slow.due(now, usize::MAX), now + MAX_WAIT);
    }

    #[test]
    fn a_period_is_never_zero_nor_past_the_maximum() {
        assert_eq!(period(Duration::ZERO), MIN_PERIOD);
        assert_eq!(period(Duration::MAX), MAX_WAIT);
        assert_eq!(period(Duration::from_secs(2)), Duration::from_secs(2));
    }
}
