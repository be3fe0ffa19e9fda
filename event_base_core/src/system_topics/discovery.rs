//! Worker discovery and topic sync: what a system announces about itself on
//! `_system.worker_discovery`, `_system.topic_sync` and `_system.topic_discovery`.
//!
//! These are notifications for whoever subscribes (dashboards, tests, the gRPC API). The
//! payloads are plain JSON values naming the node; with a queue backend shared by several
//! processes (Redis) they are carried between them unchanged, so a subscriber on one node
//! sees the events of every node, and every node answers a [`TopicDiscovery`].
//!
//! - [`WorkerDiscovery`] on `_system.worker_discovery` whenever a worker joins (start,
//!   scale-up, replacement), leaves (stopped) or is declared dead.
//! - [`TopicSync`] on `_system.topic_sync`: the node's topic table, once at start and in
//!   answer to every [`TopicDiscovery`] request sent on `_system.topic_discovery`.
//!
//! Nothing is published when nobody subscribes (here, or elsewhere as the shared backend's
//! cached registry lists it), so the hot path never pays for it.

use serde::{Deserialize, Serialize};

use crate::worker::registry::{DiscoveryEvent, WorkerInfo};

/// A worker's arrival or departure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WorkerDiscovery {
    /// What happened.
    pub event: DiscoveryEvent,
    /// The worker as the registry saw it then.
    pub worker: WorkerInfo,
}

/// One topic of a node's table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TopicInfo {
    /// The topic.
    pub topic: String,
    /// Its live workers.
    pub workers: Vec<String>,
}

/// A node's topic table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TopicSync {
    /// The node (process): its [`node_name`](crate::node_name).
    pub node: String,
    /// Every topic with handlers, system topics included.
    pub topics: Vec<TopicInfo>,
}

/// A request for every node's [`TopicSync`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicDiscovery {
    /// Who asks (for logs).
    pub from: Option<String>,
}
