//! Workers of processes that died: with a queue backend announcer by several processes, the
//! bus keeps the list of its live workers with the backend's record of the process
//! ([`RemoteRoutes::list_workers`](crate::backend::RemoteRoutes::list_workers)), and announces the workers of a process the backend
//! evicted as [`Dead`](DiscoveryEvent::Dead) on `_system.worker_discovery`
//! ([`RemoteRoutes::on_evicted`](crate::backend::RemoteRoutes::on_evicted)). A process that stopped cleanly lists none by then (its
//! shutdown clears the list, after its workers announced `Left`), so only one that died is
//! announced. A process that was taken for dead while it was only paused (or cut off) hears
//! of it when it runs again ([`RemoteRoutes::on_revived`](crate::backend::RemoteRoutes::on_revived))
//! and announces its live workers as [`Joined`](DiscoveryEvent::Joined) again, so that a
//! watcher's view of the cluster does not keep them dead.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::routes::{EvictedNode, NodeWorker};
use crate::constant::WORKER_DISCOVERY;
use crate::message::topic::MessageTopic;
use crate::system_topics::announcer::Announcer;
use crate::system_topics::discovery::WorkerDiscovery;
use crate::worker::registry::DiscoveryEvent;
use crate::worker::registry::{WorkerInfo, WorkerStatus};

/// The longest a worker's start or end waits for the backend to take the new list.
const LIST_WAIT: Duration = Duration::from_secs(1);

/// Follows, for `announcer` (until the bus is gone), the backend's evictions of other processes
/// and its news that this one was evicted and runs again.
pub(crate) fn follow_liveness(announcer: &Arc<Announcer>) {
    follow_evictions(announcer);
    follow_revival(announcer);
}

/// Follows the backend's evictions for `announcer`.
fn follow_evictions(announcer: &Arc<Announcer>) {
    let Some(remote) = &announcer.delivery.remote else {
        return;
    };
    let weak = Arc::downgrade(announcer);
    remote
        .provider
        .on_evicted(Box::new(move |node| match weak.upgrade() {
            Some(announcer) => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move { announcer.announce_evicted(node).await });
                }
                true
            }
            None => false,
        }));
}

/// Follows the backend's news that this process was taken for dead and runs again.
fn follow_revival(announcer: &Arc<Announcer>) {
    let Some(remote) = &announcer.delivery.remote else {
        return;
    };
    let weak = Arc::downgrade(announcer);
    remote
        .provider
        .on_revived(Box::new(move || match weak.upgrade() {
            Some(announcer) => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move { announcer.announce_revived().await });
                }
                true
            }
            None => false,
        }));
}

impl Announcer {
    /// Gives a announcer backend this process's live workers (after one joined, left or
    /// died), waiting at most [`LIST_WAIT`]; a failure is logged, and the list is given
    /// again with the next change.
    pub(crate) async fn list_workers_with_backend(&self) {
        if self.delivery.remote.is_none() {
            return;
        }
        let workers: Vec<NodeWorker> = self
            .registry
            .states()
            .iter()
            .filter(|s| !matches!(s.status(), WorkerStatus::Stopped | WorkerStatus::Dead))
            .map(|s| NodeWorker {
                name: s.name.clone(),
                topic: s.topic.0.clone(),
            })
            .collect();
        self.give_workers(workers).await;
    }

    /// At the end of a shutdown: no worker of this process is listed any more (the bus's
    /// own ones included, which announce no `Left`).
    pub(crate) async fn unlist_workers(&self) {
        self.give_workers(Vec::new()).await;
    }

    async fn give_workers(&self, workers: Vec<NodeWorker>) {
        let Some(remote) = &self.delivery.remote else {
            return;
        };
        let listed = remote.provider.list_workers(&self.node.name, workers);
        match tokio::time::timeout(LIST_WAIT, listed).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(target: crate::constant::target::SYSTEM, error = %e, "could not list this process's workers with the backend; if it dies now, others may not name them")
            }
            Err(_) => {
                tracing::debug!(target: crate::constant::target::SYSTEM, "listing this process's workers with the backend timed out; if it dies now, others may not name them")
            }
        }
    }

    /// Announces each worker of an evicted process as `Dead`, if anyone listens.
    async fn announce_evicted(&self, node: EvictedNode) {
        tracing::warn!(target: crate::constant::target::SYSTEM, node = %node.name, workers = node.workers.len(), "a process fell silent and was evicted; its workers are announced dead");
        if !self.delivery.subscribed(WORKER_DISCOVERY) {
            return;
        }
        for w in node.workers {
            let value = WorkerDiscovery {
                event: DiscoveryEvent::Dead,
                worker: WorkerInfo {
                    name: w.name,
                    topic: MessageTopic::from(w.topic),
                    node: node.name.clone(),
                    status: WorkerStatus::Dead,
                    current_message: None,
                    processed: 0,
                    last_heartbeat: node.last_seen,
                },
            };
            self.delivery.announce(WORKER_DISCOVERY, &value).await;
        }
    }
}
