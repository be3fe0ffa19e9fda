//! Decide: what a [`ShutdownStrategy`] means, as a [`ShutdownPlan`] of when to stop the
//! workers and how. Nothing here acts; `coordinator.rs` carries a plan out, so every strategy
//! runs through the same executor and a new strategy is one more arm here.

use std::time::Duration;

use tokio::time::Instant;

use crate::clock::{deadline_after, instant_after};
use crate::shutdown::strategy::ShutdownStrategy;

/// How often a wait for workers logs its progress when the strategy does not say.
const DEFAULT_POLL: Duration = Duration::from_secs(1);

/// What a strategy decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShutdownPlan {
    /// Stop one worker once it is idle; the bus keeps running.
    OneWorker {
        name: String,
        poll_interval: Duration,
    },
    /// Stop the whole bus: refuse sends, wait as `settle` says, stop the workers as `stop`
    /// says, then end every task and flush the WAL.
    Bus { settle: Settle, stop: Stop },
}

/// What to wait for, after sends are refused and before any worker is asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle {
    /// Nothing: go straight to stopping the workers.
    Nothing,
    /// Until nothing is in flight, or `deadline`.
    Idle { deadline: Instant },
    /// Until nothing is in flight that falls due before `deadline` (retries in backoff and
    /// delayed messages included): only messages whose timer fires after it may remain.
    DueBefore { deadline: Instant },
}

/// How the workers are stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Cancel every worker now; what it was handling stays `Processing` in the WAL.
    Abort,
    /// Ask the workers to stop after their current message, `group` at a time with `pause`
    /// between groups, and wait for each until `deadline` (if any; a handler's own
    /// `shutdown_timeout` caps it), logging every `poll_interval`. Cancel the rest then.
    Request {
        deadline: Option<Instant>,
        poll_interval: Duration,
        group: usize,
        pause: Duration,
    },
}

impl Stop {
    /// Every worker asked at once, waited for until `deadline`.
    fn all(deadline: Option<Instant>, poll_interval: Duration) -> Stop {
        Stop::Request {
            deadline,
            poll_interval,
            group: usize::MAX,
            pause: Duration::ZERO,
        }
    }
}

/// The plan of `strategy` for a shutdown that began at `started`. Its durations are clamped to
/// [`MAX_WAIT`](crate::constant::MAX_WAIT): a time limit of that or more is none
/// (`force_timeout`), or a deadline 30 years away (`total`, `timeout`), never an overflow.
pub(crate) fn plan(strategy: &ShutdownStrategy, started: Instant) -> ShutdownPlan {
    let bus = |settle, stop| ShutdownPlan::Bus { settle, stop };
    match strategy {
        ShutdownStrategy::Graceful {
            worker_name,
            poll_interval,
        } => ShutdownPlan::OneWorker {
            name: worker_name.clone(),
            poll_interval: *poll_interval,
        },
        ShutdownStrategy::Force => bus(Settle::Nothing, Stop::Abort),
        ShutdownStrategy::TwoStage {
            poll_interval,
            force_timeout,
        } => bus(
            Settle::Nothing,
            Stop::all(deadline_after(started, *force_timeout), *poll_interval),
        ),
        ShutdownStrategy::Timeout { total } => {
            let deadline = instant_after(started, *total);
            bus(
                Settle::Idle { deadline },
                Stop::all(Some(deadline), DEFAULT_POLL),
            )
        }
        ShutdownStrategy::StateBasedIdle => bus(Settle::Nothing, Stop::all(None, DEFAULT_POLL)),
        ShutdownStrategy::Batched {
            batch_size,
            interval,
        } => bus(
            Settle::Nothing,
            Stop::Request {
                deadline: None,
                poll_interval: DEFAULT_POLL,
                group: (*batch_size).max(1),
                pause: *interval,
            },
        ),
        ShutdownStrategy::Drain { timeout } => {
            let deadline = instant_after(started, *timeout);
            bus(
                Settle::DueBefore { deadline },
                Stop::all(Some(deadline), DEFAULT_POLL),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn force_aborts_without_waiting() {
        let now = Instant::now();
        assert_eq!(
            plan(&ShutdownStrategy::Force, now),
            ShutdownPlan::Bus {
                settle: Settle::Nothing,
                stop: Stop::Abort
            }
        );
    }

    #[test]
    fn deadlines_count_from_the_start_of_the_shutdown() {
        let now = Instant::now();
        let two_stage = ShutdownStrategy::TwoStage {
            poll_interval: Duration::from_millis(50),
            force_timeout: 3 * SEC,
        };
        assert_eq!(
            plan(&two_stage, now),
            ShutdownPlan::Bus {
                settle: Settle::Nothing,
                stop: Stop::all(Some(now + 3 * SEC), Duration::from_millis(50)),
            }
        );
        let timeout = ShutdownStrategy::Timeout { total: 5 * SEC };
        assert_eq!(
            plan(&timeout, now),
            ShutdownPlan::Bus {
                settle: Settle::Idle {
                    deadline: now + 5 * SEC
                },
                stop: Stop::all(Some(now + 5 * SEC), SEC),
            }
        );
        let drain = ShutdownStrategy::Drain { timeout: 7 * SEC };
        assert_eq!(
            plan(&drain, now),
            ShutdownPlan::Bus {
                settle: Settle::DueBefore {
                    deadline: now + 7 * SEC
                },
                stop: Stop::all(Some(now + 7 * SEC), SEC),
            }
        );
    }

    #[test]
    fn durations_past_the_clock_are_clamped_not_added() {
        let now = Instant::now();
        let far = now + crate::constant::MAX_WAIT;
        let two_stage = ShutdownStrategy::TwoStage {
            poll_interval: Duration::MAX,
            force_timeout: Duration::MAX,
        };
        assert_eq!(
            plan(&two_stage, now),
            ShutdownPlan::Bus {
                settle: Settle::Nothing,
                stop: Stop::all(None, Duration::MAX),
            }
        );
        let timeout = ShutdownStrategy::Timeout {
            total: Duration::MAX,
        };
        assert_eq!(
            plan(&timeout, now),
            ShutdownPlan::Bus {
                settle: Settle::Idle { deadline: far },
                stop: Stop::all(Some(far), SEC),
            }
        );
        let drain = ShutdownStrategy::Drain {
            timeout: Duration::MAX,
        };
        assert_eq!(
            plan(&drain, now),
            ShutdownPlan::Bus {
                settle: Settle::DueBefore { deadline: far },
                stop: Stop::all(Some(far), SEC),
            }
        );
    }

    #[test]
    fn idle_and_batched_never_cancel() {
        let now = Instant::now();
        assert_eq!(
            plan(&ShutdownStrategy::StateBasedIdle, now),
            ShutdownPlan::Bus {
                settle: Settle::Nothing,
                stop: Stop::all(None, SEC),
            }
        );
        let batched = ShutdownStrategy::Batched {
            batch_size: 0,
            interval: 2 * SEC,
        };
        assert_eq!(
            plan(&batched, now),
            ShutdownPlan::Bus {
                settle: Settle::Nothing,
                stop: Stop::Request {
                    deadline: None,
                    poll_interval: SEC,
                    group: 1, // a batch of 0 would never end: at least 1
                    pause: 2 * SEC,
                },
            }
        );
    }

    #[test]
    fn graceful_names_one_worker() {
        let graceful = ShutdownStrategy::Graceful {
            worker_name: "billing-0".into(),
            poll_interval: SEC,
        };
        assert_eq!(
            plan(&graceful, Instant::now()),
            ShutdownPlan::OneWorker {
                name: "billing-0".into(),
                poll_interval: SEC
            }
        );
    }
}
