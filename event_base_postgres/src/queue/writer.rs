//! The queues' writer: one task that owns a connection (`synchronous_commit` as the server
//! has it, `on` by default) and applies the changes whose loss would lose or repeat work —
//! sends, acks, releases, retries, dead letters, cancels — many to a transaction (group
//! commit: one flush of PostgreSQL's WAL for everything that arrived while the previous
//! transaction ran). Sends of one transaction are one `INSERT … SELECT FROM unnest(…)`.
//!
//! Two kinds of change, as on the Redis backend:
//! - **awaited** (an [`Answer`]): the caller gets the outcome, `Ok` once committed;
//! - **queued** (no answer: `try_send`, a dead letter recorded from synchronous code): the
//!   caller was already told "accepted", so the change is tried again, after the connection
//!   is made again, until it commits — never lost while the process lives. Acks and
//!   releases match the holder, so applying them again changes nothing; a transaction of
//!   sends whose commit went unconfirmed (the connection broke while `COMMIT` ran) and that
//!   did commit is applied again, and its messages are then delivered twice — at least
//!   once, as everywhere in the bus. (A unique index on the ids would prevent it at a third
//!   of every send's cost, measured.)
//!
//! While the server cannot be reached, every change waits (a restart of PostgreSQL is
//! ridden out); awaited ones are refused once it has been unreachable for [`OUTAGE_GRACE`].
//! A change the server refuses (not a broken connection) is answered with the error, or
//! logged if queued, and dropped with the rest of its transaction's changes answered alike.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::ToSql;

use crate::error::PostgresError;
use crate::link::{is_connection_error, Conn, Link};

/// Changes applied in one transaction at most.
const MAX_BATCH: usize = 1024;

/// How long a transaction of queued changes only (nobody waits on them: `try_send`,
/// dead letters) waits for more before it commits, unless an awaited change comes first:
/// a burst of sends (`send_batch` queues one change a message) is then one transaction,
/// one flush of PostgreSQL's WAL, rather than two or three.
const LINGER: Duration = Duration::from_millis(1);

/// How long awaited changes wait for an unreachable server before they are refused: long
/// enough to ride out a restart of PostgreSQL, short enough that a caller learns of an
/// outage. Queued changes wait on.
pub(crate) const OUTAGE_GRACE: Duration = Duration::from_secs(10);

/// The outcome of an awaited change: the rows it touched.
pub(crate) type Answer = oneshot::Sender<Result<u64, PostgresError>>;

/// A copy to insert.
#[derive(Debug)]
pub(crate) struct NewRow {
    pub(crate) subscription: Arc<str>,
    pub(crate) id: String,
    pub(crate) key: Option<String>,
    pub(crate) due_at: SystemTime,
    pub(crate) message: String,
    pub(crate) payload: Vec<u8>,
}

/// A dead letter to write.
#[derive(Debug)]
pub(crate) struct DeadRow {
    pub(crate) id: String,
    pub(crate) topic: String,
    pub(crate) message: String,
    pub(crate) payload: Vec<u8>,
    pub(crate) reason: String,
    pub(crate) handlers: Vec<String>,
}

/// A process another one's eviction removed (`Op::Evict`).
#[derive(Debug)]
pub(crate) struct EvictedRow {
    pub(crate) id: String,
    pub(crate) name: String,
    /// Its live workers as it listed them last (JSON).
    pub(crate) workers: String,
    pub(crate) last_seen: SystemTime,
    /// Messages addressed to its workers, now dead letters.
    pub(crate) dead_lettered: i64,
}

/// One change.
#[derive(Debug)]
pub(crate) enum Op {
    Insert(NewRow, Option<Answer>),
    /// A copy in the lane of every process consuming the row's subscription, or of process
    /// `node` only; with none and `keep`, in the subscription itself. Answers the copies
    /// made.
    FanOut {
        row: NewRow,
        node: Option<String>,
        keep: bool,
        answer: Option<Answer>,
    },
    /// Process `id` consumes `subscription`: its lane gets broadcasts from now on.
    Enlist {
        id: Arc<str>,
        name: String,
        pid: i32,
        subscription: String,
    },
    /// Evicts the processes silent for `within_ms`, in a transaction of its own after the
    /// batch it came with.
    Evict {
        within_ms: f64,
        answer: oneshot::Sender<Result<Vec<EvictedRow>, PostgresError>>,
    },
    Ack(Vec<i64>, Arc<str>, Option<Answer>),
    Release(Vec<i64>, Arc<str>, Option<Answer>),
    Retry {
        seq: i64,
        owner: Arc<str>,
        message: String,
        payload: Vec<u8>,
        delay_ms: f64,
        answer: Answer,
    },
    Bury {
        seq: i64,
        reason: String,
        handler: String,
    },
    Dead(DeadRow),
    Undead(String),
    Cancel {
        subscription: Arc<str>,
        id: String,
        answer: Answer,
    },
    Register {
        subscription: Arc<str>,
        topic: String,
        handler: String,
    },
    /// This process's record (`event_base_nodes`): name, kind (JSON), pid, and its live
    /// workers (JSON) when they changed.
    Node {
        id: Arc<str>,
        name: String,
        kind: Option<String>,
        pid: i32,
        workers: Option<String>,
        subscriptions: Option<Vec<String>>,
        answer: Option<Answer>,
    },
    /// Answers once everything queued before it is committed.
    Flush(Answer),
}

impl Op {
    /// Whether nobody waits on it: it was accepted already, and is tried until it commits.
    fn is_queued(&self) -> bool {
        matches!(
            self,
            Op::Insert(_, None)
                | Op::FanOut { answer: None, .. }
                | Op::Enlist { .. }
                | Op::Ack(_, _, None)
                | Op::Release(_, _, None)
                | Op::Bury { .. }
                | Op::Dead(_)
                | Op::Undead(_)
                | Op::Register { .. }
                | Op::Node { answer: None, .. }
        )
    }

    fn answer(self, outcome: &Result<Vec<u64>, String>, i: usize) {
        let answer = match self {
            Op::Insert(_, a) | Op::Ack(_, _, a) | Op::Release(_, _, a) => a,
            Op::Node { answer, .. } | Op::FanOut { answer, .. } => answer,
            Op::Evict { answer, .. } => {
                if let Err(cause) = outcome {
                    let _ = answer.send(Err(PostgresError::Failed {
                        what: "an eviction",
                        cause: cause.clone(),
                    }));
                }
                return;
            }
            Op::Retry { answer, .. } | Op::Cancel { answer, .. } | Op::Flush(answer) => {
                Some(answer)
            }
            Op::Bury { .. }
            | Op::Dead(_)
            | Op::Undead(_)
            | Op::Register { .. }
            | Op::Enlist { .. } => None,
        };
        let Some(answer) = answer else {
            if let Err(cause) = outcome {
                tracing::error!(target: "event_base::postgres", %cause, "PostgreSQL refused a change already accepted; it is dropped");
            }
            return;
        };
        let _ = answer.send(match outcome {
            Ok(counts) => Ok(counts.get(i).copied().unwrap_or(0)),
            Err(cause) => Err(PostgresError::Failed {
                what: "a change to the queues",
                cause: cause.clone(),
            }),
        });
    }
}

/// Runs the writer until every sender is gone (see the module docs).
pub(crate) async fn run(link: Link, mut ops: mpsc::UnboundedReceiver<Op>) {
    let mut batch = Vec::new();
    let mut backoff = Duration::from_millis(50);
    let mut down_since: Option<tokio::time::Instant> = None;
    loop {
        if batch.is_empty() {
            match ops.recv().await {
                Some(op) => batch.push(op),
                None => return,
            }
            drain(&mut ops, &mut batch);
            linger(&mut ops, &mut batch).await;
        } else {
            drain(&mut ops, &mut batch);
        }
        let conn = match link.conn().await {
            Ok(conn) => conn,
            Err(e) => {
                let since = *down_since.get_or_insert_with(tokio::time::Instant::now);
                tracing::warn!(target: "event_base::postgres", error = %e, "the queues' writer cannot reach PostgreSQL; trying again");
                // Past the grace, awaited changes are refused (their callers decide);
                // queued ones wait on.
                if since.elapsed() >= OUTAGE_GRACE {
                    refuse_awaited(&mut batch, &e.to_string());
                }
                continue;
            }
        };
        match apply(&conn, &batch).await {
            Ok(counts) => {
                backoff = Duration::from_millis(50);
                down_since = None;
                let outcome = Ok(counts);
                for (i, op) in batch.drain(..).enumerate() {
                    match op {
                        Op::Evict { within_ms, answer } => {
                            let _ = answer.send(evict(&conn, within_ms).await);
                        }
                        op => op.answer(&outcome, i),
                    }
                }
            }
            Err(e) if is_connection_error(&e, &conn.client) => {
                down_since.get_or_insert_with(tokio::time::Instant::now);
                tracing::warn!(target: "event_base::postgres", error = %e, "the queues' writer lost PostgreSQL; trying the transaction again");
                link.drop_conn(&conn).await;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            Err(e) => {
                let _ = conn.client.batch_execute("ROLLBACK").await;
                let outcome = Err(e.to_string());
                for (i, op) in batch.drain(..).enumerate() {
                    op.answer(&outcome, i);
                }
            }
        }
    }
}

/// Takes what is queued now, up to [`MAX_BATCH`]; whether someone waits on what it took.
fn drain(ops: &mut mpsc::UnboundedReceiver<Op>, batch: &mut Vec<Op>) -> bool {
    let mut awaited = false;
    while batch.len() < MAX_BATCH {
        match ops.try_recv() {
            Ok(op) => {
                awaited |= !op.is_queued();
                batch.push(op);
            }
            Err(_) => break,
        }
    }
    awaited
}

/// Waits up to [`LINGER`] for more changes while nobody waits on `batch`.
async fn linger(ops: &mut mpsc::UnboundedReceiver<Op>, batch: &mut Vec<Op>) {
    if batch.iter().any(|op| !op.is_queued()) {
        return;
    }
    let until = tokio::time::Instant::now() + LINGER;
    while batch.len() < MAX_BATCH {
        match tokio::time::timeout_at(until, ops.recv()).await {
            Ok(Some(op)) => {
                let awaited = !op.is_queued();
                batch.push(op);
                if drain(ops, batch) || awaited {
                    return;
                }
            }
            Ok(None) | Err(_) => return,
        }
    }
}

/// Answers the awaited changes of `batch` with `cause` and keeps the queued ones.
fn refuse_awaited(batch: &mut Vec<Op>, cause: &str) {
    let outcome = Err(cause.to_owned());
    let mut kept = Vec::new();
    for op in batch.drain(..) {
        if op.is_queued() {
            kept.push(op);
        } else {
            op.answer(&outcome, 0);
        }
    }
    *batch = kept;
}

/// Applies `batch` in one transaction; the rows each change touched, by position.
async fn apply(conn: &Conn, batch: &[Op]) -> Result<Vec<u64>, tokio_postgres::Error> {
    let c = &conn.client;
    let mut counts = vec![0; batch.len()];
    if batch
        .iter()
        .all(|op| matches!(op, Op::Flush(_) | Op::Evict { .. }))
    {
        // Nothing to write: everything before it is committed already.
        return Ok(counts);
    }
    c.batch_execute("BEGIN").await?;
    // Dead letters first, then what settles the rows they came from.
    let mut ran = 2 + apply_records(conn, batch).await?;
    ran += apply_inserts(conn, batch).await?;
    ran += apply_fan_outs(conn, batch, &mut counts).await?;
    ran += apply_settles(conn, batch).await?;
    ran += apply_singles(conn, batch, &mut counts).await?;
    c.batch_execute("COMMIT").await?;
    conn.ran(ran);
    Ok(counts)
}

/// Dead letters, burials, registrations, and dead letters sent again; the statements run.
async fn apply_records(conn: &Conn, batch: &[Op]) -> Result<u64, tokio_postgres::Error> {
    let (c, st) = (&conn.client, &conn.st);
    let mut ran = 0;
    for op in batch {
        match op {
            Op::Dead(d) => {
                let params: [&(dyn ToSql + Sync); 6] = [
                    &d.id,
                    &d.topic,
                    &d.message,
                    &d.payload,
                    &d.reason,
                    &d.handlers,
                ];
                c.execute(&st.dead, &params).await?;
            }
            Op::Bury {
                seq,
                reason,
                handler,
            } => {
                c.execute(&st.bury, &[seq, reason, handler]).await?;
            }
            Op::Register {
                subscription,
                topic,
                handler,
            } => {
                let s: &str = subscription;
                c.execute(&st.register, &[&s, topic, handler]).await?;
            }
            Op::Node {
                id,
                name,
                kind,
                pid,
                workers,
                subscriptions,
                ..
            } => {
                let id: &str = id;
                c.execute(&st.node, &[&id, name, kind, pid, workers, subscriptions])
                    .await?;
            }
            Op::Enlist {
                id,
                name,
                pid,
                subscription,
            } => {
                let id: &str = id;
                c.execute(&st.enlist, &[&id, name, pid, subscription])
                    .await?;
            }
            _ => continue,
        }
        ran += 1;
    }
    let undead: Vec<&str> = batch
        .iter()
        .filter_map(|op| match op {
            Op::Undead(id) => Some(id.as_str()),
            _ => None,
        })
        .collect();
    if !undead.is_empty() {
        ran += 1;
        c.execute(&st.undead, &[&undead]).await?;
    }
    Ok(ran)
}

/// Every insert of the batch, in one statement; the statements run.
async fn apply_inserts(conn: &Conn, batch: &[Op]) -> Result<u64, tokio_postgres::Error> {
    let rows: Vec<&NewRow> = batch
        .iter()
        .filter_map(|op| match op {
            Op::Insert(r, _) => Some(r),
            _ => None,
        })
        .collect();
    if rows.is_empty() {
        return Ok(0);
    }
    let subs: Vec<&str> = rows.iter().map(|r| &*r.subscription).collect();
    let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    let keys: Vec<Option<&str>> = rows.iter().map(|r| r.key.as_deref()).collect();
    let due: Vec<SystemTime> = rows.iter().map(|r| r.due_at).collect();
    let messages: Vec<&str> = rows.iter().map(|r| r.message.as_str()).collect();
    let payloads: Vec<&[u8]> = rows.iter().map(|r| r.payload.as_slice()).collect();
    let params: [&(dyn ToSql + Sync); 6] = [&subs, &ids, &keys, &due, &messages, &payloads];
    conn.client.execute(&conn.st.insert, &params).await?;
    Ok(1)
}

/// Each copy for the lanes, one statement each, its count of copies into `counts`; the
/// statements run.
async fn apply_fan_outs(
    conn: &Conn,
    batch: &[Op],
    counts: &mut [u64],
) -> Result<u64, tokio_postgres::Error> {
    let mut ran = 0;
    for (i, op) in batch.iter().enumerate() {
        let Op::FanOut {
            row, node, keep, ..
        } = op
        else {
            continue;
        };
        let sub: &str = &row.subscription;
        let params: [&(dyn ToSql + Sync); 7] = [
            &sub,
            &row.id,
            &row.due_at,
            &row.message,
            &row.payload,
            node,
            keep,
        ];
        counts[i] = conn.client.execute(&conn.st.fan_out, &params).await?;
        ran += 1;
    }
    Ok(ran)
}

/// Deletes the records of the processes silent for `within_ms`, and their lanes' rows
/// (dead-lettering what was addressed to their workers), in one transaction.
async fn evict(conn: &Conn, within_ms: f64) -> Result<Vec<EvictedRow>, PostgresError> {
    let what = "an eviction of silent processes";
    let c = &conn.client;
    let run = async {
        c.batch_execute("BEGIN").await?;
        conn.ran(1);
        let rows = c.query(&conn.st.evict, &[&within_ms]).await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let id: String = row.get(0);
            let name: String = row.get(1);
            let subscriptions: Vec<String> = row.get(4);
            let lanes: Vec<String> = subscriptions
                .iter()
                .map(|s| crate::queue::sql::lane(s, &id))
                .collect();
            let reason = crate::codec::reason_column(&event_base_core::DeadReason::Other(format!(
                "addressed to a worker of process `{name}` ({id}), which fell silent and was evicted"
            )));
            conn.ran(1);
            let dead: i64 = c
                .query_one(&conn.st.orphans, &[&lanes, &reason])
                .await?
                .get(0);
            out.push(EvictedRow {
                workers: row.get(2),
                last_seen: row.get(3),
                dead_lettered: dead,
                id,
                name,
            });
        }
        c.batch_execute("COMMIT").await?;
        conn.ran(2);
        Ok::<_, tokio_postgres::Error>(out)
    };
    match run.await {
        Ok(out) => Ok(out),
        Err(e) => {
            let _ = c.batch_execute("ROLLBACK").await;
            Err(PostgresError::statement(what)(e))
        }
    }
}

/// Every ack of the batch in one statement, every release in another; the statements run.
async fn apply_settles(conn: &Conn, batch: &[Op]) -> Result<u64, tokio_postgres::Error> {
    let mut ran = 0;
    for (kind, statement) in [(0, &conn.st.ack), (1, &conn.st.release)] {
        let mut seqs = Vec::new();
        let mut owners = Vec::new();
        for op in batch {
            match (kind, op) {
                (0, Op::Ack(s, o, _)) | (1, Op::Release(s, o, _)) => {
                    seqs.extend_from_slice(s);
                    owners.extend(std::iter::repeat_n(&**o, s.len()));
                }
                _ => {}
            }
        }
        if !seqs.is_empty() {
            ran += 1;
            conn.client.execute(statement, &[&seqs, &owners]).await?;
        }
    }
    Ok(ran)
}

/// Retries and cancels, one statement each, their counts into `counts`; the statements run.
async fn apply_singles(
    conn: &Conn,
    batch: &[Op],
    counts: &mut [u64],
) -> Result<u64, tokio_postgres::Error> {
    let (c, st) = (&conn.client, &conn.st);
    let mut ran = 0;
    for (i, op) in batch.iter().enumerate() {
        match op {
            Op::Retry {
                seq,
                owner,
                message,
                payload,
                delay_ms,
                ..
            } => {
                let o: &str = owner;
                counts[i] = c
                    .execute(&st.retry, &[seq, &o, message, payload, delay_ms])
                    .await?;
            }
            Op::Cancel {
                subscription, id, ..
            } => {
                let s: &str = subscription;
                counts[i] = c.execute(&st.cancel, &[&s, id]).await?;
            }
            _ => continue,
        }
        ran += 1;
    }
    Ok(ran)
}
