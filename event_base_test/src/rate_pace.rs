//! What the rate tests across processes share (`redis_rate_limits.rs`,
//! `postgres_rate_limits.rs`): the starts two buses made, and the check that together they
//! kept to one rate.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The start of every delivery, with the bus that made it; the `Notify` is rung at each.
#[derive(Debug, Default)]
pub struct Starts(pub Mutex<Vec<(Instant, &'static str)>>, pub Notify);

impl Starts {
    /// Records a start by `bus`.
    pub fn record(&self, bus: &'static str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((Instant::now(), bus));
        self.1.notify_waiters();
    }

    /// Waits until `n` starts are recorded, failing after 20 s.
    pub async fn reach(&self, n: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let added = self.1.notified();
            tokio::pin!(added);
            // Listening before the look, so a start in between is not missed.
            added.as_mut().enable();
            let have = self.0.lock().unwrap_or_else(|e| e.into_inner()).len();
            if have >= n {
                return;
            }
            if tokio::time::timeout_at(deadline, added).await.is_err() {
                panic!("{have} of {n} handled in 20 s");
            }
        }
    }

    /// The starts, in time order.
    pub fn sorted(&self) -> Vec<(Instant, &'static str)> {
        let mut taken = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        taken.sort();
        taken
    }
}

/// Checks 48 starts at 50/s (a slot every 20 ms) shared by buses `a` and `b`. Tolerance: a
/// start runs at its slot or later (the server's clock decides the slot; a timer never
/// fires early); lateness only bunches starts already reserved, one a worker (4 in all): no
/// 250 ms holds more than its 13 slots and 4 late starts, and with 100 ms for the first
/// start's lateness, 48 starts span at least 47 × 20 − 100 ms. Two buses pacing themselves
/// apart would take about half that.
pub fn assert_shared_50_per_second(taken: &[(Instant, &'static str)]) {
    assert_eq!(taken.len(), 48, "every message once");
    // Both buses took a share, so the pace held across them, not within one.
    let on_b = taken.iter().filter(|(_, n)| *n == "b").count();
    assert!((1..48).contains(&on_b), "bus b handled {on_b} of 48");
    let span = taken[47].0 - taken[0].0;
    assert!(
        span >= Duration::from_millis(47 * 20 - 100),
        "48 starts in {span:?}"
    );
    for (i, (first, _)) in taken.iter().enumerate() {
        let within = taken[i..]
            .iter()
            .take_while(|(t, _)| *t - *first < Duration::from_millis(250))
            .count();
        assert!(within <= 17, "{within} starts within 250 ms");
    }
}
