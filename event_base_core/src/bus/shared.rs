//! [`BusShared`]: the record of one running bus's parts, which its handles, tasks and
//! monitor hold: the delivery hub (`delivery/hub.rs`) every message's path shares, the
//! announcer of its workers and topics (`system_topics/announcer.rs`, which also holds the
//! registry of its workers and who it is), its name and settings.
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
    /// What the bus announces about its workers and topics; it holds the bus's worker
    /// registry and node identity, which the rest of the bus reads there.
    pub(crate) announcer: Arc<Announcer>,
    /// Whether workers time queue wait and handler time.
    pub(crate) latency_metrics: bool,
    /// The bus's name: the `bus` label of its exported metrics.
    pub(crate) name: Arc<str>,
    /// When the bus was built (its uptime).
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
        let announcer = Arc::new(Announcer {
            delivery: delivery.clone(),
            registry: Arc::new(WorkerRegistry::default()),
            node,
        });
        Arc::new(BusShared {
            delivery,
            announcer,
            latency_metrics,
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
