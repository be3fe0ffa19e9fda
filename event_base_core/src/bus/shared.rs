//! [`BusShared`]: the record of one running bus's parts, which its handles, tasks and
//! monitor hold: the delivery hub (`delivery/hub.rs`) every message's path shares, the
//! announcer of its workers and topics (`system_topics/announcer.rs`), the registry of its
//! workers, and who it is.
//!
//! Each part holds only the state it uses; what needs more than one part lives here or
//! where it belongs (`wait_idle` in `idle.rs`, the worker announcements in
//! `system_topics/`).

use std::sync::Arc;

use crate::delivery::hub::DeliveryHub;
use crate::delivery::subscription::topic_table::TopicEntry;
use crate::node::NodeIdentity;
use crate::system_topics::announcer::Announcer;
use crate::worker::registry::{WorkerRegistry, WorkerState};

/// The parts of a running bus: every handle and task of it holds an `Arc` of this.
pub(crate) struct BusShared {
    /// What the send, route and settle paths share.
    pub(crate) delivery: Arc<DeliveryHub>,
    /// What the bus announces about its workers and topics.
    pub(crate) announcer: Arc<Announcer>,
    /// Every worker of the bus (the announcer holds the same).
    pub(crate) registry: Arc<WorkerRegistry>,
    /// Whether workers time queue wait and handler time.
    pub(crate) latency_metrics: bool,
    /// Which node this bus is (taken from the process defaults or the builder at build).
    pub(crate) node: NodeIdentity,
    /// The bus's name: the `bus` label of its exported metrics.
    pub(crate) name: Arc<str>,
    pub(crate) started: std::time::Instant,
}

impl BusShared {
    /// The record of a bus whose delivery hub is `delivery`: a registry with no worker yet,
    /// and an announcer of the same hub, registry and node.
    pub(crate) fn new(
        delivery: Arc<DeliveryHub>,
        node: NodeIdentity,
        name: Arc<str>,
        latency_metrics: bool,
    ) -> Arc<BusShared> {
        let registry = Arc::new(WorkerRegistry::default());
        let announcer = Arc::new(Announcer {
            delivery: delivery.clone(),
            registry: registry.clone(),
            node: node.clone(),
        });
        Arc::new(BusShared {
            delivery,
            announcer,
            registry,
            latency_metrics,
            node,
            name,
            started: std::time::Instant::now(),
        })
    }

    /// The subscription a worker belongs to (its handler's, on its topic).
    pub(crate) fn sub_of(&self, worker: &WorkerState) -> Option<&Arc<TopicEntry>> {
        self.delivery
            .topics
            .get(worker.topic.as_str())
            .and_then(|route| route.sub(&worker.handler))
    }
}
