//! [`PostgresQueueWal`]: the WAL of a bus on PostgreSQL queues, a façade over the queues'
//! tables (as `RedisWal` is over Redis's keys): the rows are the log, so there is no second
//! record to keep.
//!
//! | state | in PostgreSQL |
//! |---|---|
//! | `Pending` | a row of `event_base_queue` nobody holds (due, or `due_at` ahead: a delayed message, a retry waiting out its delay) |
//! | `Processing` | a row held (`claimed_by`, lease renewed) |
//! | `Complete` | gone: deleted by its ack |
//! | `Failed` | a row of `event_base_dead_letters` |
//!
//! So `begin`, `complete`, `retry` and `cancel` do nothing (the queue's statements make the
//! transitions), `pending` is empty (recovery is the lease: any process claims a row whose
//! holder died), `fail` writes the dead letter through the queues' writer, ahead of the
//! ack of its row, and `append` does nothing but delete the dead letter of a message this
//! process listed or made, when it is sent again (a replay).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use event_base_core::backend::{StoredSchedule, Wal, WalCommit, WalRecord, WalStats};
use event_base_core::{DeadLetterMessage, DeadReason, EMessage, WalError};
use tokio::sync::oneshot;
use tokio_postgres::Row;

use crate::codec;
use crate::error::PostgresError;
use crate::queue::shared::Shared;
use crate::queue::writer::{DeadRow, Op};

/// The dead letters this process knows by id, at most this many.
const KNOWN_DEAD: usize = 100_000;

/// The WAL over a [`PostgresQueueFactory`](crate::PostgresQueueFactory)'s tables (see the
/// module docs), made by [`PostgresQueueFactory::wal`](crate::PostgresQueueFactory::wal).
///
/// What survives follows PostgreSQL's settings, as for [`PostgresWal`](crate::PostgresWal):
/// with `synchronous_commit = on` (the default) a committed send survives a crash of the
/// server and a power loss.
#[derive(Clone)]
pub struct PostgresQueueWal {
    shared: Arc<Shared>,
    known_dead: Arc<Mutex<HashSet<String>>>,
}

impl std::fmt::Debug for PostgresQueueWal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresQueueWal")
            .field("owner", &self.shared.owner)
            .finish_non_exhaustive()
    }
}

impl PostgresQueueWal {
    pub(crate) fn new(shared: Arc<Shared>) -> PostgresQueueWal {
        PostgresQueueWal {
            shared,
            known_dead: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    fn known(&self) -> MutexGuard<'_, HashSet<String>> {
        self.known_dead.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, op: Op) -> Result<(), WalError> {
        self.shared.ops.send(op).map_err(|_| WalError::Failed {
            cause: "the PostgreSQL queues' writer stopped".into(),
        })
    }

    /// Everything queued on the writer before this is committed.
    async fn barrier(&self) -> Result<(), WalError> {
        crate::queue::tasks::start(&self.shared);
        let (tx, rx) = oneshot::channel();
        self.push(Op::Flush(tx))?;
        match rx.await {
            Ok(r) => r.map(|_| ()).map_err(Into::into),
            Err(_) => Err(WalError::Failed {
                cause: "the PostgreSQL queues' writer stopped".into(),
            }),
        }
    }

    async fn query(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        what: &'static str,
    ) -> Result<Vec<Row>, WalError> {
        let conn = self.shared.claims.conn().await?;
        conn.ran(1);
        Ok(conn
            .client
            .query(sql, params)
            .await
            .map_err(PostgresError::statement(what))?)
    }
}

/// The columns a dead letter is read by.
const DEAD_COLUMNS: &str = "id, message, payload, reason, handlers, died_at";

fn dead_letter(row: &Row) -> Result<DeadLetterMessage, PostgresError> {
    let id: String = row.get(0);
    let bad = |reason: String| PostgresError::Undecodable {
        id: id.clone(),
        reason,
    };
    let message = codec::message(row.get(1), row.get(2)).map_err(bad)?;
    let reason: DeadReason =
        serde_json::from_str(row.get(3)).map_err(|e| bad(format!("column `reason`: {e}")))?;
    Ok(DeadLetterMessage {
        attempts: message.attempts,
        message,
        reason,
        died_at: row.get(5),
        handlers: row.get(4),
    })
}

#[async_trait]
impl Wal for PostgresQueueWal {
    fn append(&self, message: &Arc<EMessage>) -> Result<WalCommit, WalError> {
        // The queue's insert is the record. A dead letter sent again leaves the dead
        // letters, ahead of its row on the writer.
        if self.known().remove(message.id.as_str()) {
            self.push(Op::Undead(message.id.to_string()))?;
            let _ =
                self.shared
                    .dead_letters
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
        Ok(WalCommit::durable())
    }

    fn append_unique(&self, message: &Arc<EMessage>) -> Result<Option<WalCommit>, WalError> {
        self.append(message).map(Some)
    }

    fn begin(&self, _id: &str) -> Result<bool, WalError> {
        // A claimed row is live by definition (acked rows are deleted); another process
        // may have sent it.
        Ok(true)
    }

    fn complete(&self, _id: &str) -> Result<(), WalError> {
        Ok(())
    }

    fn retry(&self, _message: &Arc<EMessage>) -> Result<(), WalError> {
        Ok(())
    }

    fn fail(
        &self,
        message: &Arc<EMessage>,
        reason: &DeadReason,
        handlers: &[String],
    ) -> Result<(), WalError> {
        let (json, payload) = codec::columns(message);
        self.push(Op::Dead(DeadRow {
            id: message.id.to_string(),
            topic: message.topic.as_str().to_owned(),
            message: json,
            payload,
            reason: codec::reason_column(reason),
            handlers: handlers.to_vec(),
        }))?;
        self.shared.dead_letters.fetch_add(1, Ordering::Relaxed);
        let mut known = self.known();
        if known.len() < KNOWN_DEAD {
            known.insert(message.id.to_string());
        }
        Ok(())
    }

    fn cancel(&self, _id: &str) -> Result<Option<WalCommit>, WalError> {
        // Nothing precedes the insert, so a refused send left nothing behind.
        Ok(Some(WalCommit::durable()))
    }

    async fn pending(&self) -> Result<Vec<WalRecord>, WalError> {
        Ok(Vec::new())
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetterMessage>, WalError> {
        self.barrier().await?;
        let rows = self
            .query(
                &format!("SELECT {DEAD_COLUMNS} FROM event_base_dead_letters ORDER BY died_at"),
                &[],
                "the read of the dead letters",
            )
            .await?;
        let all = rows
            .iter()
            .map(dead_letter)
            .collect::<Result<Vec<_>, _>>()?;
        {
            let mut known = self.known();
            known.clear();
            known.extend(
                all.iter()
                    .take(KNOWN_DEAD)
                    .map(|d| d.message.id.to_string()),
            );
        }
        self.shared
            .dead_letters
            .store(all.len() as u64, Ordering::Relaxed);
        Ok(all)
    }

    async fn take_dead_letter(&self, id: &str) -> Result<Option<DeadLetterMessage>, WalError> {
        self.barrier().await?;
        let rows = self
            .query(
                &format!(
                    "DELETE FROM event_base_dead_letters WHERE id = $1 RETURNING {DEAD_COLUMNS}"
                ),
                &[&id],
                "the take of a dead letter",
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        self.known().remove(id);
        let _ = self
            .shared
            .dead_letters
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        Ok(Some(dead_letter(row)?))
    }

    async fn purge_dead_letters(&self) -> Result<usize, WalError> {
        self.barrier().await?;
        let rows = self
            .query(
                "WITH gone AS (DELETE FROM event_base_dead_letters RETURNING 1) SELECT count(*) FROM gone",
                &[],
                "the purge of the dead letters",
            )
            .await?;
        let n: i64 = rows.first().map_or(0, |r| r.get(0));
        self.known().clear();
        self.shared.dead_letters.store(0, Ordering::Relaxed);
        Ok(usize::try_from(n).unwrap_or(0))
    }

    async fn flush(&self) -> Result<(), WalError> {
        self.barrier().await
    }

    fn stats(&self) -> WalStats {
        WalStats {
            dead: self.shared.dead_letters.load(Ordering::Relaxed),
            ..WalStats::default()
        }
    }

    fn keeps_own_records(&self) -> bool {
        false
    }

    // Recurring schedules: shared by every process on the database; a slot is claimed by
    // one statement, so of the processes that fire the same slot one wins.

    async fn put_schedule(&self, name: &str, definition: &[u8]) -> Result<(), WalError> {
        self.query(
            "INSERT INTO event_base_schedules (name, definition) VALUES ($1, $2)
             ON CONFLICT (name) DO UPDATE SET definition = EXCLUDED.definition RETURNING 1",
            &[&name, &definition],
            "the write of a schedule",
        )
        .await?;
        Ok(())
    }

    async fn remove_schedule(&self, name: &str) -> Result<bool, WalError> {
        let rows = self
            .query(
                "DELETE FROM event_base_schedules WHERE name = $1 RETURNING 1",
                &[&name],
                "the removal of a schedule",
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn stored_schedules(&self) -> Result<Vec<StoredSchedule>, WalError> {
        let rows = self
            .query(
                "SELECT name, definition, last_slot FROM event_base_schedules ORDER BY name",
                &[],
                "the read of the schedules",
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| StoredSchedule {
                name: r.get(0),
                definition: r.get(1),
                last_slot: r
                    .get::<_, Option<i64>>(2)
                    .and_then(|s| u64::try_from(s).ok()),
            })
            .collect())
    }

    async fn claim_slot(&self, name: &str, slot: u64) -> Result<bool, WalError> {
        let slot = i64::try_from(slot).unwrap_or(i64::MAX);
        let rows = self
            .query(
                "UPDATE event_base_schedules SET last_slot = $2
                 WHERE name = $1 AND (last_slot IS NULL OR last_slot < $2) RETURNING 1",
                &[&name, &slot],
                "the claim of a schedule's slot",
            )
            .await?;
        Ok(!rows.is_empty())
    }
}
