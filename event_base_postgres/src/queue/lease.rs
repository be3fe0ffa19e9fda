//! The lease keeper: renews the leases of the rows this process holds every third of the
//! visibility timeout, and every half of it frees the claims, of any process, whose lease
//! ran out a whole timeout ago (their process died or hangs), so that any consumer can
//! claim those rows again. A freed row counts one more delivery when claimed again; past
//! the factory's `max_deliveries` it is dead-lettered instead (`consumer.rs`).
//!
//! It also beats for this process in `event_base_nodes` (once a bus described it), every
//! third of the visibility timeout: with the freeing, what a process runs while nothing
//! happens (by default one statement every 10 s and one every 15 s, whatever the number of
//! subscriptions).

use std::sync::Weak;
use std::time::Duration;

use tokio::time::Instant;

use crate::queue::shared::Shared;

/// Runs until the factory is gone.
pub(crate) async fn run(shared: Weak<Shared>) {
    let Some(s) = shared.upgrade() else { return };
    let visibility = s.settings.visibility;
    let mut stop = s.stop.subscribe();
    drop(s);
    let renew_every = visibility / 3;
    let expire_every = visibility / 2;
    let mut next_expire = Instant::now() + expire_every;
    loop {
        tokio::select! {
            () = tokio::time::sleep(renew_every.min(expire_every)) => {}
            _ = stop.changed() => return,
        }
        let Some(s) = shared.upgrade() else { return };
        let held = s.held_now();
        let Ok(conn) = s.claims.conn().await else {
            continue;
        };
        if !held.is_empty() {
            let owner: &str = &s.owner;
            conn.ran(1);
            if let Err(e) = conn.client.execute(&conn.st.renew, &[&held, &owner]).await {
                tracing::warn!(target: "event_base::postgres", error = %e, "could not renew the leases of the messages being handled");
            }
        }
        if s.described().is_some() {
            let id: &str = &s.owner;
            conn.ran(1);
            if let Err(e) = conn.client.execute(&conn.st.beat, &[&id]).await {
                tracing::warn!(target: "event_base::postgres", error = %e, "could not record this process's beat");
            }
        }
        if Instant::now() >= next_expire {
            next_expire = Instant::now() + expire_every;
            let ms = millis(visibility);
            conn.ran(1);
            if let Err(e) = conn.client.execute(&conn.st.expire, &[&ms]).await {
                tracing::warn!(target: "event_base::postgres", error = %e, "could not free the claims whose lease ran out");
            }
        }
    }
}

/// `d` in milliseconds, as the statements take it.
pub(crate) fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
