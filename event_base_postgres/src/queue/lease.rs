//! The lease keeper: renews the leases of the rows this process holds every third of the
//! visibility timeout, and every half of it frees the claims, of any process, whose lease
//! ran out a whole timeout ago (their process died or hangs), so that any consumer can
//! claim those rows again. A freed row counts one more delivery when claimed again; past
//! the factory's `max_deliveries` it is dead-lettered instead (`consumer.rs`).
//!
//! It also keeps this process's record in `event_base_nodes` (once a bus described it or a
//! consumer was made), every third of the visibility timeout:
//! - **the beat**: the record's `last_seen` is now. A beat that finds no record after one
//!   that did (or after a committed write of it) means another process evicted this one (it was paused or cut off for the
//!   whole timeout): the record is written again, whole (workers, subscriptions), and the
//!   bus is told ([`RemoteRoutes::on_revived`](event_base_core::backend::RemoteRoutes::on_revived)),
//!   which announces its workers as joined again.
//! - **the eviction**, after the freeing of claims found a process silent for the whole
//!   timeout: the records of such processes are deleted, with their lanes (what was addressed to their workers is
//!   dead-lettered; their copies of broadcasts are dropped), in one transaction of the
//!   writer, and the bus is told of each that had workers listed
//!   ([`RemoteRoutes::on_evicted`](event_base_core::backend::RemoteRoutes::on_evicted)),
//!   which announces them as dead. Of processes evicting at once, one gets each record.
//!
//! What a process runs while nothing happens: by default one statement every 10 s (the
//! beat) and one every 15 s (the freeing, which also says whether a process is silent: only
//! then does the eviction run, on the writer's connection), whatever the number of
//! subscriptions.

use std::sync::Weak;
use std::time::Duration;

use event_base_core::backend::{EvictedNode, NodeWorker};
use tokio::time::Instant;

use crate::queue::shared::Shared;
use crate::queue::writer::{EvictedRow, Op};

/// Runs until the factory is gone.
pub(crate) async fn run(shared: Weak<Shared>) {
    let Some(s) = shared.upgrade() else { return };
    let visibility = s.settings.visibility;
    let mut stop = s.stop.subscribe();
    drop(s);
    let renew_every = visibility / 3;
    let expire_every = visibility / 2;
    let mut next_expire = Instant::now() + expire_every;
    // Whether the last beat found this process's record (or, `Record::confirmed`, a write
    // of it was committed since the last beat that did not).
    let mut found = false;
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
        if s.recorded() {
            let confirmed = s.record().confirmed;
            let id: &str = &s.owner;
            conn.ran(1);
            match conn.client.execute(&conn.st.beat, &[&id]).await {
                Ok(0) if found || confirmed => {
                    found = false;
                    s.record().confirmed = false;
                    revived(&s);
                }
                Ok(n) => found |= n > 0,
                Err(e) => {
                    tracing::warn!(target: "event_base::postgres", error = %e, "could not record this process's beat");
                }
            }
        }
        if Instant::now() >= next_expire {
            next_expire = Instant::now() + expire_every;
            let ms = millis(visibility);
            conn.ran(1);
            let silent = match conn.client.query_one(&conn.st.expire, &[&ms]).await {
                Ok(row) => row.get::<_, bool>(1),
                Err(e) => {
                    tracing::warn!(target: "event_base::postgres", error = %e, "could not free the claims whose lease ran out");
                    false
                }
            };
            drop(conn);
            if silent {
                // Off the keeper's loop: the eviction waits for the writer, and the next
                // renewal must not.
                let shared = shared.clone();
                tokio::spawn(async move {
                    if let Some(s) = shared.upgrade() {
                        evict(&s, ms).await;
                    }
                });
            }
        }
    }
}

/// This process's record was deleted by another's eviction: writes it again, and tells
/// the bus.
fn revived(s: &Shared) {
    tracing::warn!(target: "event_base::postgres", node = %s.owner, "this process was taken for dead and evicted (paused or cut off for the visibility timeout); it records itself again");
    let _ = s.ops.send(s.record_again());
    s.listeners().revived.retain(|listener| listener());
}

/// Evicts the processes silent for `ms` milliseconds (see the module docs).
async fn evict(s: &Shared, ms: f64) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    if s.ops
        .send(Op::Evict {
            within_ms: ms,
            answer: tx,
        })
        .is_err()
    {
        return;
    }
    let evicted = match rx.await {
        Ok(Ok(evicted)) => evicted,
        Ok(Err(e)) => {
            tracing::warn!(target: "event_base::postgres", error = %e, "could not evict the silent processes; trying again later");
            return;
        }
        Err(_) => return,
    };
    for row in evicted {
        tracing::info!(target: "event_base::postgres", node = %row.id, name = %row.name, dead_lettered = row.dead_lettered, "evicted a silent process");
        if let Some(node) = evicted_node(row) {
            s.listeners()
                .evicted
                .retain(|listener| listener(node.clone()));
        }
    }
}

/// What the bus is told of an evicted process: `None` if it had no workers listed (it
/// stopped them, or never ran any).
fn evicted_node(row: EvictedRow) -> Option<EvictedNode> {
    let workers: Vec<NodeWorker> = match serde_json::from_str(&row.workers) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(target: "event_base::postgres", node = %row.id, error = %e, "an evicted process's workers' list is not readable; its workers are not announced dead");
            return None;
        }
    };
    (!workers.is_empty()).then(|| EvictedNode::new(row.name, workers, row.last_seen))
}

/// `d` in milliseconds, as the statements take it.
pub(crate) fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
