//! Which node this process is: its name and its [`NodeType`].
//!
//! One process is one node. Its name appears in worker info and heartbeats, in discovery
//! (`TopicSync`), in the metrics snapshot and in every audit record, so that once several
//! processes share a distributed backend each record says where it came from. The name
//! defaults to the machine's host name (`"local"` when there is none to read); the type to
//! [`NodeType::Host`].
//!
//! [`set_node_name`] and [`set_node_type`] set the process-wide defaults; a bus takes them
//! when it is built, and `EventBusBuilder::node_name` / `node_type` override them for one
//! bus. A running bus keeps the identity it was built with.
//!
//! A leaf: imports nothing of the crate.

use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

/// What a node does in a cluster.
///
/// ```
/// use event_base_core::{node_type, set_node_type, NodeType};
/// assert_eq!(NodeType::default(), NodeType::Host);
/// set_node_type(NodeType::Worker);
/// assert_eq!(node_type(), NodeType::Worker);
/// # set_node_type(NodeType::Host);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum NodeType {
    /// Coordinates: runs the bus's own handlers on the `_system.` topics (shutdown by message,
    /// topic discovery) and the delay scheduler, besides handling messages.
    #[default]
    Host,
    /// Handles messages only. Registers no handlers of its own on the `_system.` topics, so
    /// shutdown by message and topic discovery are a host's to answer. With the in-process
    /// backends there is no host to hand its timers to, so a worker node keeps its own delay
    /// scheduler until a distributed backend gives it one (nothing the WAL holds is left
    /// without a timer).
    Worker,
}

impl NodeType {
    /// `"host"` or `"worker"`.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeType::Host => "host",
            NodeType::Worker => "worker",
        }
    }
}

impl std::fmt::Display for NodeType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node's name and type, as a bus keeps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeIdentity {
    pub(crate) name: Arc<str>,
    pub(crate) kind: NodeType,
}

/// The process-wide defaults; `None` until set (then the host name and `Host`).
static NAME: RwLock<Option<Arc<str>>> = RwLock::new(None);
static KIND: RwLock<Option<NodeType>> = RwLock::new(None);

/// Sets this process's node name, for every bus built from now on (e.g. `"billing-7"`). An
/// empty name is ignored.
pub fn set_node_name(name: impl Into<String>) {
    let name = name.into();
    if name.is_empty() {
        return;
    }
    if let Ok(mut slot) = NAME.write() {
        *slot = Some(name.into());
    }
}

/// Sets this process's node type, for every bus built from now on.
pub fn set_node_type(kind: NodeType) {
    if let Ok(mut slot) = KIND.write() {
        *slot = Some(kind);
    }
}

/// This process's node name: the one [`set_node_name`] set, else the host name, else
/// `"local"`.
///
/// ```
/// assert!(!event_base_core::node_name().is_empty());
/// ```
pub fn node_name() -> String {
    name().to_string()
}

/// This process's node type: the one [`set_node_type`] set, else [`NodeType::Host`].
pub fn node_type() -> NodeType {
    KIND.read().ok().and_then(|k| *k).unwrap_or_default()
}

/// The defaults as a bus takes them at build time.
pub(crate) fn identity() -> NodeIdentity {
    NodeIdentity {
        name: name(),
        kind: node_type(),
    }
}

fn name() -> Arc<str> {
    if let Some(name) = NAME.read().ok().and_then(|n| n.clone()) {
        return name;
    }
    Arc::from(host_name().as_str())
}

/// The machine's host name, or `"local"`.
fn host_name() -> String {
    let from_kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    let from_env = || std::env::var("HOSTNAME").ok();
    from_kernel
        .or_else(from_env)
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "local".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_name_is_the_default_and_never_empty() {
        let name = host_name();
        assert!(!name.is_empty());
        assert!(!name.contains('\n'));
        if let Ok(kernel) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
            if !kernel.trim().is_empty() {
                assert_eq!(name, kernel.trim());
            }
        }
    }

    #[test]
    fn node_types_print_as_their_role() {
        assert_eq!(NodeType::Host.to_string(), "host");
        assert_eq!(NodeType::Worker.as_str(), "worker");
        assert_eq!(
            serde_json::to_string(&NodeType::Worker).unwrap(),
            "\"Worker\""
        );
    }
}
