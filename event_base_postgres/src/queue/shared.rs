//! [`Shared`]: what every queue of one [`PostgresQueueFactory`](crate::PostgresQueueFactory)
//! uses: the settings, the connection for claims, the writer, the wake-ups, the claims held
//! (whose leases are renewed), and the tasks started on first use.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

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

/// Each subscription's wake-up, by name: rung by the listener for a notification and by
/// this process's own changes.
#[derive(Debug, Default)]
pub(crate) struct Wakes {
    by_name: Mutex<HashMap<Arc<str>, Weak<Notify>>>,
}

impl Wakes {
    fn map(&self) -> MutexGuard<'_, HashMap<Arc<str>, Weak<Notify>>> {
        self.by_name.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The wake-up of subscription `name` (one per name in a process).
    pub(crate) fn register(&self, name: &Arc<str>) -> Arc<Notify> {
        let mut map = self.map();
        if let Some(n) = map.get(name).and_then(Weak::upgrade) {
            return n;
        }
        map.retain(|_, w| w.strong_count() > 0);
        let n = Arc::new(Notify::new());
        map.insert(name.clone(), Arc::downgrade(&n));
        n
    }

    /// Wakes subscription `name`'s consumers here, if it has any.
    pub(crate) fn ring(&self, name: &str) {
        let n = self.map().get(name).and_then(Weak::upgrade);
        if let Some(n) = n {
            n.notify_waiters();
        }
    }

    /// Wakes every consumer here (after a notification may have been missed).
    pub(crate) fn ring_all(&self) {
        let all: Vec<_> = self.map().values().filter_map(Weak::upgrade).collect();
        for n in all {
            n.notify_waiters();
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
