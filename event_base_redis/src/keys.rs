//! The key layout. Every key of a topic carries the topic as its hash tag (`{topic}`), so a
//! topic's keys live in one Redis Cluster slot and each script touches one slot.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `<prefix>:{<topic>}:s:<handler>` | stream | the subscription's entries (fields `m`, `p`); consumer group `<handler>` |
//! | `<prefix>:{<topic>}:k:<handler>` | stream | the subscription's keyed messages (`Standard`, for no worker in particular, with a key: `ordering_key`) (fields `m`, `p`); consumer group `<handler>`, read only by the holder of the keyed lease |
//! | `<prefix>:{<topic>}:kl:<handler>` | string | the keyed lease: `<consumer>#<n>` of the consumer that reads the keyed stream (the fencing token, new at each taking), expiring three heartbeats after its last renewal |
//! | `<prefix>:{<topic>}:d:<handler>` | sorted set | the subscription's messages due later, and its retries waiting out their delay: member the message id (a retry's `<id>#<attempts>`), score when due (server ms) |
//! | `<prefix>:{<topic>}:dm:<handler>` | hash | their entries' fields: `<id>:m`, `<id>:p`, and which stream they go to when due: `<id>:b` (broadcast), `<id>:k` (keyed), neither (work) |
//! | `<prefix>:{<topic>}:b:<handler>` | stream | the subscription's `Broadcast` messages, and those addressed to a worker of one node (`to_worker: "<node>/<worker>"`, which the other nodes ack unread) (fields `m`, `p`): a group `n:<node>` per node that runs the handler |
//! | `<prefix>:{<topic>}:bc:<handler>` | stream | a cluster-wide system topic's entries for one handler (`_system.shutdown`, `_system.shutdown_ack`, `_system.worker_discovery`, `_system.topic_sync`, `_system.topic_discovery`): a group `n:<node>` per node that runs the handler |
//! | `<prefix>:{schedules}:def`, `<prefix>:{schedules}:last` | hashes | the recurring schedules (`Wal::put_schedule`): definitions and last slot fired, by name |
//! | `<prefix>:{<topic>}:dlq` | stream | the topic's dead letters (field `d`), trimmed to about [`DLQ_MAX_LEN`] |
//! | `<prefix>:{<topic>}:poison` | stream | entries that did not decode, moved aside (fields `src`, `reason`, and the entry's own) |
//! | `<prefix>:topics` | set | topics that have had a dead letter (for listing them) |
//! | `<prefix>:{<topic>}:handlers` | sorted set | the registry: handler → when a node last ran it (server ms) |
//! | `<prefix>:registry` | set | topics in the registry |

/// Dead letters a topic keeps at most (about: trimmed with `MAXLEN ~`).
pub const DLQ_MAX_LEN: usize = 10_000;

/// How long dead letters are kept, unless set otherwise
/// ([`RedisQueueFactory::dead_letter_max_age`](crate::RedisQueueFactory::dead_letter_max_age)).
pub const DEFAULT_DLQ_MAX_AGE: std::time::Duration =
    std::time::Duration::from_secs(90 * 24 * 60 * 60);

/// Undecodable entries a topic keeps at most (about).
pub(crate) const POISON_MAX_LEN: usize = 1_000;

/// Names of the keys under one prefix.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.to_owned(),
        }
    }

    /// The stream of one subscription (a handler of a topic).
    pub(crate) fn stream(&self, topic: &str, handler: &str) -> String {
        format!("{}:{{{}}}:s:{}", self.prefix, topic, handler)
    }

    /// The keyed stream of one subscription (its messages ordered by key, read by the
    /// holder of its keyed lease only).
    pub(crate) fn keyed(&self, topic: &str, handler: &str) -> String {
        format!("{}:{{{}}}:k:{}", self.prefix, topic, handler)
    }

    /// The keyed lease of one subscription.
    pub(crate) fn keyed_lease(&self, topic: &str, handler: &str) -> String {
        format!("{}:{{{}}}:kl:{}", self.prefix, topic, handler)
    }

    /// The rate key of one subscription (`HandlerSpec::rate`, shared by every node).
    pub(crate) fn rate(&self, topic: &str, handler: &str) -> String {
        format!("{}:{{{}}}:r:{}", self.prefix, topic, handler)
    }

    /// The prefix.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The subscription's messages due later (sorted by when).
    pub(crate) fn delayed(&self, topic: &str, handler: &str) -> String {
        format!("{}:{{{}}}:d:{}", self.prefix, topic, handler)
    }

    /// The fields of the subscription's delayed messages.
    pub(crate) fn delayed_fields(&self, topic: &str, handler: &str) -> String {
        format!("{}:{{{}}}:dm:{}", self.prefix, topic, handler)
    }

    /// The stream of one subscription's `Broadcast` messages (every node running the handler
    /// reads every entry, through a group of its own).
    pub(crate) fn sub_broadcast(&self, topic: &str, handler: &str) -> String {
        format!("{}:{{{}}}:b:{}", self.prefix, topic, handler)
    }

    /// The broadcast stream of one handler of a cluster-wide system topic (every node
    /// running the handler reads every entry, through a group of its own).
    pub(crate) fn broadcast(&self, topic: &str, handler: &str) -> String {
        format!("{}:{{{}}}:bc:{}", self.prefix, topic, handler)
    }

    /// The topic's dead letters.
    pub(crate) fn dlq(&self, topic: &str) -> String {
        format!("{}:{{{}}}:dlq", self.prefix, topic)
    }

    /// Where entries that do not decode are moved.
    pub(crate) fn poison(&self, topic: &str) -> String {
        format!("{}:{{{}}}:poison", self.prefix, topic)
    }

    /// The registry of a topic's handlers, cluster-wide.
    pub(crate) fn handlers(&self, topic: &str) -> String {
        format!("{}:{{{}}}:handlers", self.prefix, topic)
    }

    /// The set of topics in the registry.
    pub(crate) fn registry(&self) -> String {
        format!("{}:registry", self.prefix)
    }

    /// The set of topics with dead letters.
    pub(crate) fn topics(&self) -> String {
        format!("{}:topics", self.prefix)
    }

    /// The hash of the recurring schedules' definitions, by name (`Wal::put_schedule`).
    pub(crate) fn schedules(&self) -> String {
        format!("{}:{{schedules}}:def", self.prefix)
    }

    /// The hash of the recurring schedules' last slots fired, by name (`Wal::claim_slot`).
    pub(crate) fn schedule_slots(&self) -> String {
        format!("{}:{{schedules}}:last", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_topic_has_the_topic_as_hash_tag() {
        let k = Keys::new("eb");
        assert_eq!(k.stream("orders", "ship"), "eb:{orders}:s:ship");
        assert_eq!(k.dlq("orders"), "eb:{orders}:dlq");
        assert_eq!(k.sub_broadcast("orders", "ship"), "eb:{orders}:b:ship");
        assert_eq!(k.delayed("orders", "ship"), "eb:{orders}:d:ship");
        assert_eq!(k.keyed("orders", "ship"), "eb:{orders}:k:ship");
        assert_eq!(k.keyed_lease("orders", "ship"), "eb:{orders}:kl:ship");
        assert_eq!(k.delayed_fields("orders", "ship"), "eb:{orders}:dm:ship");
        assert_eq!(k.poison("orders"), "eb:{orders}:poison");
        assert_eq!(k.topics(), "eb:topics");
        assert_eq!(k.handlers("orders"), "eb:{orders}:handlers");
        assert_eq!(
            k.broadcast("_system.shutdown", "event_base.shutdown"),
            "eb:{_system.shutdown}:bc:event_base.shutdown"
        );
    }
}
