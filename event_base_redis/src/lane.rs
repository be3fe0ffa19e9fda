//! [`Lane`]: how a stream is shared, and [`lane_of`]: which lane a topic's subscriptions use.

use event_base_core::MessageTopic;

/// How a stream is shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// A subscription's work: one group (the handler), competing consumers, each entry
    /// deleted once handled.
    Work,
    /// Every node gets every entry: a group per node (`n:<node id>`), created at the
    /// stream's end when the node starts, entries only acked (other nodes may not have
    /// read them yet) and the stream capped at about `BROADCAST_MAX_LEN` (`queue.rs`).
    Broadcast,
    /// A subscription's keyed messages: one group (the handler), read by one consumer at a
    /// time, the holder of the subscription's keyed lease (`lease.rs`), each entry deleted
    /// once handled.
    Keyed,
}

/// How a topic's subscriptions are kept: application topics on their work stream, the
/// [cluster-wide system topics](event_base_core::backend::CLUSTER_SYSTEM_TOPICS) on a
/// broadcast stream per handler,
/// and `None` for the other system topics (audit, heartbeats, dead-letter notices, ...),
/// which stay in the process, on an in-memory queue.
pub(crate) fn lane_of(topic: &MessageTopic) -> Option<Lane> {
    if !topic.is_system() {
        Some(Lane::Work)
    } else if event_base_core::backend::is_cluster_system_topic(topic.as_str()) {
        Some(Lane::Broadcast)
    } else {
        None
    }
}
