//! Which slots a schedule fires: [`Schedule`] (when) and [`CatchUp`] (which of the slots
//! missed while no bus ran it). Pure arithmetic on wall-clock times, no I/O: every node
//! running a schedule computes the same slots, which is what makes a slot's message id
//! (`<name>:<slot time>`) the same everywhere.

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use crate::error::CoreError;

/// When a schedule fires (see [`EventBus::schedule`](crate::EventBus::schedule)).
///
/// - [`Schedule::every`]: every `period`, at the multiples of `period` since the Unix epoch
///   (UTC), so that every node, and every start, has the same slots: `every(1 min)` fires at
///   each whole minute, `every(200 ms)` at .000, .200, .400, … of each second. The period is
///   counted in whole milliseconds, at least one.
/// - [`Schedule::cron`]: a cron expression of 6 or 7 fields, **seconds first**
///   (`sec min hour day-of-month month day-of-week [year]`), evaluated in **UTC** (the
///   [`cron`](https://docs.rs/cron) crate's syntax: `*`, lists, ranges, steps, names such as
///   `Mon` and `May`).
///
/// ```
/// use event_base_core::Schedule;
/// use std::time::Duration;
/// let nightly = Schedule::cron("0 30 2 * * *")?;      // 02:30:00 UTC every day
/// let weekdays = Schedule::cron("0 0 9 * * Mon-Fri")?; // 09:00:00 UTC, Monday to Friday
/// let often = Schedule::every(Duration::from_secs(10));
/// assert!(Schedule::cron("*/5 * * * *").is_err());     // five fields: no seconds
/// # Ok::<(), event_base_core::CoreError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Schedule {
    kind: Kind,
    catch_up: CatchUp,
}

#[derive(Clone, Debug)]
enum Kind {
    Every(Duration),
    Cron(Box<cron::Schedule>),
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.spec() == other.spec() && self.catch_up == other.catch_up
    }
}

impl Schedule {
    /// Every `period` (whole milliseconds, at least one; checked when the schedule is
    /// registered), at the multiples of `period` since the Unix epoch.
    pub fn every(period: Duration) -> Schedule {
        Schedule {
            kind: Kind::Every(period),
            catch_up: CatchUp::default(),
        }
    }

    /// The same schedule with `policy` for the slots missed while no bus ran it
    /// (default [`CatchUp::One`]).
    ///
    /// ```
    /// use event_base_core::{CatchUp, Schedule};
    /// let hourly = Schedule::cron("0 0 * * * *")?.catch_up(CatchUp::All);
    /// assert_eq!(hourly.catch_up_policy(), CatchUp::All);
    /// # Ok::<(), event_base_core::CoreError>(())
    /// ```
    pub fn catch_up(mut self, policy: CatchUp) -> Schedule {
        self.catch_up = policy;
        self
    }

    /// Its policy for missed slots.
    pub fn catch_up_policy(&self) -> CatchUp {
        self.catch_up
    }

    /// A cron expression: 6 or 7 fields, seconds first, in UTC (see [`Schedule`]). Fails
    /// with [`CoreError::InvalidParameter`] on an expression the parser refuses.
    pub fn cron(expression: &str) -> Result<Schedule, CoreError> {
        let parsed =
            cron::Schedule::from_str(expression).map_err(|e| CoreError::InvalidParameter {
                name: "cron expression",
                value: expression.to_owned(),
                reason: format!("{e}; write 6 or 7 fields, seconds first: `sec min hour day-of-month month day-of-week [year]` (UTC), e.g. `0 30 2 * * *`"),
            })?;
        Ok(Schedule {
            kind: Kind::Cron(Box::new(parsed)),
            catch_up: CatchUp::default(),
        })
    }

    /// The period of an `every` schedule, `None` for a cron one.
    pub fn period(&self) -> Option<Duration> {
        match &self.kind {
            Kind::Every(p) => Some(*p),
            Kind::Cron(_) => None,
        }
    }

    /// The expression of a cron schedule, `None` for an `every` one.
    pub fn expression(&self) -> Option<&str> {
        match &self.kind {
            Kind::Every(_) => None,
            Kind::Cron(c) => Some(c.source()),
        }
    }

    /// Refuses a period the slots cannot be computed with.
    pub(crate) fn check(&self) -> Result<(), CoreError> {
        if let Kind::Every(p) = &self.kind {
            if p.as_millis() == 0 || u64::try_from(p.as_millis()).is_err() {
                return Err(CoreError::InvalidParameter {
                    name: "period",
                    value: format!("{p:?}"),
                    reason: "a schedule's period is counted in whole milliseconds: give at least 1 ms (and less than 500 million years)".to_owned(),
                });
            }
        }
        Ok(())
    }

    /// The first slot strictly after `t`; `None` if there is none (a cron expression with
    /// no later match, or past the clock's range).
    pub(crate) fn next_after(&self, t: SystemTime) -> Option<SystemTime> {
        match &self.kind {
            Kind::Every(p) => {
                let period = u64::try_from(p.as_millis()).ok().filter(|p| *p > 0)?;
                let now = millis(t)?;
                let next = (now / period).checked_add(1)?.checked_mul(period)?;
                UNIX_EPOCH.checked_add(Duration::from_millis(next))
            }
            Kind::Cron(c) => {
                let after: DateTime<Utc> = DateTime::<Utc>::from(t);
                c.after(&after).next().map(SystemTime::from)
            }
        }
    }

    /// What is stored for it.
    pub(crate) fn spec(&self) -> Spec {
        match &self.kind {
            Kind::Every(p) => Spec::EveryMillis(u64::try_from(p.as_millis()).unwrap_or(u64::MAX)),
            Kind::Cron(c) => Spec::Cron(c.source().to_owned()),
        }
    }

    pub(crate) fn from_spec(spec: &Spec, catch_up: CatchUp) -> Result<Schedule, CoreError> {
        let schedule = match spec {
            Spec::EveryMillis(ms) => Schedule::every(Duration::from_millis(*ms)),
            Spec::Cron(text) => Schedule::cron(text)?,
        };
        Ok(schedule.catch_up(catch_up))
    }
}

impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Every(p) => write!(f, "every {p:?}"),
            Kind::Cron(c) => write!(f, "cron `{}` (UTC)", c.source()),
        }
    }
}

/// A schedule as the WAL keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Spec {
    EveryMillis(u64),
    Cron(String),
}

/// What a schedule does with the slots it missed while no bus ran it (the process was
/// down), when a bus takes it up again: after a restart, from the last slot the WAL
/// recorded as fired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CatchUp {
    /// Fire the latest missed slot once (with its own slot time), then go on: a job that
    /// must run after downtime, but once, not once per missed slot. The default.
    #[default]
    One,
    /// Fire every missed slot, oldest first (at most [`MAX_CATCH_UP`] of them, the latest
    /// ones): each slot stands for work of its own (a report per hour).
    All,
    /// Fire no missed slot; go on with the next one.
    None,
}

/// The most missed slots [`CatchUp::All`] fires after downtime: the latest ones.
pub const MAX_CATCH_UP: usize = 1000;

impl CatchUp {
    /// The slots to fire now, oldest first: those of `schedule` after `last` (the last slot
    /// fired) and at or before `now`, as this policy picks them.
    pub(crate) fn missed(
        self,
        schedule: &Schedule,
        last: SystemTime,
        now: SystemTime,
    ) -> Vec<SystemTime> {
        if self == CatchUp::None {
            return Vec::new();
        }
        let keep = if self == CatchUp::One {
            1
        } else {
            MAX_CATCH_UP
        };
        let mut slots = std::collections::VecDeque::new();
        let mut at = last;
        // A period's slots older than the ones kept need not be walked through one by one.
        if let Some(period) = schedule.period() {
            let span = u32::try_from(keep + 1)
                .ok()
                .and_then(|n| period.checked_mul(n));
            if let Some(from) = span.and_then(|span| now.checked_sub(span)) {
                at = at.max(from);
            }
        }
        while let Some(next) = schedule.next_after(at) {
            if next > now {
                break;
            }
            slots.push_back(next);
            if slots.len() > keep {
                slots.pop_front();
            }
            at = next;
        }
        slots.into()
    }
}

/// Milliseconds since the Unix epoch; `None` before it.
pub(crate) fn millis(t: SystemTime) -> Option<u64> {
    t.duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_millis()).ok())
}

/// A slot's time as it appears in its message id: RFC 3339 in UTC, milliseconds
/// (`2026-12-05T02:30:00.000Z`).
pub(crate) fn slot_text(t: SystemTime) -> String {
    DateTime::<Utc>::from(t).to_rfc3339_opts(SecondsFormat::Millis, true)
}
