//! [`RemoteRoutes`]: what a queue backend shared by several processes knows of the handlers
//! the *other* processes run, so that a bus can send to a topic it has no handler of.
//!
//! A bus asks its factory once, at build ([`QueueFactory::routes`](crate::backend::QueueFactory::routes));
//! in-memory backends answer `None`, and a send to a topic with no handler in the process is
//! then [`CoreError::NoHandler`](crate::CoreError::NoHandler), as always. A backend that
//! answers keeps the registry cached in the process and refreshes it on its own schedule
//! (the Redis backend: with each heartbeat), so the send path never waits on it, except once
//! on a miss ([`look_up`](RemoteRoutes::look_up)).
//!
//! A backend that keeps a record of each process can also tell a bus when another process
//! fell silent and was cleaned up after ([`on_evicted`](RemoteRoutes::on_evicted)): the bus
//! lists its live workers with the backend ([`list_workers`](RemoteRoutes::list_workers)) so
//! that whoever evicts it can name them. A process that was taken for dead while it was only
//! paused hears of it when it runs again ([`on_revived`](RemoteRoutes::on_revived)), so that its
//! workers can be announced as joined again.

use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::backend::queue::EProducer;
use crate::error::QueueError;
use crate::message::topic::MessageTopic;
use crate::node::NodeType;

/// What the shared queues of some subscriptions still hold, in every process
/// ([`RemoteRoutes::outstanding`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outstanding {
    /// Entries in the subscriptions' queues that no node has settled: not yet claimed, or
    /// claimed and not yet acked (being handled, waiting for a retry, or held by a node that
    /// died, until another takes them over).
    pub queued: u64,
    /// Messages the queues keep until they are due (`deliver_at` ahead).
    pub delayed: u64,
}

impl Outstanding {
    /// Everything: queued and delayed.
    pub fn total(&self) -> u64 {
        self.queued + self.delayed
    }
}

/// Called after each refresh of a [`RemoteRoutes`] cache; returns `false` to be dropped (its
/// bus is gone).
pub type RoutesListener = Box<dyn Fn() -> bool + Send + Sync>;

/// Called when a process was taken for dead and evicted ([`RemoteRoutes::on_evicted`]);
/// returns `false` to be dropped (its bus is gone).
pub type EvictedListener = Box<dyn Fn(EvictedNode) -> bool + Send + Sync>;

/// Called when the backend finds that this process was taken for dead and cleaned up after
/// while it was only paused, and now runs again ([`RemoteRoutes::on_revived`]); returns
/// `false` to be dropped (its bus is gone).
pub type RevivedListener = Box<dyn Fn() -> bool + Send + Sync>;

/// A worker as its process listed it with the backend ([`RemoteRoutes::list_workers`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeWorker {
    /// Its name, `<handler>-<index>`.
    pub name: String,
    /// The topic it serves.
    pub topic: String,
}

/// A process another one took for dead (silent past the backend's limit) and cleaned up
/// after, with the workers it had listed last.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EvictedNode {
    /// Its bus's node name, as it listed its workers ([`RemoteRoutes::list_workers`]):
    /// `EventBusBuilder::node_name`, else the process's [`node_name`](crate::node_name).
    pub name: String,
    /// The workers it ran when it fell silent.
    pub workers: Vec<NodeWorker>,
    /// Its last sign of life, by the backend's clock.
    pub last_seen: SystemTime,
}

impl EvictedNode {
    /// A process named `name` with `workers`, last seen at `last_seen`.
    pub fn new(name: String, workers: Vec<NodeWorker>, last_seen: SystemTime) -> Self {
        EvictedNode {
            name,
            workers,
            last_seen,
        }
    }
}

/// A process sharing the backend, as the backend's record of it says
/// ([`RemoteRoutes::nodes`]): what an operator's node list shows.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeRecord {
    /// The backend's id of the process (the Redis backend: `<pid>-<12 hex digits>`, new at
    /// every start).
    pub id: String,
    /// Its bus's node name (`EventBusBuilder::node_name`, else the process's
    /// [`node_name`](crate::node_name)); empty once the record of a silent process expired.
    pub name: String,
    /// Its bus's node type; `None` once the record of a silent process expired.
    pub kind: Option<NodeType>,
    /// Its process id, if the backend knows it.
    pub pid: Option<u32>,
    /// Its last sign of life, by the backend's clock.
    pub last_seen: SystemTime,
    /// The workers it listed last ([`RemoteRoutes::list_workers`]).
    pub workers: Vec<NodeWorker>,
}

impl NodeRecord {
    /// A process with id `id`, last seen at `last_seen`, of which nothing else is known yet.
    pub fn new(id: String, last_seen: SystemTime) -> Self {
        NodeRecord {
            id,
            name: String::new(),
            kind: None,
            pid: None,
            last_seen,
            workers: Vec::new(),
        }
    }
}

/// The cluster's registry of handlers, as one process sees it (see the module docs).
///
/// The bus sends a message to a topic it has no handler of to every handler
/// [`handlers_of`](Self::handlers_of) lists, through [`producer`](Self::producer), and to a
/// topic it has handlers of, also to the listed handlers it does not run itself. Those copies
/// are queued before the send answers, and are the backend's from then on: the bus does not
/// count them in flight past the send (the process that claims one counts it), but
/// `wait_idle` asks [`outstanding`](Self::outstanding) whether they are handled. A message the bus's
/// own WAL holds for a topic only other processes handle (an outbox's, or one replayed at
/// start) is completed there once [`flush`](Self::flush) confirmed its copies.
#[async_trait]
pub trait RemoteRoutes: Send + Sync + 'static {
    /// The handlers of `topic` in the cluster, as last refreshed (no I/O): this process's
    /// own included, if it registered them. Empty for a topic nobody handles.
    fn handlers_of(&self, topic: &str) -> Vec<Arc<str>>;

    /// Looks `topic` up in the registry now, for a send that found no handler in the cache:
    /// updates the cache and returns the topic's handlers. May answer from the cache instead
    /// when the topic was looked up a moment ago (the backend rate-limits this, so a stream
    /// of sends to a topic nobody handles does not become a stream of registry reads).
    async fn look_up(&self, topic: &str) -> Result<Vec<Arc<str>>, QueueError>;

    /// The sending side of the subscription `handler` of `topic` (made once per pair by the
    /// bus, and kept). Its messages due later must be kept by the queue itself
    /// ([`EProducer::keeps_delayed`]): the bus hands them over at once.
    fn producer(
        &self,
        topic: &MessageTopic,
        handler: &str,
    ) -> Result<Arc<dyn EProducer>, QueueError>;

    /// Waits until every copy queued so far through this backend's producers is written
    /// (the Redis backend: a `PING` behind them on the writer). The default has nothing to
    /// wait for.
    async fn flush(&self) -> Result<(), QueueError> {
        Ok(())
    }

    /// What the shared queues of `subscriptions` (each a topic and one of its handlers) still
    /// hold, in every process: what `EventBus::wait_idle` waits for besides what its own
    /// process holds (and `Drain`, for the subscriptions of its own handlers). Called after
    /// [`flush`](Self::flush), so this process's own sends are counted. It reads the queues
    /// as a whole, whoever sent to them. The default, `Ok(None)`, says the backend cannot
    /// tell: the bus then waits for what its process holds only.
    async fn outstanding(
        &self,
        subscriptions: &[(MessageTopic, Arc<str>)],
    ) -> Result<Option<Outstanding>, QueueError> {
        let _ = subscriptions;
        Ok(None)
    }

    /// The processes sharing the backend, this one included, as the backend's records of
    /// them say now (one read, not cached): what `EventBus::nodes` answers, for an operator's
    /// node list. The default, `Ok(None)`, says the backend keeps no record of processes.
    async fn nodes(&self) -> Result<Option<Vec<NodeRecord>>, QueueError> {
        Ok(None)
    }

    /// Calls `listener` after every refresh of the cache (and after a
    /// [`look_up`](Self::look_up) that changed it), until it returns `false`.
    fn on_refresh(&self, listener: RoutesListener);

    /// Tells the backend the node name and type of a bus built on it (`EventBusBuilder::
    /// node_name` / `node_type`, else the process's [`node_name`](crate::node_name) /
    /// [`node_type`](crate::node_type)), once, at build, before any of the bus's queues is
    /// made. A backend that keeps a record of each process writes these in it instead of the
    /// process's (the Redis backend: the node hash's `name`, which a `to_worker:
    /// "<node name>/<worker>"` resolves, and `type`, only a `Host` holding the janitor
    /// lease). Several buses on one backend may each call it: the backend says whose wins.
    /// The default keeps nothing.
    fn describe_node(&self, name: &str, kind: NodeType) {
        let _ = (name, kind);
    }

    /// Keeps `workers`, this process's live workers under `node` (its node name), with the
    /// backend's record of the process, replacing what was listed before; an empty list
    /// clears it. The bus calls this whenever a worker joins, leaves or dies, so that a
    /// process that falls silent can be named with its workers to the others
    /// ([`on_evicted`](Self::on_evicted)), and one that stopped cleanly is not. The default
    /// keeps nothing.
    async fn list_workers(&self, node: &str, workers: Vec<NodeWorker>) -> Result<(), QueueError> {
        let _ = (node, workers);
        Ok(())
    }

    /// Calls `listener` for every process this one cleaned up after (the Redis backend: when
    /// this process holds the janitor lease and evicts a silent node), until it returns
    /// `false`. The bus announces each of the evicted process's workers as
    /// [`Dead`](crate::DiscoveryEvent::Dead) on `_system.worker_discovery`. The default never
    /// calls it.
    fn on_evicted(&self, listener: EvictedListener) {
        drop(listener);
    }

    /// Calls `listener` each time the backend finds that another process evicted this one
    /// (took it for dead: it was paused, or cut off, past the backend's silence limit) and
    /// this one runs again, until it returns `false`. The others announced its workers as
    /// [`Dead`](crate::DiscoveryEvent::Dead) by then; the bus announces its live workers as
    /// [`Joined`](crate::DiscoveryEvent::Joined) again. The default never calls it.
    fn on_revived(&self, listener: RevivedListener) {
        drop(listener);
    }
}

/// The system topics a backend shared by several processes carries between them: shutdown
/// commands and their acks, worker discovery and the topic tables. Every message of one
/// reaches every process that handles it (the Redis backend: a broadcast stream per handler;
/// PostgreSQL: a copy in each process's lane). The other system topics (audit, heartbeats,
/// dead-letter notices) stay in each process.
///
/// ```
/// use event_base_core::backend::is_cluster_system_topic;
///
/// assert!(is_cluster_system_topic("_system.worker_discovery"));
/// assert!(!is_cluster_system_topic("_system.audit"));
/// assert!(!is_cluster_system_topic("orders"));
/// ```
pub const CLUSTER_SYSTEM_TOPICS: &[&str] = &[
    crate::constant::SHUTDOWN,
    crate::constant::SHUTDOWN_ACK,
    crate::constant::WORKER_DISCOVERY,
    crate::constant::TOPIC_SYNC,
    crate::constant::TOPIC_DISCOVERY,
];

/// Whether `topic` is one of the [`CLUSTER_SYSTEM_TOPICS`].
pub fn is_cluster_system_topic(topic: &str) -> bool {
    CLUSTER_SYSTEM_TOPICS.contains(&topic)
}

/// The node and the worker of an address `to_worker: "<node>/<worker>"` (both non-empty), or
/// `None` for a plain worker name: how every backend with nodes reads an address, so that the
/// bus and the backends agree on it.
///
/// ```
/// use event_base_core::backend::node_and_worker;
///
/// assert_eq!(node_and_worker("41-a1b2c3d4e5f6/orders-2"), Some(("41-a1b2c3d4e5f6", "orders-2")));
/// assert_eq!(node_and_worker("orders-2"), None);
/// assert_eq!(node_and_worker("/orders-2"), None);
/// ```
pub fn node_and_worker(to_worker: &str) -> Option<(&str, &str)> {
    to_worker
        .split_once('/')
        .filter(|(node, worker)| !node.is_empty() && !worker.is_empty())
}
