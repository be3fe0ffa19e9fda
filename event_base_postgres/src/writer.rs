//! The WAL's writer: one task that owns the connection and applies the WAL's changes in the
//! order they were made, many to a transaction (group commit: one commit, so one flush of
//! PostgreSQL's own WAL with `synchronous_commit = on`, for every change that arrived while
//! the previous one ran).
//!
//! Reads and the dead-letter operations are barriers: what was queued before them is
//! committed first, so they see every change made before they were asked.
//!
//! A failed write stops the writer for good, as a file WAL stops after a failed `fsync`:
//! the transaction is rolled back, its commits and every later request answer
//! [`WalError::Failed`], and [`Failure`] tells the WAL, which then refuses new records.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use event_base_core::backend::WalCommitter;
use event_base_core::WalError;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_postgres::{Client, Row, Statement};

use crate::codec::{FAILED, PENDING, RECORD_COLUMNS};
use crate::error::PostgresError;

/// Changes applied in one transaction at most.
const MAX_BATCH: usize = 1024;

/// One change of a record, or a request that waits for the changes before it.
#[derive(Debug)]
pub(crate) enum Op {
    /// Writes the whole record (insert, or replace the row of its id).
    Put {
        /// Its columns.
        row: Box<PutRow>,
        /// Answered once committed (an append's).
        commit: Option<WalCommitter>,
    },
    /// Sets a record's state (`begin`).
    State {
        /// The message id.
        id: String,
        /// The new `state`.
        state: i16,
    },
    /// Deletes a record (`complete`, `cancel`).
    Delete {
        /// The message id.
        id: String,
        /// Answered once committed (a cancel's).
        commit: Option<WalCommitter>,
    },
    /// Answers once everything before it is committed.
    Flush(oneshot::Sender<Result<(), WalError>>),
    /// Reads the rows in these states.
    Read {
        /// The states.
        states: &'static [i16],
        /// The rows, oldest write first.
        answer: oneshot::Sender<Result<Vec<Row>, WalError>>,
    },
    /// Deletes a dead letter and answers its row.
    Take {
        /// The message id.
        id: String,
        /// Its row, if it was a dead letter.
        answer: oneshot::Sender<Result<Option<Row>, WalError>>,
    },
    /// Deletes every dead letter and answers how many.
    Purge(oneshot::Sender<Result<u64, WalError>>),
}

/// The columns of a [`Op::Put`].
#[derive(Debug)]
pub(crate) struct PutRow {
    pub(crate) id: String,
    pub(crate) topic: String,
    pub(crate) state: i16,
    pub(crate) message: String,
    pub(crate) payload: Vec<u8>,
    pub(crate) updated_at: SystemTime,
    pub(crate) dead_reason: Option<String>,
    pub(crate) dead_handlers: Option<Vec<String>>,
}

impl Op {
    /// Whether it waits for the changes before it (and is not one).
    fn is_barrier(&self) -> bool {
        !matches!(self, Op::Put { .. } | Op::State { .. } | Op::Delete { .. })
    }

    /// Answers the request with `e` (the writer failed, or failed before).
    fn refuse(self, e: &WalError) {
        let failed = || failed_like(e);
        match self {
            Op::Put { commit, .. } | Op::Delete { commit, .. } => {
                if let Some(c) = commit {
                    c.answer(Err(failed()));
                }
            }
            Op::State { .. } => {}
            Op::Flush(a) => drop(a.send(Err(failed()))),
            Op::Read { answer, .. } => drop(answer.send(Err(failed()))),
            Op::Take { answer, .. } => drop(answer.send(Err(failed()))),
            Op::Purge(a) => drop(a.send(Err(failed()))),
        }
    }
}

/// A copy of a [`WalError::Failed`] (it is not `Clone`).
fn failed_like(e: &WalError) -> WalError {
    match e {
        WalError::Failed { cause } => WalError::Failed {
            cause: cause.clone(),
        },
        other => WalError::Failed {
            cause: other.to_string(),
        },
    }
}

/// Why the writer stopped, once it has; shared with the WAL.
#[derive(Debug)]
pub(crate) struct Failure {
    cause: watch::Sender<Option<String>>,
}

impl Failure {
    pub(crate) fn new() -> Failure {
        Failure {
            cause: watch::Sender::new(None),
        }
    }

    /// The cause, once the writer failed.
    pub(crate) fn cause(&self) -> Option<String> {
        self.cause.borrow().clone()
    }

    /// Resolves with the cause once the writer failed.
    pub(crate) async fn wait(&self) -> String {
        let mut rx = self.cause.subscribe();
        let cause = match rx.wait_for(Option::is_some).await {
            Ok(cause) => cause.clone(),
            // The sender lives in `self`: it cannot be gone while borrowed.
            Err(_) => None,
        };
        match cause {
            Some(cause) => cause,
            None => std::future::pending().await,
        }
    }

    fn set(&self, cause: String) {
        self.cause.send_if_modified(|c| {
            if c.is_none() {
                *c = Some(cause);
                true
            } else {
                false
            }
        });
    }
}

/// The writer's statements, prepared once, on connect.
#[derive(Debug)]
pub(crate) struct Statements {
    put: Statement,
    state: Statement,
    delete: Statement,
}

impl Statements {
    pub(crate) async fn prepare(client: &Client) -> Result<Statements, PostgresError> {
        let what = "the preparation of the WAL's statements";
        let prepare = |sql| async move {
            client
                .prepare(sql)
                .await
                .map_err(PostgresError::statement(what))
        };
        Ok(Statements {
            put: prepare(
                "INSERT INTO event_base_wal
                     (id, topic, state, message, payload, updated_at, dead_reason, dead_handlers)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (id) DO UPDATE SET
                     topic = EXCLUDED.topic, state = EXCLUDED.state, message = EXCLUDED.message,
                     payload = EXCLUDED.payload, updated_at = EXCLUDED.updated_at,
                     dead_reason = EXCLUDED.dead_reason, dead_handlers = EXCLUDED.dead_handlers",
            )
            .await?,
            state: prepare("UPDATE event_base_wal SET state = $2 WHERE id = $1").await?,
            delete: prepare("DELETE FROM event_base_wal WHERE id = $1").await?,
        })
    }
}

/// Runs the writer until every sender of `ops` is gone (see the module docs). `syncs` counts
/// its commits.
pub(crate) async fn run(
    (mut client, statements): (Client, Statements),
    mut ops: mpsc::UnboundedReceiver<Op>,
    failure: Arc<Failure>,
    syncs: Arc<AtomicU64>,
) {
    let mut held: Option<Op> = None;
    loop {
        let first = match held.take() {
            Some(op) => op,
            None => match ops.recv().await {
                Some(op) => op,
                None => return,
            },
        };
        if let Some(cause) = failure.cause() {
            first.refuse(&WalError::Failed { cause });
            continue;
        }
        if first.is_barrier() {
            request(&client, first).await;
            continue;
        }
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match ops.try_recv() {
                Ok(op) if op.is_barrier() => {
                    held = Some(op);
                    break;
                }
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        match write(&mut client, &statements, &batch).await {
            Ok(()) => {
                syncs.fetch_add(1, Ordering::Relaxed);
                for op in batch {
                    if let Op::Put {
                        commit: Some(c), ..
                    }
                    | Op::Delete {
                        commit: Some(c), ..
                    } = op
                    {
                        c.answer(Ok(()));
                    }
                }
            }
            Err(e) => {
                let cause = format!("a write of the WAL's table failed: {e}");
                tracing::error!(target: "event_base::postgres", %cause, "the PostgreSQL WAL stopped: it accepts nothing more; restart the process once the database is back (every record it acknowledged is in the table)");
                failure.set(cause.clone());
                let e = WalError::Failed { cause };
                for op in batch {
                    op.refuse(&e);
                }
            }
        }
    }
}

/// Applies `batch` in one transaction.
async fn write(
    client: &mut Client,
    statements: &Statements,
    batch: &[Op],
) -> Result<(), PostgresError> {
    let what = "a write of the WAL";
    let tx = client
        .transaction()
        .await
        .map_err(PostgresError::statement(what))?;
    let Statements { put, state, delete } = statements;
    for op in batch {
        let done = match op {
            Op::Put { row, .. } => {
                tx.execute(
                    put,
                    &[
                        &row.id,
                        &row.topic,
                        &row.state,
                        &row.message,
                        &row.payload,
                        &row.updated_at,
                        &row.dead_reason,
                        &row.dead_handlers,
                    ],
                )
                .await
            }
            Op::State { id, state: s } => tx.execute(state, &[id, s]).await,
            Op::Delete { id, .. } => tx.execute(delete, &[id]).await,
            _ => Ok(0),
        };
        done.map_err(PostgresError::statement(what))?;
    }
    tx.commit().await.map_err(PostgresError::statement(what))
}

/// Runs a barrier request (everything before it is committed) and answers it.
async fn request(client: &Client, op: Op) {
    match op {
        Op::Flush(answer) => drop(answer.send(Ok(()))),
        Op::Read { states, answer } => {
            let states: Vec<i16> = states.to_vec();
            let rows = client
                .query(
                    &format!(
                        "SELECT {RECORD_COLUMNS} FROM event_base_wal
                         WHERE state = ANY($1) ORDER BY updated_at, id"
                    ),
                    &[&states],
                )
                .await
                .map_err(|e| PostgresError::statement("a read of the WAL")(e).into());
            drop(answer.send(rows));
        }
        Op::Take { id, answer } => {
            let row = client
                .query_opt(
                    &format!(
                        "DELETE FROM event_base_wal WHERE id = $1 AND state = $2
                         RETURNING {RECORD_COLUMNS}"
                    ),
                    &[&id, &FAILED],
                )
                .await
                .map_err(|e| PostgresError::statement("a take of a dead letter")(e).into());
            drop(answer.send(row));
        }
        Op::Purge(answer) => {
            let n = client
                .execute("DELETE FROM event_base_wal WHERE state = $1", &[&FAILED])
                .await
                .map_err(|e| PostgresError::statement("a purge of the dead letters")(e).into());
            drop(answer.send(n));
        }
        other => other.refuse(&WalError::Failed {
            cause: "internal: a change was taken for a request".into(),
        }),
    }
}

/// The states of the live records.
pub(crate) const LIVE: &[i16] = &[PENDING, crate::codec::PROCESSING];
/// The state of the dead letters.
pub(crate) const DEAD: &[i16] = &[FAILED];
