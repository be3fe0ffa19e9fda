//! [`PostgresWal`]: the WAL in a table of PostgreSQL (`event_base_wal`, see `schema.rs`).
//!
//! Each record is a row, and the sync methods of [`Wal`] answer from an index of the
//! records' states in memory (loaded from the table on connect), so the bus's per-message
//! path never waits for a round trip: a change is made in the index and handed, in the
//! same order, to the writer (`writer.rs`), which commits many to a transaction. An append
//! resolves once its transaction is committed; with `synchronous_commit = on` (PostgreSQL's
//! default) it then survives a crash of the process, of the server and a power loss.
//!
//! The index makes this WAL one process's: two processes on one database would each hold
//! their own index of the same rows. (Sharing the table between processes is the queue
//! half's part, issue 35.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use async_trait::async_trait;
use event_base_core::backend::{Wal, WalCommit, WalRecord, WalRecordState, WalStats};
use event_base_core::{DeadLetterMessage, DeadReason, EMessage, WalError};
use tokio::sync::{mpsc, oneshot};

use crate::codec::{self, FAILED, PENDING, PROCESSING};
use crate::error::PostgresError;
use crate::schema;
use crate::writer::{self, Failure, Op, PutRow, Statements};

/// The write-ahead log in a PostgreSQL table (see the module docs).
///
/// ```no_run
/// # async fn demo() -> Result<(), event_base_core::CoreError> {
/// use event_base_postgres::PostgresWal;
/// let wal = PostgresWal::connect("postgres://postgres@127.0.0.1:5432/postgres").await?;
/// let bus = event_base_core::EventBus::builder().wal(wal).build().await?;
/// # drop(bus); Ok(()) }
/// ```
///
/// | PostgreSQL runs with | an accepted send survives |
/// |---|---|
/// | `synchronous_commit = on` (the default), `fsync = on` | a crash of the process or of the server, and a power loss |
/// | `synchronous_commit = off` | a crash of the process; a crash of the server may lose the last moments (at most 3 × `wal_writer_delay`) |
/// | `fsync = off` | a crash of the process only |
pub struct PostgresWal {
    shared: Arc<Shared>,
}

struct Shared {
    index: Mutex<Index>,
    /// To the writer; sent to under the index's lock, so the table changes in the order
    /// the index did.
    ops: mpsc::UnboundedSender<Op>,
    failure: Arc<Failure>,
    syncs: Arc<AtomicU64>,
}

/// The states of the records the table holds, and the counters of `stats`.
#[derive(Default)]
struct Index {
    states: HashMap<String, WalRecordState>,
    live: u64,
    dead: u64,
    appended: u64,
    completed: u64,
}

impl Index {
    /// Sets the state of `id`, keeping the counts; returns the state it had.
    fn set(&mut self, id: &str, state: WalRecordState) -> Option<WalRecordState> {
        let old = self.states.insert(id.to_owned(), state);
        if let Some(old) = old {
            self.uncount(old);
        }
        self.count(state);
        old
    }

    /// Forgets `id`, keeping the counts.
    fn remove(&mut self, id: &str) -> Option<WalRecordState> {
        let old = self.states.remove(id);
        if let Some(old) = old {
            self.uncount(old);
        }
        old
    }

    fn count(&mut self, state: WalRecordState) {
        match state {
            WalRecordState::Failed => self.dead += 1,
            _ => self.live += 1,
        }
    }

    fn uncount(&mut self, state: WalRecordState) {
        match state {
            WalRecordState::Failed => self.dead -= 1,
            _ => self.live -= 1,
        }
    }
}

impl std::fmt::Debug for PostgresWal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let index = self.shared.index();
        f.debug_struct("PostgresWal")
            .field("live", &index.live)
            .field("dead", &index.dead)
            .finish_non_exhaustive()
    }
}

impl PostgresWal {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`,
    /// or PostgreSQL's `key=value` form), creates or upgrades event_base's tables (see
    /// `schema.rs`: a database made by a newer event_base is refused with
    /// [`PostgresError::SchemaTooNew`]), and loads the records' states.
    ///
    /// Errors: a URL that does not parse ([`PostgresError::BadUrl`]), a server that cannot
    /// be reached or refuses the login within the URL's `connect_timeout` (else
    /// [`DEFAULT_CONNECT_TIMEOUT`](crate::DEFAULT_CONNECT_TIMEOUT)) ([`PostgresError::Unreachable`]), a schema newer than this
    /// build's, a failed statement.
    pub async fn connect(url: &str) -> Result<PostgresWal, PostgresError> {
        let config = crate::link::parse_url(url)?;
        let (mut client, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|source| PostgresError::Unreachable { source })?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(target: "event_base::postgres", error = %e, "the WAL's connection to PostgreSQL ended");
            }
        });
        schema::migrate(&mut client).await?;
        let index = load(&client).await?;
        let statements = Statements::prepare(&client).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let failure = Arc::new(Failure::new());
        let syncs = Arc::new(AtomicU64::new(0));
        tokio::spawn(writer::run(
            (client, statements),
            rx,
            failure.clone(),
            syncs.clone(),
        ));
        Ok(PostgresWal {
            shared: Arc::new(Shared {
                index: Mutex::new(index),
                ops: tx,
                failure,
                syncs,
            }),
        })
    }
}

/// The states of the table's records.
async fn load(client: &tokio_postgres::Client) -> Result<Index, PostgresError> {
    let rows = client
        .query("SELECT id, state FROM event_base_wal", &[])
        .await
        .map_err(PostgresError::statement("the load of the WAL's records"))?;
    let mut index = Index::default();
    for row in rows {
        let id: String = row.get(0);
        let state = match row.get::<_, i16>(1) {
            PENDING => WalRecordState::Pending,
            PROCESSING => WalRecordState::Processing,
            FAILED => WalRecordState::Failed,
            other => {
                return Err(PostgresError::Undecodable {
                    id,
                    reason: format!("state {other}"),
                })
            }
        };
        index.set(&id, state);
    }
    Ok(index)
}

impl Shared {
    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The index, unless the writer failed.
    fn working(&self) -> Result<MutexGuard<'_, Index>, WalError> {
        match self.failure.cause() {
            Some(cause) => Err(WalError::Failed { cause }),
            None => Ok(self.index()),
        }
    }

    /// Hands `op` to the writer.
    fn send(&self, op: Op) -> Result<(), WalError> {
        self.ops.send(op).map_err(|_| {
            WalError::Closed(
                "the PostgreSQL WAL's writer task has stopped (its runtime shut down)".into(),
            )
        })
    }

    /// Sends a request made by `make` and waits for its answer.
    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, WalError>>) -> Op,
    ) -> Result<T, WalError> {
        let (tx, rx) = oneshot::channel();
        self.send(make(tx))?;
        rx.await.map_err(|_| {
            WalError::Closed("the PostgreSQL WAL's writer dropped a request unanswered".into())
        })?
    }
}

/// The row of `message` in `state`.
fn put_row(message: &EMessage, state: i16, dead: Option<(&DeadReason, &[String])>) -> Box<PutRow> {
    let (json, payload) = codec::columns(message);
    Box::new(PutRow {
        id: message.id.clone(),
        topic: message.topic.as_str().to_owned(),
        state,
        message: json,
        payload,
        updated_at: SystemTime::now(),
        dead_reason: dead.map(|(r, _)| codec::reason_column(r)),
        dead_handlers: dead.map(|(_, h)| h.to_vec()),
    })
}

#[async_trait]
impl Wal for PostgresWal {
    fn append(&self, message: &Arc<EMessage>) -> Result<WalCommit, WalError> {
        let mut index = self.shared.working()?;
        let (commit, committer) = WalCommit::pending();
        self.shared.send(Op::Put {
            row: put_row(message, PENDING, None),
            commit: Some(committer),
        })?;
        index.set(&message.id, WalRecordState::Pending);
        index.appended += 1;
        Ok(commit)
    }

    fn append_unique(&self, message: &Arc<EMessage>) -> Result<Option<WalCommit>, WalError> {
        let mut index = self.shared.working()?;
        if index.states.contains_key(&message.id) {
            return Ok(None);
        }
        let (commit, committer) = WalCommit::pending();
        self.shared.send(Op::Put {
            row: put_row(message, PENDING, None),
            commit: Some(committer),
        })?;
        index.set(&message.id, WalRecordState::Pending);
        index.appended += 1;
        Ok(Some(commit))
    }

    fn begin(&self, id: &str) -> Result<bool, WalError> {
        let mut index = self.shared.working()?;
        match index.states.get_mut(id) {
            None => Ok(false),
            Some(s @ WalRecordState::Pending) => {
                *s = WalRecordState::Processing;
                self.shared.send(Op::State {
                    id: id.to_owned(),
                    state: PROCESSING,
                })?;
                Ok(true)
            }
            Some(_) => Ok(true),
        }
    }

    fn complete(&self, id: &str) -> Result<(), WalError> {
        let mut index = self.shared.working()?;
        // A dead letter stays one (another copy of a broadcast finished); a gone record is
        // gone.
        if let Some(WalRecordState::Pending | WalRecordState::Processing) = index.states.get(id) {
            self.shared.send(Op::Delete {
                id: id.to_owned(),
                commit: None,
            })?;
            index.remove(id);
            index.completed += 1;
        }
        Ok(())
    }

    fn retry(&self, message: &Arc<EMessage>) -> Result<(), WalError> {
        let mut index = self.shared.working()?;
        self.shared.send(Op::Put {
            row: put_row(message, PENDING, None),
            commit: None,
        })?;
        index.set(&message.id, WalRecordState::Pending);
        Ok(())
    }

    fn fail(
        &self,
        message: &Arc<EMessage>,
        reason: &DeadReason,
        handlers: &[String],
    ) -> Result<(), WalError> {
        let mut index = self.shared.working()?;
        self.shared.send(Op::Put {
            row: put_row(message, FAILED, Some((reason, handlers))),
            commit: None,
        })?;
        index.set(&message.id, WalRecordState::Failed);
        Ok(())
    }

    fn cancel(&self, id: &str) -> Result<Option<WalCommit>, WalError> {
        let mut index = self.shared.working()?;
        if index.states.get(id) != Some(&WalRecordState::Pending) {
            return Ok(None);
        }
        let (commit, committer) = WalCommit::pending();
        self.shared.send(Op::Delete {
            id: id.to_owned(),
            commit: Some(committer),
        })?;
        index.remove(id);
        Ok(Some(commit))
    }

    async fn pending(&self) -> Result<Vec<WalRecord>, WalError> {
        let rows = self
            .shared
            .ask(|answer| Op::Read {
                states: writer::LIVE,
                answer,
            })
            .await?;
        rows.iter()
            .map(|row| {
                codec::record(row).map(|r| WalRecord {
                    dead_reason: None,
                    dead_handlers: Vec::new(),
                    ..r
                })
            })
            .collect::<Result<_, _>>()
            .map_err(WalError::from)
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetterMessage>, WalError> {
        let rows = self
            .shared
            .ask(|answer| Op::Read {
                states: writer::DEAD,
                answer,
            })
            .await?;
        let mut dead = rows
            .iter()
            .map(codec::dead_letter)
            .collect::<Result<Vec<_>, _>>()?;
        dead.sort_by_key(|d| d.died_at);
        Ok(dead)
    }

    async fn take_dead_letter(&self, id: &str) -> Result<Option<DeadLetterMessage>, WalError> {
        {
            let mut index = self.shared.working()?;
            if index.states.get(id) != Some(&WalRecordState::Failed) {
                return Ok(None);
            }
            index.remove(id);
        }
        let row = self
            .shared
            .ask(|answer| Op::Take {
                id: id.to_owned(),
                answer,
            })
            .await?;
        Ok(row.as_ref().map(codec::dead_letter).transpose()?)
    }

    async fn purge_dead_letters(&self) -> Result<usize, WalError> {
        {
            let mut index = self.shared.working()?;
            index.states.retain(|_, s| *s != WalRecordState::Failed);
            index.dead = 0;
        }
        let n = self.shared.ask(Op::Purge).await?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    async fn flush(&self) -> Result<(), WalError> {
        self.shared.ask(Op::Flush).await
    }

    fn stats(&self) -> WalStats {
        let index = self.shared.index();
        WalStats {
            appended: index.appended,
            completed: index.completed,
            live: index.live,
            dead: index.dead,
            disk_bytes: 0,
            syncs: self.shared.syncs.load(Ordering::Relaxed),
            failed: self.shared.failure.cause().is_some(),
        }
    }

    fn failure(&self) -> Option<String> {
        self.shared.failure.cause()
    }

    async fn wait_failure(&self) -> String {
        self.shared.failure.wait().await
    }
}
