//! Announcements: what the bus publishes on its own `_system.` topics (dead letters, audit
//! batches, worker discovery, the topic table, shutdown acks), only when something subscribes.

use crate::bus::shared::BusShared;
use crate::constant::WORKER_DISCOVERY;
use crate::delivery::accept::prepare;
use crate::message::emessage::EMessage;
use crate::system_topics::discovery::{DiscoveryEvent, TopicInfo, TopicSync, WorkerDiscovery};
use crate::worker::registry::WorkerState;

impl BusShared {
    /// Publishes on a system topic if some handler subscribes to it; never waits for room,
    /// and works during shutdown too (shutdown acks are published then).
    pub(crate) async fn announce<T: serde::Serialize>(&self, topic: &str, value: &T) {
        if !self.topics.contains_key(topic) {
            return;
        }
        match serde_json::to_vec(value) {
            Ok(bytes) => {
                let msg = EMessage::standard(topic, bytes);
                // Announcements go out during shutdown too (shutdown acks among them), so
                // they skip the `accepting` check of `admit`.
                let sent = match self.topics.get(topic) {
                    Some(route) => match prepare(route, msg) {
                        // Never waiting for room (`try_send`), and no deadline.
                        Ok(m) => self.accept_core(route, m, true, None).await,
                        Err(e) => Err(e),
                    },
                    None => return,
                };
                if let Err(e) = sent {
                    tracing::warn!(target: crate::constant::target::SYSTEM, topic, error = %e, "system announcement dropped");
                }
            }
            Err(e) => {
                tracing::error!(target: crate::constant::target::SYSTEM, topic, error = %e, "could not encode system announcement")
            }
        }
    }

    /// The node's topic table.
    pub(crate) fn topic_sync(&self) -> TopicSync {
        let mut topics: Vec<TopicInfo> = self
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

    /// Announces a worker's arrival or departure, if anyone listens.
    pub(crate) async fn announce_worker(&self, event: DiscoveryEvent, worker: &WorkerState) {
        if self.topics.contains_key(WORKER_DISCOVERY) {
            let value = WorkerDiscovery {
                event,
                worker: worker.info(),
            };
            self.announce(WORKER_DISCOVERY, &value).await;
        }
    }
}
