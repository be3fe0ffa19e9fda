//! Names of the reserved system topics and the bus's defaults.
//!
//! Every topic that starts with [`SYSTEM_PREFIX`] belongs to the bus. Applications may
//! subscribe handlers to them (for example to [`DEAD_LETTER`]), but `send` refuses them with
//! [`CoreError::ReservedTopic`](crate::CoreError::ReservedTopic), except the two that carry
//! requests to the bus: [`SHUTDOWN`] and [`TOPIC_DISCOVERY`].

/// Prefix of every reserved topic.
pub const SYSTEM_PREFIX: &str = "_system.";
/// Audit records of processing start and finish.
pub const AUDIT: &str = "_system.audit";
/// Trace records from the `TraceLayer`.
pub const TRACE: &str = "_system.trace";
/// WAL synchronisation between nodes.
pub const WAL_SYNC: &str = "_system.wal_sync";
/// Shutdown commands.
pub const SHUTDOWN: &str = "_system.shutdown";
/// Workers' answers to a shutdown command.
pub const SHUTDOWN_ACK: &str = "_system.shutdown_ack";
/// Workers announcing themselves.
pub const WORKER_DISCOVERY: &str = "_system.worker_discovery";
/// Worker heartbeats.
pub const WORKER_HEARTBEAT: &str = "_system.worker_heartbeat";
/// Topic table synchronisation.
pub const TOPIC_SYNC: &str = "_system.topic_sync";
/// Topic discovery.
pub const TOPIC_DISCOVERY: &str = "_system.topic_discovery";
/// Replies to requests made in another process (`EventBus::request` on a shared backend):
/// the topic of the subscription a bus built with `EventBusBuilder::replies(true)` reads
/// them from, and of every reply. Not a `_system.` topic: those stay in their process on a
/// shared backend, and a reply must travel to the requester's.
pub const REPLY_TOPIC: &str = "event_base.reply";
/// A [`DeadLetterMessage`](crate::DeadLetterMessage) (JSON) for every message that dies.
pub const DEAD_LETTER: &str = "_system.dead_letter";

/// Every reserved topic.
pub const SYSTEM_TOPICS: &[&str] = &[
    AUDIT,
    TRACE,
    WAL_SYNC,
    SHUTDOWN,
    SHUTDOWN_ACK,
    WORKER_DISCOVERY,
    WORKER_HEARTBEAT,
    TOPIC_SYNC,
    TOPIC_DISCOVERY,
    DEAD_LETTER,
];

/// Messages the consumer router claims at once (`batch_size`).
pub const DEFAULT_BATCH_SIZE: usize = 64;

/// How long a completed message's id keeps refusing sends of the same id, by default
/// (`EventBusBuilder::dedup_window`).
pub const DEFAULT_DEDUP_WINDOW: std::time::Duration = std::time::Duration::from_secs(120);
/// Retries for panics and timeouts, and what `Ack::retry()` allows, when the handler sets no
/// `retries`.
pub const DEFAULT_MAX_RETRIES: u32 = 3;
/// First backoff delay after a panic or timeout; it doubles on every further retry.
pub const DEFAULT_BACKOFF_BASE_MS: u64 = 100;
/// Largest payload a system topic handler decodes; larger ones are refused with a typed error.
pub const MAX_SYSTEM_PAYLOAD: usize = 1 << 20;
/// How often the monitor samples every worker's liveness.
pub const DEFAULT_HEARTBEAT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// How long a worker may work on one message without progress before it is declared dead.
pub const DEFAULT_STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(60);
/// Longest message id the bus accepts, in bytes (generated ids are 36). A longer, or an empty,
/// id is refused at send with `CoreError::InvalidId`.
pub const MAX_ID_BYTES: usize = 255;
/// The longest wait the bus keeps time for: 30 years, tokio's own limit for a timer (longer
/// waits overflow the clock on some platforms).
///
/// Every duration an application gives the bus (a send's timeout, `with_delay`, a
/// `deliver_at` far ahead, `wait_idle`, a shutdown strategy's durations, a retry's delay, a
/// handler's `timeout`, a batch's `linger`) is clamped to it, so no argument can overflow the
/// clock: a timeout or deadline of `MAX_WAIT` or more means no time limit, a delay of
/// `MAX_WAIT` or more means "in `MAX_WAIT`", which is never in practice.
pub const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(30 * 365 * 86_400);
/// Audit records a bus keeps in memory unless told otherwise (`EventBusBuilder::audit`).
pub const DEFAULT_AUDIT_CAPACITY: usize = 10_000;
/// How many ended (`Stopped` or `Dead`) workers a bus's `WorkerRegistry` keeps listed, the
/// most recently registered first; older ended workers are pruned. Live workers never are.
pub const ENDED_WORKERS_KEPT: usize = 32;

/// The `tracing` targets the bus logs under, one per concern.
///
/// Every event and span of the bus's crates names one of these explicitly (`target: ...`),
/// so a log filter such as `RUST_LOG=event_base::wal=debug` keeps working when code moves
/// between files or crates. All of them begin with `event_base::`, so `event_base=warn`
/// covers the whole bus.
pub mod target {
    /// Building and running a bus: handler registration, signals.
    pub const BUS: &str = "event_base::bus";
    /// A message's path: sends withdrawn, retries, dead letters, replay at start, delayed
    /// delivery, and the `event_base.handle` span around every delivery.
    pub const DELIVERY: &str = "event_base::delivery";
    /// Workers: stuck workers declared dead and their replacements.
    pub const WORKER: &str = "event_base::worker";
    /// Queue backends as the bus uses them: claims and acks that failed.
    pub const QUEUE: &str = "event_base::queue";
    /// The write-ahead log: opening, recovery, writes, syncs, compaction.
    pub const WAL: &str = "event_base::wal";
    /// Shutdown: its start, progress and report.
    pub const SHUTDOWN: &str = "event_base::shutdown";
    /// The `_system.` topics: announcements and requests made by message.
    pub const SYSTEM: &str = "event_base::system";
    /// The audit: writers, the ring, and `TracingWriter`'s records.
    pub const AUDIT: &str = "event_base::audit";
    /// The built-in middleware (`LoggerMiddleware`'s per-delivery lines, `TimeoutMiddleware`).
    pub const MIDDLEWARE: &str = "event_base::middleware";

    /// Every target above.
    pub const ALL: &[&str] = &[
        BUS, DELIVERY, WORKER, QUEUE, WAL, SHUTDOWN, SYSTEM, AUDIT, MIDDLEWARE,
    ];
}
