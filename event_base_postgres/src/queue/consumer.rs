//! [`PgConsumer`]: claims a subscription's rows for this process, in batches, oldest first,
//! with `FOR UPDATE SKIP LOCKED` (so the workers of every process compete without waiting
//! on each other), and settles them through the writer.
//!
//! An empty claim waits for a wake-up (a notification, see `listener.rs`) or for the next
//! row due later, whichever comes first; it queries nothing more while it waits. A row
//! claimed again after its holder's lease ran out (`lease.rs`) counts one more delivery;
//! past the factory's `max_deliveries` it is dead-lettered instead of delivered, so a
//! message that kills every process that handles it stops.

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

    /// Runs `statement` (a claim or a takeover) and turns its rows into claims.
    async fn claim_with(
        &self,
        takeover: Option<Duration>,
        max: usize,
        out: &mut Vec<Claimed>,
    ) -> Result<usize, QueueError> {
        let shared = &self.q.shared;
        let conn = shared.claims.conn().await?;
        let name: &str = &self.q.name;
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
                            lo: 0,
                        },
                    });
                }
                Err(reason) => {
                    tracing::error!(target: "event_base::postgres", seq, %reason, "a queue row does not decode; it is dead-lettered");
                    self.bury(seq, deliveries, &format!("does not decode: {reason}"))?;
                }
            }
        }
        shared.hold(seqs);
        Ok(out.len() - before)
    }

    /// Dead-letters row `seq` (one statement: it leaves the queue as it enters the dead
    /// letters).
    fn bury(&self, seq: i64, deliveries: i32, why: &str) -> Result<(), QueueError> {
        let reason = DeadReason::Other(format!(
            "delivered {deliveries} times and {why} (max_deliveries is {})",
            self.q.shared.settings.max_deliveries
        ));
        self.push(Op::Bury {
            seq,
            reason: codec::reason_column(&reason),
            handler: self.q.handler.clone(),
        })?;
        self.q.settled(1);
        self.q
            .shared
            .dead_letters
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Milliseconds until the next row falls due, if one is waiting.
    async fn next_due(&self) -> Option<Duration> {
        let conn = self.q.shared.claims.conn().await.ok()?;
        let name: &str = &self.q.name;
        conn.ran(1);
        let row = conn
            .client
            .query_one(&conn.st.next_due, &[&name])
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
            self.q.settled(claimed.len());
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
            let woken = self.q.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let closed = self.q.is_closed();
            let n = self.claim_with(None, max, out).await?;
            if n > 0 {
                return Ok(n);
            }
            if closed {
                return Err(QueueError::Closed(self.q.topic.clone()));
            }
            match self.next_due().await {
                Some(due) => {
                    let _ = tokio::time::timeout(due, woken).await;
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
        self.claim_with(Some(min_idle), max.max(1), out).await
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
