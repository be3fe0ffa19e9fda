//! [`Rate`]: how many handler starts a handler may make per period
//! ([`HandlerSpec::rate`](crate::HandlerSpec::rate), `#[handler(rate = "100/s")]`).

use std::str::FromStr;
use std::time::Duration;

use crate::error::CoreError;

/// At most `count` handler starts per `per`, across all of a handler's workers (and, on a
/// shared backend such as Redis, across every node running it). Starts are spaced evenly,
/// one every `per / count`: no burst, so no window of length `per` holds more than `count`.
/// Messages beyond the rate wait in the worker that claimed them: they are never dropped and
/// never count as failures.
///
/// ```
/// use std::time::Duration;
/// use event_base_core::Rate;
///
/// let rate: Rate = "100/s".parse()?;
/// assert_eq!(rate, Rate::per_second(100)?);
/// assert_eq!(rate.interval(), Duration::from_millis(10));
/// assert_eq!("30/m".parse::<Rate>()?.per(), Duration::from_secs(60));
/// assert_eq!("5/250ms".parse::<Rate>()?.interval(), Duration::from_millis(50));
/// assert!("0/s".parse::<Rate>().is_err());
/// assert!("fast".parse::<Rate>().is_err());
/// # Ok::<(), event_base_core::CoreError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    count: u32,
    per: Duration,
}

impl Rate {
    /// `count` starts per `per`. Refused with [`CoreError::InvalidParameter`] when `count`
    /// is 0 or `per` is zero.
    pub fn new(count: u32, per: Duration) -> Result<Rate, CoreError> {
        if count == 0 || per.is_zero() {
            return Err(invalid(
                format!("{count} per {per:?}"),
                "a rate needs at least one start per non-zero period, e.g. \"100/s\"",
            ));
        }
        Ok(Rate { count, per })
    }

    /// `count` starts a second.
    pub fn per_second(count: u32) -> Result<Rate, CoreError> {
        Rate::new(count, Duration::from_secs(1))
    }

    /// Starts allowed per [`per`](Self::per).
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The period.
    pub fn per(&self) -> Duration {
        self.per
    }

    /// The time between two starts: `per / count` (at least a nanosecond).
    pub fn interval(&self) -> Duration {
        (self.per / self.count).max(Duration::from_nanos(1))
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{:?}", self.count, self.per)
    }
}

fn invalid(value: String, reason: &str) -> CoreError {
    CoreError::InvalidParameter {
        name: "rate",
        value,
        reason: reason.to_owned(),
    }
}

/// Parses `"<count>/<period>"`: the period is `s`, `m` or `h` (one of them), or a number
/// with `ms`, `s`, `m` or `h` (`"5/250ms"`, `"100/10s"`).
impl FromStr for Rate {
    type Err = CoreError;

    fn from_str(text: &str) -> Result<Rate, CoreError> {
        match parse(text) {
            Ok((count, nanos)) => Rate::new(count, Duration::from_nanos(nanos)),
            Err(reason) => Err(invalid(text.to_owned(), reason)),
        }
    }
}

const FORM: &str =
    "write a rate as \"<count>/<period>\", at least one per non-zero period: \"100/s\", \"30/m\", \"1000/h\", \"5/250ms\"";

/// The count and the period in nanoseconds of a rate written `"<count>/<period>"`. A
/// `const fn`, so that `#[handler(rate = "..")]` checks its rate as the crate compiles
/// ([`check_rate`]).
const fn parse(text: &str) -> Result<(u32, u64), &'static str> {
    let b = text.as_bytes();
    let mut i = 0;
    // A number, after spaces; `None` if there is no digit.
    const fn number(b: &[u8], mut i: usize) -> (Option<u64>, usize) {
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        let mut n: u64 = 0;
        let mut digits = 0;
        while i < b.len() && b[i].is_ascii_digit() {
            n = match n.checked_mul(10) {
                Some(n) => match n.checked_add((b[i] - b'0') as u64) {
                    Some(n) => n,
                    None => return (None, i),
                },
                None => return (None, i),
            };
            digits += 1;
            i += 1;
        }
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        (if digits > 0 { Some(n) } else { None }, i)
    }
    let (count, at) = number(b, i);
    i = at;
    let count = match count {
        Some(c) if c > 0 && c <= u32::MAX as u64 => c as u32,
        _ => return Err(FORM),
    };
    if i >= b.len() || b[i] != b'/' {
        return Err(FORM);
    }
    let (amount, at) = number(b, i + 1);
    i = at;
    let amount = match amount {
        Some(0) => return Err(FORM),
        Some(a) => a,
        None => 1,
    };
    let mut end = b.len();
    while end > i && b[end - 1] == b' ' {
        end -= 1;
    }
    let unit: u64 = match end - i {
        1 if b[i] == b's' => 1_000_000_000,
        1 if b[i] == b'm' => 60_000_000_000,
        1 if b[i] == b'h' => 3_600_000_000_000,
        2 if b[i] == b'm' && b[i + 1] == b's' => 1_000_000,
        _ => return Err(FORM),
    };
    match amount.checked_mul(unit) {
        Some(nanos) => Ok((count, nanos)),
        None => Err(FORM),
    }
}

/// Fails to compile (in a `const`) when `text` is not a rate: what `#[handler(rate = "..")]`
/// expands to, so a bad rate is an error where it is written. (Hidden: the macro's.)
#[doc(hidden)]
pub const fn check_rate(text: &str) {
    if parse(text).is_err() {
        panic!("invalid `rate`: write it as \"<count>/<period>\", at least one per non-zero period: \"100/s\", \"30/m\", \"1000/h\", \"5/250ms\"");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_form_parses_and_bad_ones_say_how_to_write_one() {
        for (text, count, per) in [
            ("100/s", 100, Duration::from_secs(1)),
            (" 30 / m ", 30, Duration::from_secs(60)),
            ("1000/h", 1000, Duration::from_secs(3600)),
            ("5/250ms", 5, Duration::from_millis(250)),
            ("100/10s", 100, Duration::from_secs(10)),
        ] {
            let rate: Rate = text.parse().unwrap();
            assert_eq!((rate.count(), rate.per()), (count, per), "{text}");
        }
        for text in [
            "",
            "100",
            "/s",
            "x/s",
            "100/",
            "100/d",
            "100/0s",
            "0/s",
            "-1/s",
            "1/99999999999h",
        ] {
            let err = text.parse::<Rate>().unwrap_err();
            assert!(
                matches!(err, CoreError::InvalidParameter { name: "rate", .. }),
                "{text}: {err}"
            );
        }
    }
}
