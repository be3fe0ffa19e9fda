//! For authors of WAL and queue backends: the contracts a backend implements, and the types
//! that cross them.
//!
//! An application does not need these names. It hands a WAL (`MemoryWal`, `PersistentWal`)
//! and a queue factory (`FlumeQueueFactory`, `MpmcQueueFactory`) to the builder or to
//! `start_system!`, and the bus does the rest. Write against this module to add a backend of
//! your own (a database WAL, a broker-backed queue), or to drive a WAL directly (tools,
//! tests): [`Wal`] is the write-ahead log, [`QueueFactory`] makes the per-topic queues.
//! `event_base_wal` and `event_base_queue` hold the implementations; the conformance suites in
//! the repository's `event_base_test` (`wal_conformance.rs`, `queue_conformance.rs`) check
//! every one against the same cases, and a new backend can run them too.
//!
//! | name | what it is |
//! |---|---|
//! | [`Wal`] | the write-ahead log: append, state changes, replay, dead letters |
//! | [`WalRecord`], [`WalRecordState`] | one logged message and its state (pending, processing, complete, failed) |
//! | [`WalCommit`], [`WalCommitter`] | when an append is durable: what the sender awaits, and what the backend answers it with |
//! | [`WalStats`] | a WAL's counters (also `EventBus::wal_stats`) |
//! | [`QueueFactory`], [`TopicQueue`], [`TopicLogSpec`] | one queue per topic, or the bus's topic log for an in-memory backend |
//! | [`EProducer`], [`EConsumer`] | the two ends of a topic's queue |
//! | [`Claimed`], [`Receipt`] | a claimed message, and what acks or nacks it |
//! | [`ClaimStatus`] | whether a claim in doubt (`EConsumer::claim_in_doubt`) is still the consumer's (`EConsumer::confirm_claim`) |
//! | [`ordering_key`] | the key a message is ordered by in a subscription (`Standard`, for no worker in particular), for backends that keep that order themselves |
//! | [`QueuedRetry`] | what became of a retry handed to a queue that keeps retries (`EConsumer::retry_later`) |
//! | [`TrySendError`] | why `EProducer::try_send` did not enqueue (full: the message is handed back; or the queue failed) |
//! | [`RemoteRoutes`], [`RoutesListener`] | a shared backend's registry of the handlers other processes run (`QueueFactory::routes`) |
//! | [`node_and_worker`] | an address `to_worker: "<node>/<worker>"` read into its two parts, as the bus reads it |
//! | [`Outstanding`] | what the shared queues of some subscriptions still hold (`RemoteRoutes::outstanding`, for `wait_idle`) |
//!
//! May import: `message/`, `constant`, `error`. Nothing here knows a running bus.
//!
//! | file | holds |
//! |---|---|
//! | `wal.rs` | `Wal`, `WalCommit`, `WalCommitter`, `WalRecord`, `WalRecordState`, `WalStats`, `PendingWindow` |
//! | `queue.rs` | `ordering_key`, `TopicQueue`, `EProducer`, `EConsumer`, `Claimed`, `Receipt`, `ClaimStatus`, `QueuedRetry`, `TrySendError` |
//! | `queue_factory.rs` | `QueueFactory` |
//! | `routes.rs` | `node_and_worker`, `RemoteRoutes`, `RoutesListener`, `EvictedListener`, `RevivedListener`, `EvictedNode`, `NodeWorker`, `Outstanding` |

pub(crate) mod queue;
pub(crate) mod queue_factory;
pub(crate) mod rate_limiter;
pub(crate) mod routes;
pub(crate) mod wal;

pub use queue::{
    ordering_key, ClaimStatus, Claimed, EConsumer, EProducer, QueuedRetry, Receipt, TopicQueue,
    TrySendError,
};
pub use queue_factory::{QueueFactory, TopicLogSpec};
pub use rate_limiter::RateLimiter;
pub use routes::{
    is_cluster_system_topic, node_and_worker, EvictedListener, EvictedNode, NodeRecord, NodeWorker,
    Outstanding, RemoteRoutes, RevivedListener, RoutesListener, CLUSTER_SYSTEM_TOPICS,
};
pub use wal::{
    PendingWindow, StoredSchedule, Wal, WalCommit, WalCommitter, WalRecord, WalRecordState,
    WalStats,
};
