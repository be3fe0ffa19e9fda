//! [`PgConsumer`]: claims a subscription's rows for this process, in batches, oldest first,
//! with `FOR UPDATE SKIP LOCKED` (so the workers of every process compete without waiting
//! on each other), and settles them through the writer.
//!
//! An empty claim waits for a wake-up (a notification, see `listener.rs`) or for the next
//! row due later, whichever comes first; it queries nothing more while it waits. A row
//! claimed again after its holder's lease ran out (`lease.rs`) counts one more delivery;
//! past the factory's `max_deliveries` it is dead-lettered instead of delivered, so a
//! message that kills every process that handles it stops.
//!
//! It also claims from this process's lane of the subscription (its copies of broadcasts,
//! messages addressed to its workers), when a notification named the lane or a claim from
//! it came back full: a subscription whose lane is quiet costs no second claim. A
//! subscription of a cluster-wide system topic has only the lane.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use event_base_core::backend::{Claimed, EConsumer, QueuedRetry, Receipt};
use event_base_core::constant::MAX_WAIT;
use event_base_core::{DeadReason, EMessage, QueueError};
use tokio::sync::oneshot;
use tokio_postgres::Row;

use crate::codec;
use crate::error::PostgresError;
use crate::link::is_connection_error;
use crate::queue::lease::millis;
use crate::queue::sub_queue::SubQueue;
use crate::queue::writer::Op;

/// The consumer of one subscription (see the module docs).
pub(crate) struct PgConsumer {
    q: Arc<SubQueue>,
}

impl PgConsumer {
    pub(crate) fn new(q: Arc<SubQueue>) -> PgConsumer {
        PgConsumer { q }
    }

    fn push(&self, op: Op) -> Result<(), QueueError> {
        self.q
            .shared
            .ops
            .send(op)
            .map_err(|_| QueueError::Closed(self.q.topic.clone()))
    }

    /// Claims from this process's lane, if it may hold claimable rows, then from the
    /// subscription. A takeover (`takeover`) looks only at the subscription (this process's
    /// lane is its own: the lease keeper renews what it holds there), unless the lane is all
    /// there is.
    async fn claim_both(
        &self,
        takeover: Option<Duration>,
        max: usize,
        out: &mut Vec<Claimed>,
    ) -> Result<usize, QueueError> {
        let mut n = 0;
        let look = match takeover {
            Some(_) => self.q.fan_out,
            None => self.q.wake.take_lane(),
        };
        if look {
            n = match self.claim_with(true, takeover, max, out).await {
                Ok(n) => n,
                Err(e) => {
                    self.q.wake.lane_again();
                    return Err(e);
                }
            };
            if n == max {
                self.q.wake.lane_again();
            }
        }
        if n < max && !self.q.fan_out {
            n += self.claim_with(false, takeover, max - n, out).await?;
        }
        Ok(n)
    }

    /// Runs a claim or a takeover (`takeover`) on the lane or the subscription (`lane`) and
    /// turns its rows into claims (a lane's with `Receipt::lo` 1: not counted in the bound).
    async fn claim_with(
        &self,
        lane: bool,
        takeover: Option<Duration>,
        max: usize,
        out: &mut Vec<Claimed>,
    ) -> Result<usize, QueueError> {
        let shared = &self.q.shared;
        let conn = shared.claims.conn().await?;
        let name: &str = if lane { &self.q.lane } else { &self.q.name };
        let owner: &str = &shared.owner;
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        conn.ran(1);
        let rows = match takeover {
            None => {
                conn.client
                    .query(&conn.st.claim, &[&name, &owner, &limit])
                    .await
            }
            Some(idle) => {
                let ms = millis(idle);
                conn.client
                    .query(&conn.st.take_over, &[&name, &owner, &limit, &ms])
                    .await
            }
        };
        let mut rows = match rows {
            Ok(rows) => rows,
            Err(e) => {
                if is_connection_error(&e, &conn.client) {
                    shared.claims.drop_conn(&conn).await;
                }
                return Err(PostgresError::Statement {
                    what: "a claim",
                    source: e,
                }
                .into());
            }
        };
        rows.sort_by_key(|r| r.get::<_, i64>(0));
        let before = out.len();
        let mut seqs = Vec::with_capacity(rows.len());
        for row in rows {
            let seq: i64 = row.get(0);
            let deliveries: i32 = row.get(3);
            if u32::try_from(deliveries).unwrap_or(u32::MAX) > shared.settings.max_deliveries {
                self.bury(
                    seq,
                    lane,
                    deliveries,
                    "was taken over from consumers that vanished",
                )?;
                continue;
            }
            match decode(&row) {
                Ok(message) => {
                    seqs.push(seq);
                    out.push(Claimed {
                        message: Arc::new(message),
                        receipt: Receipt {
                            hi: u64::try_from(seq).unwrap_or(0),
                            lo: u64::from(lane),
                        },
                    });
                }
                Err(reason) => {
                    tracing::error!(target: "event_base::postgres", seq, %reason, "a queue row does not decode; it is dead-lettered");
                    self.bury(seq, lane, deliveries, &format!("does not decode: {reason}"))?;
                }
            }
        }
        shared.hold(seqs);
        Ok(out.len() - before)
    }

    /// Dead-letters row `seq` (one statement: it leaves the queue as it enters the dead
    /// letters).
    fn bury(&self, seq: i64, lane: bool, deliveries: i32, why: &str) -> Result<(), QueueError> {
        let reason = DeadReason::Other(format!(
            "delivered {deliveries} times and {why} (max_deliveries is {})",
            self.q.shared.settings.max_deliveries
        ));
        self.push(Op::Bury {
            seq,
            reason: codec::reason_column(&reason),
            handler: self.q.handler.clone(),
        })?;
        if !lane {
            self.q.settled(1);
        }
        self.q
            .shared
            .dead_letters
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Milliseconds until the next row falls due (in the subscription or the lane), if one
    /// is waiting.
    async fn next_due(&self) -> Option<Duration> {
        let conn = self.q.shared.claims.conn().await.ok()?;
        let names: [&str; 2] = [&self.q.name, &self.q.lane];
        conn.ran(1);
        let row = conn
            .client
            .query_one(&conn.st.next_due, &[&&names[..]])
            .await
            .ok()?;
        let ms: Option<f64> = row.get(0);
        ms.map(|ms| Duration::from_secs_f64((ms.max(0.0) + 1.0) / 1000.0).min(MAX_WAIT))
    }

    async fn settle(&self, claimed: &[Claimed], ack: bool) -> Result<(), QueueError> {
        if claimed.is_empty() {
            return Ok(());
        }
        let seqs: Vec<i64> = claimed
            .iter()
            .filter_map(|c| i64::try_from(c.receipt.hi).ok())
            .collect();
        let owner = self.q.shared.owner.clone();
        let (tx, rx) = oneshot::channel();
        let op = if ack {
            Op::Ack(seqs.clone(), owner, Some(tx))
        } else {
            Op::Release(seqs.clone(), owner, Some(tx))
        };
        self.push(op)?;
        let outcome = rx
            .await
            .map_err(|_| QueueError::Closed(self.q.topic.clone()))?;
        self.q.shared.let_go(seqs);
        if ack {
            // A lane's rows are not counted in the bound.
            self.q
                .settled(claimed.iter().filter(|c| c.receipt.lo == 0).count());
        }
        outcome.map(|_| ()).map_err(Into::into)
    }
}

/// The message of a claimed row.
fn decode(row: &Row) -> Result<EMessage, String> {
    codec::message(row.get(1), row.get(2))
}

#[async_trait]
impl EConsumer for PgConsumer {
    async fn claim_batch(&self, max: usize, out: &mut Vec<Claimed>) -> Result<usize, QueueError> {
        let max = max.max(1);
        crate::queue::tasks::start(&self.q.shared);
        loop {
            // Armed before looking, so a wake-up while the claim runs is not missed.
            let woken = self.q.wake.bell.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let closed = self.q.is_closed();
            let n = self.claim_both(None, max, out).await?;
            if n > 0 {
                return Ok(n);
            }
            if closed {
                return Err(QueueError::Closed(self.q.topic.clone()));
            }
            match self.next_due().await {
                Some(due) => {
                    let _ = tokio::time::timeout(due, woken).await;
                    // A row may have fallen due meanwhile, perhaps in the lane, which no
                    // notification names then: the next claim looks there too.
                    self.q.wake.lane_again();
                }
                None => woken.await,
            }
        }
    }

    /// Claims nothing without a round trip; says `Closed` once every producer here is gone.
    fn try_claim(&self, _max: usize, _out: &mut Vec<Claimed>) -> Result<usize, QueueError> {
        if self.q.is_closed() {
            return Err(QueueError::Closed(self.q.topic.clone()));
        }
        Ok(0)
    }

    async fn ack(&self, claimed: &[Claimed]) -> Result<(), QueueError> {
        self.settle(claimed, true).await
    }

    async fn nack(&self, claimed: &[Claimed]) -> Result<(), QueueError> {
        self.settle(claimed, false).await
    }

    async fn claim_stale(
        &self,
        min_idle: Duration,
        max: usize,
        out: &mut Vec<Claimed>,
    ) -> Result<usize, QueueError> {
        crate::queue::tasks::start(&self.q.shared);
        self.claim_both(Some(min_idle), max.max(1), out).await
    }

    fn keeps_retries(&self) -> bool {
        true
    }

    async fn retry_later(
        &self,
        claimed: &Claimed,
        next: &Arc<EMessage>,
        delay: Duration,
    ) -> Result<QueuedRetry, QueueError> {
        let seq = i64::try_from(claimed.receipt.hi).unwrap_or(-1);
        let (message, payload) = codec::columns(next);
        let (tx, rx) = oneshot::channel();
        self.push(Op::Retry {
            seq,
            owner: self.q.shared.owner.clone(),
            message,
            payload,
            delay_ms: millis(delay.min(MAX_WAIT)),
            answer: tx,
        })?;
        let n = rx
            .await
            .map_err(|_| QueueError::Closed(self.q.topic.clone()))??;
        self.q.shared.let_go([seq]);
        Ok(if n > 0 {
            QueuedRetry::Kept
        } else {
            QueuedRetry::Fenced
        })
    }
}
