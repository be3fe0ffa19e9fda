//! [`Shared`]: what every queue of one [`PostgresQueueFactory`](crate::PostgresQueueFactory)
//! uses: the settings, the connection for claims, the writer, the wake-ups, the claims held
//! (whose leases are renewed), and the tasks started on first use.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use event_base_core::backend::{EvictedListener, RevivedListener};
use tokio::sync::{mpsc, watch, Notify};
use tokio_postgres::Config;

use crate::link::{Commits, Link};
use crate::queue::writer::Op;

/// The settings of a factory's queues.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) bound: usize,
    pub(crate) visibility: Duration,
    pub(crate) max_deliveries: u32,
}

/// A subscription's wake-up in this process: its consumers wait on `bell`; `lane` says that
/// rows of this process's lane of it may be claimable (so a claim looks there too).
#[derive(Debug, Default)]
pub(crate) struct Wake {
    pub(crate) bell: Notify,
    lane: AtomicBool,
}

impl Wake {
    /// Whether the lane may hold claimable rows; cleared (a claim that finds it full sets it
    /// again: [`lane_again`](Self::lane_again)).
    pub(crate) fn take_lane(&self) -> bool {
        self.lane.swap(false, Ordering::AcqRel)
    }

    /// The lane may still hold claimable rows.
    pub(crate) fn lane_again(&self) {
        self.lane.store(true, Ordering::Release);
    }
}

/// Each subscription's wake-up, by name: rung by the listener for a notification and by
/// this process's own changes.
#[derive(Debug, Default)]
pub(crate) struct Wakes {
    by_name: Mutex<HashMap<Arc<str>, Weak<Wake>>>,
}

impl Wakes {
    fn map(&self) -> MutexGuard<'_, HashMap<Arc<str>, Weak<Wake>>> {
        self.by_name.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The wake-up of subscription `name` (one per name in a process).
    pub(crate) fn register(&self, name: &Arc<str>) -> Arc<Wake> {
        let mut map = self.map();
        if let Some(n) = map.get(name).and_then(Weak::upgrade) {
            return n;
        }
        map.retain(|_, w| w.strong_count() > 0);
        // A lane is looked at by the first claim.
        let n = Arc::new(Wake {
            bell: Notify::new(),
            lane: AtomicBool::new(true),
        });
        map.insert(name.clone(), Arc::downgrade(&n));
        n
    }

    /// Wakes the consumers here of `name`, a subscription or a lane: of the lanes, only this
    /// process's (`owner`) are its own.
    pub(crate) fn ring(&self, name: &str, owner: &str) {
        let (subscription, lane) = match name.rsplit_once('\u{1f}') {
            Some((sub, node)) if sub.contains('\u{1f}') => {
                if node != owner {
                    return;
                }
                (sub, true)
            }
            _ => (name, false),
        };
        let n = self.map().get(subscription).and_then(Weak::upgrade);
        if let Some(n) = n {
            if lane {
                n.lane_again();
            }
            n.bell.notify_waiters();
        }
    }

    /// Wakes every consumer here, to look in its lane too (after a notification may have
    /// been missed).
    pub(crate) fn ring_all(&self) {
        let all: Vec<_> = self.map().values().filter_map(Weak::upgrade).collect();
        for n in all {
            n.lane_again();
            n.bell.notify_waiters();
        }
    }
}

/// The state of a factory (see the module docs).
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) settings: Settings,
    /// Claims, lease renewals, counts: `synchronous_commit = off`.
    pub(crate) claims: Link,
    /// To the writer (`writer.rs`), which owns a connection of its own.
    pub(crate) ops: mpsc::UnboundedSender<Op>,
    ops_rx: Mutex<Option<mpsc::UnboundedReceiver<Op>>>,
    pub(crate) wakes: Wakes,
    /// This process's name in `claimed_by`, unique per factory.
    pub(crate) owner: Arc<str>,
    /// The rows this process holds, whose leases it renews.
    held: Mutex<HashSet<i64>>,
    /// Dead letters written by this process since it started.
    pub(crate) dead_letters: AtomicU64,
    /// Statements run on every connection but the listener's.
    pub(crate) statements: Arc<AtomicU64>,
    started: AtomicBool,
    /// This process's name and kind (JSON) once a bus described it (`RemoteRoutes::
    /// describe_node`): from then on the lease keeper beats for it in `event_base_nodes`.
    pub(crate) node: Mutex<Option<(String, Option<String>)>>,
    /// Dropped with the factory: its tasks end.
    pub(crate) stop: watch::Sender<()>,
    /// Rung when a subscription was created somewhere (the routes' cache is stale).
    pub(crate) routes_stale: Notify,
    /// This process's record, as far as it is kept here: what is written again if another
    /// process evicted it (`lease.rs`).
    pub(crate) record: Mutex<Record>,
    /// Told of evictions, of others and of this process.
    pub(crate) listeners: Mutex<NodeListeners>,
}

/// The bus's listeners of evictions (`RemoteRoutes::on_evicted`, `on_revived`).
#[derive(Default)]
pub(crate) struct NodeListeners {
    /// Told of every process this one evicts.
    pub(crate) evicted: Vec<EvictedListener>,
    /// Told each time this process finds it was evicted and runs again.
    pub(crate) revived: Vec<RevivedListener>,
}

impl std::fmt::Debug for NodeListeners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeListeners")
            .field("evicted", &self.evicted.len())
            .field("revived", &self.revived.len())
            .finish()
    }
}

/// What this process wrote of itself in `event_base_nodes`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Record {
    /// Whether a write of it was committed (its workers' list) since the last beat that
    /// found none: a beat that finds none now means it was evicted.
    pub(crate) confirmed: bool,
    /// Its live workers as last listed (JSON), if listed.
    pub(crate) workers: Option<String>,
    /// The subscriptions it consumes (its lanes).
    pub(crate) subscriptions: Vec<String>,
}

impl Shared {
    pub(crate) fn new(config: Config, settings: Settings) -> Shared {
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let statements = Arc::new(AtomicU64::new(0));
        Shared {
            claims: Link::new(config.clone(), Commits::Relaxed, statements.clone()),
            statements,
            config,
            settings,
            ops,
            ops_rx: Mutex::new(Some(ops_rx)),
            wakes: Wakes::default(),
            owner: format!("{}-{nanos:08x}", std::process::id()).into(),
            held: Mutex::new(HashSet::new()),
            dead_letters: AtomicU64::new(0),
            started: AtomicBool::new(false),
            node: Mutex::new(None),
            stop: watch::Sender::new(()),
            routes_stale: Notify::new(),
            record: Mutex::new(Record::default()),
            listeners: Mutex::new(NodeListeners::default()),
        }
    }

    /// Marks the tasks started; whether they were not yet (see `tasks.rs`).
    pub(crate) fn first_start(&self) -> bool {
        tokio::runtime::Handle::try_current().is_ok() && !self.started.swap(true, Ordering::AcqRel)
    }

    /// The writer's end of the changes, once.
    pub(crate) fn take_ops(&self) -> Option<mpsc::UnboundedReceiver<Op>> {
        self.ops_rx.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// A subscription was created somewhere (or notifications may have been missed): the
    /// routes are read again on their next use.
    pub(crate) fn routes_changed(&self) {
        self.routes_stale.notify_one();
    }

    /// This process's name and kind (JSON), if a bus described it.
    pub(crate) fn described(&self) -> Option<(String, Option<String>)> {
        self.node.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// This process's name: its bus's, else the process's.
    pub(crate) fn node_name(&self) -> String {
        self.described()
            .map_or_else(event_base_core::node_name, |(name, _)| name)
    }

    /// Whether this process has a record (a bus described it, or it consumes a
    /// subscription): from then on the lease keeper beats for it.
    pub(crate) fn recorded(&self) -> bool {
        self.described().is_some() || !self.record().subscriptions.is_empty()
    }

    /// The bus's listeners of evictions.
    pub(crate) fn listeners(&self) -> MutexGuard<'_, NodeListeners> {
        self.listeners.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What this process wrote of itself.
    pub(crate) fn record(&self) -> MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The change that writes this process's whole record again (after an eviction).
    pub(crate) fn record_again(&self) -> Op {
        let record = self.record().clone();
        let (name, kind) = self
            .described()
            .unwrap_or_else(|| (event_base_core::node_name(), None));
        Op::Node {
            id: self.owner.clone(),
            name,
            kind,
            pid: pid(),
            workers: record.workers,
            subscriptions: Some(record.subscriptions),
            answer: None,
        }
    }

    fn held(&self) -> MutexGuard<'_, HashSet<i64>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn hold(&self, seqs: impl IntoIterator<Item = i64>) {
        self.held().extend(seqs);
    }

    pub(crate) fn let_go(&self, seqs: impl IntoIterator<Item = i64>) {
        let mut held = self.held();
        for s in seqs {
            held.remove(&s);
        }
    }

    pub(crate) fn held_now(&self) -> Vec<i64> {
        self.held().iter().copied().collect()
    }
}

/// This process's id, as the records keep it.
pub(crate) fn pid() -> i32 {
    i32::try_from(std::process::id()).unwrap_or(0)
}
