//! [`Backoff`]: how long to wait before the next delivery of a failed message.
//!
//! The *decision* to retry is the handler's answer (`Ack::NoAck`) or the worker's policy for
//! panics and timeouts; this value only says *how long* to wait. Attach one to a handler with
//! [`HandlerSpec::backoff`](crate::HandlerSpec::backoff). Without one, panics and timeouts
//! wait 100 ms, doubling, and `NoAck { retry_after: None }` is delivered again at once.

use std::time::Duration;

use crate::message::id::random_u64;

/// Exponential backoff with an optional cap and jitter.
///
/// ```
/// use event_base_core::Backoff;
/// use std::time::Duration;
///
/// let b = Backoff::exponential(Duration::from_millis(100)).max_delay(Duration::from_secs(1));
/// assert_eq!(b.delay(1), Duration::from_millis(100)); // after the first delivery failed
/// assert_eq!(b.delay(2), Duration::from_millis(200));
/// assert_eq!(b.delay(9), Duration::from_secs(1));     // capped
///
/// let j = Backoff::exponential(Duration::from_millis(100)).jitter(0.5);
/// let d = j.delay(1);
/// assert!(d >= Duration::from_millis(50) && d <= Duration::from_millis(100));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    base: Duration,
    factor: f64,
    max: Duration,
    jitter: f64,
}

impl Default for Backoff {
    /// 100 ms, doubling, capped at one minute, no jitter.
    fn default() -> Self {
        Backoff::exponential(Duration::from_millis(
            crate::constant::DEFAULT_BACKOFF_BASE_MS,
        ))
    }
}

impl Backoff {
    /// Starts at `base` and doubles on every further failure, capped at one minute.
    pub fn exponential(base: Duration) -> Self {
        Backoff {
            base,
            factor: 2.0,
            max: Duration::from_secs(60),
            jitter: 0.0,
        }
    }

    /// Always `delay`.
    pub fn fixed(delay: Duration) -> Self {
        Backoff {
            base: delay,
            factor: 1.0,
            max: delay,
            jitter: 0.0,
        }
    }

    /// Multiplies the delay by `factor` (at least 1) on every further failure.
    pub fn factor(mut self, factor: f64) -> Self {
        self.factor = if factor.is_finite() {
            factor.max(1.0)
        } else {
            1.0
        };
        self
    }

    /// Caps the delay.
    pub fn max_delay(mut self, max: Duration) -> Self {
        self.max = max;
        self
    }

    /// Takes up to `fraction` (0..=1) off each delay at random, so that many messages failing
    /// together do not all come back at the same instant.
    pub fn jitter(mut self, fraction: f64) -> Self {
        self.jitter = if fraction.is_finite() {
            fraction.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self
    }

    /// The wait after delivery number `attempts` (1 for the first delivery) failed.
    pub fn delay(&self, attempts: u32) -> Duration {
        let exp = attempts.saturating_sub(1).min(63) as i32;
        let raw = self.base.as_secs_f64() * self.factor.powi(exp);
        let capped = raw.min(self.max.as_secs_f64());
        let jittered = if self.jitter > 0.0 {
            let r = (random_u64() >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
            capped * (1.0 - self.jitter * r)
        } else {
            capped
        };
        Duration::try_from_secs_f64(jittered).unwrap_or(self.max)
    }
}
