//! [`WorkerRegistry`]: every worker of a system with its topic, status and liveness.
//!
//! A worker shows it is alive by making progress. The system's monitor samples every worker
//! once per heartbeat interval: an idle worker, or one whose count of finished messages moved,
//! is alive and gets a fresh `last_heartbeat`; one that has been working on the same message
//! for longer than the stale limit is declared [`WorkerStatus::Dead`], cancelled, and its
//! message delivered again to another worker. Sampling costs the hot path nothing: workers only
//! bump counters they keep anyway. The samples are published, batched, on
//! `_system.worker_heartbeat` when something subscribes.
//!
//! Ended workers (`Stopped`, `Dead`) are pruned: the registry keeps every live worker and
//! only the [`ENDED_WORKERS_KEPT`](crate::constant::ENDED_WORKERS_KEPT) most recently registered ended ones. Their end has been
//! announced on `_system.worker_discovery` (`Left`, `Dead`) by then; keeping a few lets
//! `registry().get(name)` and `EventBus::workers` still say how a worker that just stopped or
//! died ended, and the bound keeps a long-running bus that scales down and up, or whose monitor
//! keeps replacing stuck workers, from growing without end. Shutdown reports do not depend on
//! the registry keeping them: the coordinator holds the workers it stops until it has reported.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::constant::ENDED_WORKERS_KEPT;
use crate::delivery::subscription::job::Job;
use crate::message::topic::MessageTopic;

/// What a worker is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum WorkerStatus {
    /// Waiting for a message.
    Idle,
    /// Running a handler.
    Working,
    /// Asked to stop: finishing its inbox before it ends (a worker busy with a message when
    /// asked shows `Working` until that message is done).
    Stopping,
    /// Stopped.
    Stopped,
    /// Stuck past the stale limit; cancelled, its message redelivered.
    Dead,
}

impl WorkerStatus {
    fn from_u8(v: u8) -> WorkerStatus {
        match v {
            0 => WorkerStatus::Idle,
            1 => WorkerStatus::Working,
            2 => WorkerStatus::Stopping,
            3 => WorkerStatus::Stopped,
            _ => WorkerStatus::Dead,
        }
    }
}

/// What happened to a worker, as announced on `_system.worker_discovery`
/// ([`WorkerDiscovery`](crate::WorkerDiscovery)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum DiscoveryEvent {
    /// It started.
    Joined,
    /// It stopped.
    Left,
    /// It was declared dead by the monitor.
    Dead,
}

/// A worker's live state, shared between the worker task, the monitor and the registry.
#[derive(Debug)]
pub(crate) struct WorkerState {
    /// The node it runs on.
    pub(crate) node: Arc<str>,
    pub(crate) name: String,
    pub(crate) handler: String,
    pub(crate) topic: MessageTopic,
    pub(crate) index: usize,
    status: AtomicU8,
    processed: AtomicU64,
    pub(crate) acked: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) dead: AtomicU64,
    stop_requested: AtomicBool,
    /// Rung by a stop request; a plain worker also has its inbox and its topic's work
    /// channel ring it (`JobReceiver::ring_on`), so that it parks on this and its queue only.
    stop: Arc<Notify>,
    /// The job being handled. Whoever takes it out owns its outcome: the worker when the
    /// handler returns, or the monitor when it declares the worker dead.
    current: Mutex<Option<Job>>,
    /// A batch worker's jobs being handled, owned as `current` is.
    batch: Mutex<Vec<Job>>,
    /// Milliseconds since the Unix epoch of the last sign of life the monitor saw.
    last_heartbeat_ms: AtomicU64,
}

impl WorkerState {
    pub(crate) fn new(
        name: String,
        handler: String,
        topic: MessageTopic,
        index: usize,
        node: Arc<str>,
    ) -> Self {
        WorkerState {
            node,
            name,
            handler,
            topic,
            index,
            status: AtomicU8::new(WorkerStatus::Idle as u8),
            processed: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            retried: AtomicU64::new(0),
            dead: AtomicU64::new(0),
            stop_requested: AtomicBool::new(false),
            stop: Arc::new(Notify::new()),
            current: Mutex::new(None),
            batch: Mutex::new(Vec::new()),
            last_heartbeat_ms: AtomicU64::new(now_ms()),
        }
    }

    #[inline]
    pub(crate) fn set_status(&self, s: WorkerStatus) {
        self.status.store(s as u8, Ordering::Release);
    }

    pub(crate) fn status(&self) -> WorkerStatus {
        WorkerStatus::from_u8(self.status.load(Ordering::Acquire))
    }

    #[inline]
    pub(crate) fn count_processed(&self) {
        self.processed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn processed(&self) -> u64 {
        self.processed.load(Ordering::Relaxed)
    }

    /// Shows `Stopping` for an idle worker about to stop (a working one shows it when done).
    pub(crate) fn set_status_if_idle_stopping(&self) {
        let _ = self.status.compare_exchange(
            WorkerStatus::Idle as u8,
            WorkerStatus::Stopping as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Asks the worker to stop after its current message (and, for a graceful stop, its inbox).
    pub(crate) fn request_stop(&self) {
        self.stop_requested.store(true, Ordering::Release);
        self.stop.notify_one();
    }

    pub(crate) fn stop_requested(&self) -> bool {
        self.stop_requested.load(Ordering::Acquire)
    }

    /// Wakes on a stop request, and on whatever else rings the worker's [`bell`](Self::bell).
    pub(crate) async fn stop_signal(&self) {
        self.stop.notified().await
    }

    /// The bell [`stop_signal`](Self::stop_signal) waits for, for job channels to ring too.
    pub(crate) fn bell(&self) -> &Arc<Notify> {
        &self.stop
    }

    pub(crate) fn set_current(&self, job: Job) {
        if let Ok(mut c) = self.current.lock() {
            *c = Some(job);
        }
    }

    /// Takes the current job; `None` if someone else (the monitor) already did.
    pub(crate) fn take_current(&self) -> Option<Job> {
        self.current.lock().ok().and_then(|mut c| c.take())
    }

    /// A batch worker's jobs, handed over as one (see `current`).
    pub(crate) fn set_current_batch(&self, jobs: Vec<Job>) {
        if let Ok(mut b) = self.batch.lock() {
            *b = jobs;
        }
    }

    /// Takes a batch worker's jobs; empty if someone else (the monitor) already did.
    pub(crate) fn take_current_batch(&self) -> Vec<Job> {
        self.batch
            .lock()
            .map(|mut b| std::mem::take(&mut *b))
            .unwrap_or_default()
    }

    /// Takes whatever the worker is handling (its job, or its batch's); empty if it handles
    /// nothing or someone else took it.
    pub(crate) fn take_in_hand(&self) -> Vec<Job> {
        let mut jobs: Vec<Job> = self.take_current().into_iter().collect();
        jobs.extend(self.take_current_batch());
        jobs
    }

    pub(crate) fn current_id(&self) -> Option<String> {
        let single = self
            .current
            .lock()
            .ok()
            .and_then(|c| c.as_ref().map(|j| j.message.id.clone()));
        single.or_else(|| {
            self.batch
                .lock()
                .ok()
                .and_then(|b| b.first().map(|j| j.message.id.clone()))
        })
    }

    pub(crate) fn beat(&self) {
        self.last_heartbeat_ms.store(now_ms(), Ordering::Relaxed);
    }

    pub(crate) fn metrics(&self) -> crate::observe::snapshot::WorkerMetrics {
        crate::observe::snapshot::WorkerMetrics {
            handled: self.processed(),
            acked: self.acked.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            dead: self.dead.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn info(&self) -> WorkerInfo {
        WorkerInfo {
            name: self.name.clone(),
            topic: self.topic.clone(),
            node: self.node.to_string(),
            status: self.status(),
            current_message: self.current_id(),
            processed: self.processed(),
            last_heartbeat: SystemTime::UNIX_EPOCH
                + std::time::Duration::from_millis(self.last_heartbeat_ms.load(Ordering::Relaxed)),
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A worker as the registry reports it (and as `_system.worker_heartbeat` carries it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WorkerInfo {
    /// Unique name, `<handler>-<index>`.
    pub name: String,
    /// The topic it serves.
    pub topic: MessageTopic,
    /// The node (process) it runs on: its [`node_name`](crate::node_name).
    pub node: String,
    /// What it is doing.
    pub status: WorkerStatus,
    /// The message it is handling, if any.
    pub current_message: Option<String>,
    /// Deliveries it has finished.
    pub processed: u64,
    /// The last time the monitor saw it alive.
    pub last_heartbeat: SystemTime,
}

/// Whether a worker has ended for good.
fn ended(state: &WorkerState) -> bool {
    matches!(state.status(), WorkerStatus::Stopped | WorkerStatus::Dead)
}

/// Every worker of one system: all live ones, and the [`ENDED_WORKERS_KEPT`](crate::constant::ENDED_WORKERS_KEPT) most recently
/// registered of those that have stopped or died.
#[derive(Debug, Default)]
pub struct WorkerRegistry {
    workers: RwLock<Vec<Arc<WorkerState>>>,
}

impl WorkerRegistry {
    pub(crate) fn register(&self, state: Arc<WorkerState>) {
        if let Ok(mut w) = self.workers.write() {
            w.push(state);
            prune(&mut w);
        }
    }

    /// Every listed worker. Prunes first if more ended workers are listed than are kept, so
    /// whoever reads (the monitor, every heartbeat interval; metrics; `list`) keeps the
    /// registry bounded without the workers' own paths having to.
    pub(crate) fn states(&self) -> Vec<Arc<WorkerState>> {
        let over = self
            .workers
            .read()
            .map(|w| w.iter().filter(|s| ended(s)).count() > ENDED_WORKERS_KEPT)
            .unwrap_or(false);
        if over {
            if let Ok(mut w) = self.workers.write() {
                prune(&mut w);
            }
        }
        self.workers.read().map(|w| w.clone()).unwrap_or_default()
    }

    pub(crate) fn state(&self, name: &str) -> Option<Arc<WorkerState>> {
        self.workers
            .read()
            .ok()?
            .iter()
            .find(|s| s.name == name)
            .cloned()
    }

    /// Every live worker, and the most recently registered [`ENDED_WORKERS_KEPT`](crate::constant::ENDED_WORKERS_KEPT) stopped or
    /// dead ones.
    pub fn list(&self) -> Vec<WorkerInfo> {
        self.states().iter().map(|s| s.info()).collect()
    }

    /// Names of the live (not stopped, not dead) workers serving `topic`.
    pub fn names_for(&self, topic: &str) -> Vec<String> {
        self.states()
            .iter()
            .filter(|s| {
                s.topic.as_str() == topic
                    && !matches!(s.status(), WorkerStatus::Stopped | WorkerStatus::Dead)
            })
            .map(|s| s.name.clone())
            .collect()
    }

    /// One worker by name.
    pub fn get(&self, name: &str) -> Option<WorkerInfo> {
        self.state(name).map(|s| s.info())
    }
}

/// Drops the oldest ended workers beyond [`ENDED_WORKERS_KEPT`](crate::constant::ENDED_WORKERS_KEPT), keeping the order of the rest.
fn prune(workers: &mut Vec<Arc<WorkerState>>) {
    let ended_count = workers.iter().filter(|s| ended(s)).count();
    let mut drop = ended_count.saturating_sub(ENDED_WORKERS_KEPT);
    if drop == 0 {
        return;
    }
    workers.retain(|s| {
        if drop > 0 && ended(s) {
            drop -= 1;
            false
        } else {
            true
        }
    });
}
