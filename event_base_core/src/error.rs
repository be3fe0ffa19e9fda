//! Errors: one enum per concern ([`WalError`], [`QueueError`], [`ConfigError`]), all converted into [`CoreError`],
//! the error every public operation returns. Each message says what happened and what to do.

use std::path::PathBuf;
use std::time::Duration;

/// What a backend's own error is carried as: any error, with its sources.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors of a write-ahead log backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    /// An I/O operation on a WAL file failed.
    #[error("WAL I/O error on {path}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A record could not be decoded.
    #[error("WAL segment {file} is corrupt at byte {offset}: {reason}; open the WAL with `.skip_corrupt(true)` to continue without the damaged segment")]
    Corrupt {
        /// The segment file.
        file: PathBuf,
        /// Byte offset of the bad record.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// The WAL's writer stopped (e.g. after an earlier I/O error) and accepts nothing more.
    #[error("the WAL writer has stopped: {0}; restart the bus to recover from the log")]
    Closed(String),
    /// A write or sync of the WAL failed (a full disk, an I/O error, a failed `fdatasync`),
    /// and the WAL stopped for good: it accepts nothing more, under every sync policy.
    /// Nothing it acknowledged before is lost; what it refused was never accepted.
    ///
    /// It does not go on after such a failure: on Linux a failed `fdatasync` drops the dirty
    /// pages and the next one succeeds, so records written before it could vanish while
    /// later ones were acknowledged. [`WalStats::failed`](crate::backend::WalStats::failed)
    /// and `Wal::failure` report the state.
    #[error("the WAL failed and accepts nothing more: {cause}; free disk space or repair the device, then restart the process: every message the WAL acknowledged is recovered from its files")]
    Failed {
        /// What failed, with the file and the operating system's reason (e.g. "write of
        /// /var/lib/app/wal/00000003.log failed: No space left on device (os error 28)").
        cause: String,
    },
    /// Another `PersistentWal` (in this process or another) has the directory open.
    #[error("the WAL directory {dir} is in use by another PersistentWal (another process, or one not yet dropped or closed); stop that one first, or use another directory")]
    InUse {
        /// The WAL directory.
        dir: PathBuf,
    },
    /// A message's record would be larger than the WAL accepts; it was not written.
    #[error("message `{id}` needs up to {size} bytes, over the WAL's record limit of {limit} bytes; raise it with PersistentWal::builder(..).max_record_bytes(..) or send a smaller payload")]
    RecordTooLarge {
        /// The message.
        id: String,
        /// The bytes its record needs (an upper bound).
        size: usize,
        /// The WAL's limit.
        limit: usize,
    },
    /// The WAL's directory path, or a part of it, is a file: a file WAL needs a directory.
    #[error("the WAL path {path} is not a directory ({file} is a file); give the WAL the path of a directory (it is created if missing), or move that file away")]
    NotADirectory {
        /// The directory the WAL was given.
        path: PathBuf,
        /// The file in its way: `path` itself, or one of its parents.
        file: PathBuf,
    },
    /// A backend (e.g. Redis) failed; the source says how.
    #[error("WAL backend error")]
    Backend(#[source] BoxError),
}

/// Errors of a queue backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The bounded queue is full (only for `try_send`).
    #[error("queue for topic `{0}` is full; retry later, send without try_send to wait, or raise the bound (FlumeQueueFactory::bounded)")]
    Full(String),
    /// The queue was closed (the bus stopped).
    #[error("queue for topic `{0}` is closed; the bus has stopped")]
    Closed(String),
    /// A message addressed to a worker of another node (`to_worker: "<node id>/<worker>"`)
    /// names a node that does not run the worker's handler now (never started it, stopped,
    /// or was evicted), or a node name no running node of the handler has.
    #[error("no running node `{node}` reads handler `{handler}` of topic `{topic}`; address a node that runs it now, by its id (RedisQueueFactory::node_id of that process) or its name if no other node running the handler has it, or leave the node out of to_worker")]
    UnknownNode {
        /// The topic.
        topic: String,
        /// The handler whose worker the message names.
        handler: String,
        /// The node id (or name) named.
        node: String,
    },
    /// A message addressed to a worker of a node by the node's name
    /// (`to_worker: "<node name>/<worker>"`) names several running nodes of the handler.
    #[error("{} running nodes named `{name}` read handler `{handler}` of topic `{topic}` (ids {}); address one of them by its id (RedisQueueFactory::node_id of that process) instead of the name", .ids.len(), .ids.join(", "))]
    AmbiguousNode {
        /// The topic.
        topic: String,
        /// The handler whose worker the message names.
        handler: String,
        /// The node name given.
        name: String,
        /// The ids of the running nodes of that name that read the handler.
        ids: Vec<String>,
    },
    /// A backend (e.g. Redis) failed; the source says how.
    #[error("queue backend error")]
    Backend(#[source] BoxError),
}

/// Errors of a configuration file (`event_base::config`, feature `config`) and of the
/// `EB_…` environment variables over it. Each names where the bad setting came from (the
/// file's path, or the variable), the key, and what is allowed instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read (it is missing, or not readable).
    #[error("cannot read the config file {path}: {source}; check the path (a relative path is taken from the working directory)")]
    Read {
        /// The path given.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("{path}: not valid TOML: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's complaint, with line and column.
        message: String,
    },
    /// A key is unknown, or its value is not one it accepts.
    #[error("{origin}: {key}: {message}")]
    Invalid {
        /// Where the setting came from: the file's path, or an `EB_…` variable's name.
        origin: String,
        /// The key, dotted (`wal.sync_policy`, `handlers.send_email.workers`).
        key: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// A file the configuration names (a TLS certificate, say) could not be read.
    #[error("{origin}: {key}: cannot read {path}: {source}")]
    ReadNamed {
        /// Where the setting came from: the file's path, or an `EB_…` variable's name.
        origin: String,
        /// The key that names the file.
        key: String,
        /// The file named.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// The error type of every event_base operation.
///
/// Its `Debug` is its message and the chain of its sources, so that `fn main() ->
/// Result<(), CoreError>` and a failed `unwrap` in a test show what to do, not just a variant
/// name.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    /// No system has been started (global functions need `start_system!`).
    #[error("no event_base system is running; call `start_system!().await?` first (or use the EventBus you built)")]
    NotStarted,
    /// `start_system!` ran while a global system is already running.
    #[error("a global event_base system is already running; shut it down before starting another, or build an isolated one with EventBus::builder()")]
    AlreadyStarted,
    /// The system is shutting down and refuses new work.
    #[error("the system is shutting down and accepts no new messages")]
    SystemShutdown,
    /// No handler is subscribed to the topic, so the message was refused.
    #[error("no handler is registered for topic `{topic}`; add `#[handler(topic = \"{topic}\")]`, and if the handler lives in another crate make sure the binary names it (`use my_handlers as _;`)")]
    NoHandler {
        /// The topic.
        topic: String,
    },
    /// No handler of that name runs on that topic in this process (pause, resume, lag).
    #[error("topic `{topic}` has no handler `{handler}` here; its handlers: [{}] (EventBus::router().topics() lists the topics)", .handlers.join(", "))]
    UnknownHandler {
        /// The topic.
        topic: String,
        /// The handler name asked for.
        handler: String,
        /// The handlers the topic has in this process (none if the topic has none).
        handlers: Vec<String>,
    },
    /// `to_worker` names a worker the topic does not have.
    #[error("topic `{topic}` has no worker named `{worker}`; see EventBus::workers(topic) for the names (with Redis, `<node id>/<worker>` or `<node name>/<worker>` names a worker of a node that runs its handler now, RedisQueueFactory::node_id() of that process; a node that stopped or was evicted has none: send the message again naming a running node, or delete its dead letter)")]
    UnknownWorker {
        /// The topic.
        topic: String,
        /// The unknown worker name.
        worker: String,
    },
    /// The topic name cannot name a topic at all (it is empty, say).
    #[error("`{topic}` is not a valid topic: {reason}; name the topic the handler subscribes to, e.g. \"orders\"")]
    InvalidTopic {
        /// The name given.
        topic: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Applications may not send to `_system.` topics.
    #[error("topic `{0}` is reserved for the bus (prefix `_system.`); pick another name")]
    ReservedTopic(String),
    /// `try_send` found the topic's queue full; nothing was accepted.
    #[error("queue for topic `{topic}` is full; the message was not accepted (retry, send without try_send to wait, or raise the queue bound)")]
    QueueFull {
        /// The topic.
        topic: String,
    },
    /// `wait_idle` ran out of time with messages still in flight: held by this process, or,
    /// with a shared queue backend (Redis), still in the shared queues of the subscriptions
    /// this process sent to (waiting for a node to claim them, or claimed and unsettled).
    #[error(
        "{in_flight} messages were still in flight in this process{} after waiting {after:?} for the bus to go idle; wait longer, or look at what the handlers are doing (`EventBus::metrics`)",
        shared_part(.shared)
    )]
    IdleTimeout {
        /// What this process held when the time ran out: sends in progress, messages of its
        /// in-process queues not yet complete or dead, and entries it claimed from a shared
        /// queue and had not settled.
        in_flight: u64,
        /// With a shared queue backend, the entries the shared queues of the subscriptions
        /// this process sent to still held (in every node: unclaimed, delayed, or claimed
        /// and unsettled), as last asked; `None` when the backend cannot tell, was not
        /// reached, or there is none.
        shared: Option<u64>,
        /// The time allowed.
        after: Duration,
    },
    /// A `Drain` shutdown finished the backlog, but the WAL's final flush failed, so what the
    /// log holds may not be what the handlers did: a restart may deliver some messages again
    /// (or, with `SyncPolicy::Never`/`Batch`, miss accepted ones). Check the disk; `report`
    /// says what the shutdown did.
    #[error("the bus drained, but the WAL's final flush failed ({error}); what the log holds may not match what the handlers did: check the WAL's disk before restarting")]
    ShutdownFlush {
        /// Why the flush failed.
        error: String,
        /// What the shutdown did (its `wal_flush_error` is `error`).
        report: Box<crate::shutdown::strategy::ShutdownReport>,
    },
    /// The call has to wait on a timer, and no tokio runtime runs it: call it from inside a
    /// runtime (`#[tokio::main]`, `Runtime::block_on`).
    #[error("this call waits on a timer and needs a tokio runtime; call it from inside one (#[tokio::main], Runtime::block_on)")]
    NoRuntime,
    /// An operation did not finish in time.
    #[error("{operation} timed out after {after:?}")]
    Timeout {
        /// What timed out, with its state (e.g. "send to `orders`").
        operation: String,
        /// The time allowed.
        after: Duration,
    },
    /// The builder or a macro got an invalid setting.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A configuration file or an `EB_…` environment variable over it is invalid.
    #[error(transparent)]
    ConfigFile(#[from] ConfigError),
    /// An argument is outside what the bus accepts (a rate that is not a positive number, or
    /// so low that its period overflows the clock); nothing was done.
    #[error("invalid `{name}` ({value}): {reason}")]
    InvalidParameter {
        /// The argument's name, as documented.
        name: &'static str,
        /// The value given.
        value: String,
        /// What is allowed instead.
        reason: String,
    },
    /// A value could not be encoded as a JSON payload.
    #[error("could not encode the value as a JSON payload (JSON maps need string keys, and the value's Serialize impl must not fail); nothing was sent")]
    Encode(#[source] serde_json::Error),
    /// A payload could not be decoded into the expected type.
    #[error("could not decode the payload as {what}")]
    Decode {
        /// The target type.
        what: String,
        /// The decoder's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// The named message is not known (e.g. no such dead letter).
    #[error("no message with id `{0}`; list the dead letters with EventBus::dead_letters for the ids there are")]
    NotFound(String),
    /// A message's id is empty or longer than `constant::MAX_ID_BYTES`; it was not accepted.
    #[error("message id `{id}` is {len} bytes; an id is 1 to {max} bytes (leave the generated one, or set a shorter one with EMessage::with_id)")]
    InvalidId {
        /// The id as given (cut to the limit if it was longer).
        id: String,
        /// Its length in bytes.
        len: usize,
        /// The limit, `constant::MAX_ID_BYTES`.
        max: usize,
    },
    /// The WAL failed.
    #[error(transparent)]
    Wal(#[from] WalError),
    /// The queue failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// A background task of the bus failed.
    #[error("internal task failed: {0}")]
    Internal(String),
}

impl std::fmt::Debug for CoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")?;
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            write!(f, "\n  caused by: {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

/// The part of [`CoreError::IdleTimeout`]'s message about the shared queues.
fn shared_part(shared: &Option<u64>) -> String {
    match shared {
        Some(n) => format!(
            " and {n} in the shared queues of the subscriptions it sent to (unclaimed, due later, or claimed by some node and not yet settled)"
        ),
        None => String::new(),
    }
}
