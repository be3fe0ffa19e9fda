//! [`Link`]: the writer connections of a backend, and dedicated connections for readers
//! that block.
//!
//! Every non-blocking command (sends, acks, scripts, dead letters) goes through a writer: a
//! task that owns one connection and pipelines whatever is queued on it (up to [`PIPELINE`]
//! commands per round trip), in the order it was queued. There are [`WRITERS`] of them, so
//! several pipelines are in flight at once and one pass of Redis's event loop (one fsync
//! under `appendfsync always`) reads from several connections; it reads at most 16 KB of
//! each. Order is a promise the backends rely on (a dead letter queued before its entry's
//! ack reaches Redis first), kept this way: queued commands ([`Link::push`]) all go to the
//! first writer, and an awaited one ([`Link::run`]) goes there too while any queued command
//! is unconfirmed; otherwise to the next writer in turn (two awaited commands in flight at
//! once have no order to keep).
//!
//! Two kinds of command:
//! - **awaited** ([`Link::run`]): the caller gets the reply or a typed error. Redis down: an
//!   error at once ([`RedisError::Unreachable`]); no reply in time or the link broke
//!   mid-flight: [`RedisError::Unconfirmed`] (it may have been applied).
//! - **queued** ([`Link::push`]): the caller has already been told "accepted" (`try_send`, a
//!   dead letter recorded from synchronous code), so the command is retried, with backoff,
//!   until Redis confirms it. It may then be applied twice, never lost while the process lives.
//!
//! Blocking reads (`XREADGROUP BLOCK`) would stall every command behind them on a shared
//! socket, so each reader has a connection of its own ([`Link::dedicated`]) whose response
//! timeout is longer than its block.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, Value};
use tokio::sync::{mpsc, oneshot};

use crate::error::RedisError;
use crate::scripts;

/// Commands sent in one round trip at most.
pub(crate) const PIPELINE: usize = 256;

/// Writer connections per backend (see the module docs).
pub(crate) const WRITERS: usize = 4;

/// First wait before reconnecting; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Timeouts of the connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// To connect (TCP and handshake).
    pub(crate) connect: Duration,
    /// For a reply to a non-blocking command.
    pub(crate) response: Duration,
}

/// What to do with a reply that came.
pub(crate) type OnReply = Box<dyn FnOnce(&Value) + Send>;

enum Reply {
    /// The caller waits for it.
    Await(oneshot::Sender<Result<Value, RedisError>>),
    /// Nobody waits: retry until confirmed, then call this (if given).
    Retry(Option<OnReply>, Confirm),
}

/// Counts a queued command as unconfirmed until dropped: once answered (or refused for
/// good, or lost with its writer task when the runtime stops).
struct Confirm(Arc<AtomicUsize>);

impl Drop for Confirm {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// [`WRITERS`], or `EB_REDIS_WRITERS` (1 to 64) if set: for measuring the effect of the
/// count (see `docs/benchmarks.md`).
fn writers() -> usize {
    std::env::var("EB_REDIS_WRITERS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| (1..=64).contains(n))
        .unwrap_or(WRITERS)
}

struct Op {
    name: &'static str,
    cmd: Cmd,
    reply: Reply,
}

/// The writer of one Redis server (see the module docs). Cheap to clone.
#[derive(Clone)]
pub(crate) struct Link {
    inner: Arc<Inner>,
}

struct Inner {
    client: redis::Client,
    addr: String,
    timeouts: Timeouts,
    /// Each writer task's queue; `None` until first used (it starts in the runtime that
    /// first uses it), and replaced if that runtime went away.
    tx: Vec<Mutex<Option<mpsc::UnboundedSender<Op>>>>,
    /// The writer the next awaited command goes to, modulo the writers' count.
    turn: AtomicUsize,
    /// Queued commands not yet confirmed (or dropped as refused): while any are, awaited
    /// commands go behind them on the first writer.
    unconfirmed: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("addr", &self.inner.addr)
            .finish_non_exhaustive()
    }
}

impl Link {
    /// A link to the server of `url`; connects on first use.
    pub(crate) fn open(url: &str, timeouts: Timeouts) -> Result<Link, RedisError> {
        let client = redis::Client::open(url).map_err(|source| RedisError::BadUrl {
            url: url.to_owned(),
            source,
        })?;
        let addr = client.get_connection_info().addr().to_string();
        Ok(Link {
            inner: Arc::new(Inner {
                client,
                addr,
                timeouts,
                tx: (0..writers()).map(|_| Mutex::new(None)).collect(),
                turn: AtomicUsize::new(0),
                unconfirmed: Arc::new(AtomicUsize::new(0)),
            }),
        })
    }

    /// The server's address, for messages.
    pub(crate) fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// The queue of writer `lane` (started if need be).
    fn sender(&self, lane: usize) -> Result<mpsc::UnboundedSender<Op>, RedisError> {
        let slot = &self.inner.tx[lane % self.inner.tx.len()];
        let mut tx = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = tx.as_ref().filter(|t| !t.is_closed()) {
            return Ok(t.clone());
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| RedisError::Stopped)?;
        let (t, rx) = mpsc::unbounded_channel();
        runtime.spawn(write_loop(self.inner.clone(), rx));
        *tx = Some(t.clone());
        Ok(t)
    }

    /// Runs `cmd` and returns its reply (a server error is [`RedisError::Refused`]).
    pub(crate) async fn run(&self, name: &'static str, cmd: Cmd) -> Result<Value, RedisError> {
        let (tx, rx) = oneshot::channel();
        // Behind what is queued and unconfirmed, else on the next writer in turn.
        let lane = if self.inner.unconfirmed.load(Ordering::Acquire) > 0 {
            0
        } else {
            self.inner.turn.fetch_add(1, Ordering::Relaxed)
        };
        self.sender(lane)?
            .send(Op {
                name,
                cmd,
                reply: Reply::Await(tx),
            })
            .map_err(|_| RedisError::Stopped)?;
        rx.await.map_err(|_| RedisError::Stopped)?
    }

    /// Queues `cmd` to be written until Redis confirms it; `then` sees the reply.
    pub(crate) fn push(
        &self,
        name: &'static str,
        cmd: Cmd,
        then: Option<OnReply>,
    ) -> Result<(), RedisError> {
        let sender = self.sender(0)?;
        self.inner.unconfirmed.fetch_add(1, Ordering::AcqRel);
        let unconfirmed = self.inner.unconfirmed.clone();
        sender
            .send(Op {
                name,
                cmd,
                reply: Reply::Retry(then, Confirm(unconfirmed)),
            })
            .map_err(|_| RedisError::Stopped)
    }

    /// A connection of its own, for a reader that blocks up to `block`.
    pub(crate) async fn dedicated(
        &self,
        block: Duration,
    ) -> Result<MultiplexedConnection, RedisError> {
        let t = self.inner.timeouts;
        connect(&self.inner, t.connect, block + t.response).await
    }

    /// The error for a command that failed with `e` on the wire.
    pub(crate) fn wire_error(&self, name: &'static str, e: redis::RedisError) -> RedisError {
        wire_error(&self.inner.addr, name, e)
    }
}

fn wire_error(addr: &str, command: &'static str, e: redis::RedisError) -> RedisError {
    if let Some(code) = e.code() {
        return RedisError::Refused {
            command,
            message: format!("{code} {}", e.detail().unwrap_or_default()),
        };
    }
    if e.is_timeout() || e.is_connection_dropped() || e.is_io_error() {
        RedisError::Unconfirmed {
            addr: addr.to_owned(),
            command,
            source: e,
        }
    } else {
        RedisError::Unreachable {
            addr: addr.to_owned(),
            source: e,
        }
    }
}

async fn connect(
    inner: &Inner,
    connect: Duration,
    response: Duration,
) -> Result<MultiplexedConnection, RedisError> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect))
        .set_response_timeout(Some(response));
    // The client's own timeout covers TCP; this one also covers a server that accepts the
    // connection but never answers the handshake (a paused server).
    let attempt = inner
        .client
        .get_multiplexed_async_connection_with_config(&config);
    match tokio::time::timeout(connect + response, attempt).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(source)) => Err(RedisError::Unreachable {
            addr: inner.addr.clone(),
            source,
        }),
        Err(_) => Err(RedisError::Unreachable {
            addr: inner.addr.clone(),
            source: redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no answer to the connection handshake",
            )),
        }),
    }
}

/// Connects and loads the scripts.
async fn connect_writer(inner: &Inner) -> Result<MultiplexedConnection, RedisError> {
    let t = inner.timeouts;
    let mut conn = connect(inner, t.connect, t.response).await?;
    scripts::load_all(&mut conn)
        .await
        .map_err(|e| wire_error(&inner.addr, "SCRIPT LOAD", e))?;
    Ok(conn)
}

/// The writer task: takes what is queued, writes it in one pipeline, hands out the replies.
async fn write_loop(inner: Arc<Inner>, mut rx: mpsc::UnboundedReceiver<Op>) {
    let mut conn: Option<MultiplexedConnection> = None;
    // Queued commands not yet confirmed, retried first.
    let mut again: VecDeque<Op> = VecDeque::new();
    let mut backoff = MIN_BACKOFF;
    loop {
        if again.is_empty() {
            match rx.recv().await {
                Some(op) => again.push_back(op),
                None => return,
            }
        }
        while again.len() < PIPELINE {
            match rx.try_recv() {
                Ok(op) => again.push_back(op),
                Err(_) => break,
            }
        }
        let batch: Vec<Op> = again.drain(..again.len().min(PIPELINE)).collect();
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match connect_writer(&inner).await {
                Ok(c) => {
                    backoff = MIN_BACKOFF;
                    conn.insert(c)
                }
                Err(e) => {
                    tracing::warn!(target: "event_base::redis", addr = %inner.addr, error = %e, ?backoff, "Redis unreachable; retrying");
                    fail_or_keep(batch, &e, &mut again);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            },
        };
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for op in &batch {
            pipe.add_command(op.cmd.clone());
        }
        match pipe.query_async::<Vec<Value>>(c).await {
            Ok(values) if values.len() == batch.len() => {
                let mut reload = false;
                for (op, value) in batch.into_iter().zip(values) {
                    if is_noscript(&value) {
                        // The script did not run (Redis restarted, or SCRIPT FLUSH): load
                        // the scripts again and rerun it.
                        reload = true;
                        again.push_back(op);
                        continue;
                    }
                    answer(op, value);
                }
                if reload {
                    if let Err(e) = scripts::load_all(c).await {
                        tracing::warn!(target: "event_base::redis", addr = %inner.addr, error = %e, "could not load scripts; reconnecting");
                        conn = None;
                    }
                }
            }
            Ok(values) => {
                let e = RedisError::UnexpectedReply {
                    command: "pipeline",
                    what: format!("{} replies to {} commands", values.len(), batch.len()),
                };
                conn = None;
                fail_or_keep(batch, &e, &mut again);
            }
            Err(e) => {
                let e = wire_error(&inner.addr, "pipeline", e);
                tracing::warn!(target: "event_base::redis", addr = %inner.addr, error = %e, "Redis link failed; reconnecting");
                conn = None;
                fail_or_keep(batch, &e, &mut again);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

fn is_noscript(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT")
}

/// Awaited commands fail with `e`; queued ones go back to be retried.
fn fail_or_keep(batch: Vec<Op>, e: &RedisError, again: &mut VecDeque<Op>) {
    for op in batch {
        match op.reply {
            Reply::Await(tx) => {
                let _ = tx.send(Err(copy_error(e, op.name)));
            }
            Reply::Retry(..) => again.push_back(op),
        }
    }
}

fn answer(op: Op, value: Value) {
    let result = match value {
        Value::ServerError(e) => Err(RedisError::Refused {
            command: op.name,
            message: format!("{} {}", e.code(), e.details().unwrap_or_default()),
        }),
        v => Ok(v),
    };
    match op.reply {
        Reply::Await(tx) => {
            let _ = tx.send(result);
        }
        Reply::Retry(then, _confirm) => match result {
            Ok(v) => {
                if let Some(f) = then {
                    f(&v);
                }
            }
            Err(e) => {
                // Refused for good (a wrong type, say): retrying would not help.
                tracing::error!(target: "event_base::redis", error = %e, "Redis refused a queued command; it is dropped");
            }
        },
    }
}

/// The same error for another command of a failed batch.
fn copy_error(e: &RedisError, command: &'static str) -> RedisError {
    match e {
        RedisError::Unreachable { addr, source } => RedisError::Unreachable {
            addr: addr.clone(),
            source: copy_redis_error(source),
        },
        RedisError::Unconfirmed { addr, source, .. } => RedisError::Unconfirmed {
            addr: addr.clone(),
            command,
            source: copy_redis_error(source),
        },
        RedisError::UnexpectedReply { what, .. } => RedisError::UnexpectedReply {
            command,
            what: what.clone(),
        },
        _ => RedisError::Stopped,
    }
}

fn copy_redis_error(e: &redis::RedisError) -> redis::RedisError {
    let kind = if e.is_timeout() {
        std::io::ErrorKind::TimedOut
    } else {
        std::io::ErrorKind::ConnectionAborted
    };
    redis::RedisError::from(std::io::Error::new(kind, e.to_string()))
}
