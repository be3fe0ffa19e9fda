//! [`Announcer`]: what the bus announces about itself, its workers' arrivals and departures
//! on `_system.worker_discovery` and its topic table on `_system.topic_sync` (sent through
//! the delivery hub's `announce`, `delivery/send/announce.rs`, only when something
//! subscribes). It holds only what that takes: the hub, the worker registry and the node.
//! What it does about other processes' evictions is in `evicted.rs`.

use std::sync::Arc;

use crate::constant::{TOPIC_SYNC, WORKER_DISCOVERY};
use crate::delivery::hub::DeliveryHub;
use crate::node::NodeIdentity;
use crate::system_topics::discovery::{TopicInfo, TopicSync, WorkerDiscovery};
use crate::worker::registry::DiscoveryEvent;
use crate::worker::registry::{WorkerRegistry, WorkerState, WorkerStatus};

/// The bus's announcements about its workers and topics (see the module docs).
pub(crate) struct Announcer {
    pub(crate) delivery: Arc<DeliveryHub>,
    /// Every worker of the bus.
    pub(crate) registry: Arc<WorkerRegistry>,
    /// Which node this bus is (taken from the process defaults or the builder at build).
    pub(crate) node: NodeIdentity,
}

impl Announcer {
    /// The node's topic table.
    pub(crate) fn topic_sync(&self) -> TopicSync {
        let mut topics: Vec<TopicInfo> = self
            .delivery
            .topics
            .keys()
            .map(|t| TopicInfo {
                topic: t.0.clone(),
                workers: self.registry.names_for(t.as_str()),
            })
            .collect();
        topics.sort_by(|a, b| a.topic.cmp(&b.topic));
        TopicSync {
            node: self.node.name.to_string(),
            topics,
        }
    }

    /// A bus's start: its workers' `Joined` and its topic table, for whoever subscribes
    /// (with a shared backend, looked up in the registry first).
    pub(crate) async fn announce_start(&self, started: &[Arc<WorkerState>]) {
        self.delivery
            .look_up_subscribers(&[WORKER_DISCOVERY, TOPIC_SYNC])
            .await;
        // Listed before they are announced: whoever sees a `Joined` can count on a `Dead`
        // should this process die from then on.
        self.list_workers_with_backend().await;
        for state in started {
            self.announce_discovery(DiscoveryEvent::Joined, state).await;
        }
        let sync = self.topic_sync();
        self.delivery.announce(TOPIC_SYNC, &sync).await;
    }

    /// This process was taken for dead by another and runs again: its live workers' `Joined`
    /// once more (the others announced them `Dead`), and their list given to the backend again.
    pub(crate) async fn announce_revived(&self) {
        tracing::warn!(target: crate::constant::target::SYSTEM, "another process took this one for dead (it was paused or cut off past the silence limit); its workers are announced as joined again");
        self.delivery.look_up_subscribers(&[WORKER_DISCOVERY]).await;
        self.list_workers_with_backend().await;
        for state in self.registry.states() {
            if !matches!(state.status(), WorkerStatus::Stopped | WorkerStatus::Dead) {
                self.announce_discovery(DiscoveryEvent::Joined, &state)
                    .await;
            }
        }
    }

    /// Gives a shared backend the new list of live workers, then announces a worker's
    /// arrival or departure, if anyone listens.
    pub(crate) async fn announce_worker(&self, event: DiscoveryEvent, worker: &WorkerState) {
        self.list_workers_with_backend().await;
        self.announce_discovery(event, worker).await;
    }

    async fn announce_discovery(&self, event: DiscoveryEvent, worker: &WorkerState) {
        if self.delivery.subscribed(WORKER_DISCOVERY) {
            let value = WorkerDiscovery {
                event,
                worker: worker.info(),
            };
            self.delivery.announce(WORKER_DISCOVERY, &value).await;
        }
    }
}
