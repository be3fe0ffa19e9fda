//! Handlers the bus registers for itself on its system topics (`_system.shutdown`'s is the
//! bus's own: `bus/stop/shutdown_command.rs`).
//!
//! `_system.topic_discovery`: any message (a [`TopicDiscovery`](crate::TopicDiscovery) by
//! convention) is answered with the node's [`TopicSync`](crate::TopicSync) on
//! `_system.topic_sync`.

use std::sync::{Arc, OnceLock, Weak};

use async_trait::async_trait;

use crate::handler::ehandler::EHandler;
use crate::message::ack::Ack;
use crate::message::emessage::EMessage;
use crate::system_topics::announcer::Announcer;

/// Where the builder puts the bus's announcer for the handler to find (weakly: the handler
/// must not keep the bus alive).
#[derive(Clone, Default)]
pub(crate) struct AnnouncerCell(Arc<OnceLock<Weak<Announcer>>>);

impl AnnouncerCell {
    pub(crate) fn set(&self, announcer: &Arc<Announcer>) {
        let _ = self.0.set(Arc::downgrade(announcer));
    }
}

/// Handles `_system.topic_discovery`.
#[derive(Default)]
pub(crate) struct TopicDiscoveryHandler {
    announcer: AnnouncerCell,
}

impl TopicDiscoveryHandler {
    pub(crate) fn cell(&self) -> AnnouncerCell {
        self.announcer.clone()
    }
}

#[async_trait]
impl EHandler for TopicDiscoveryHandler {
    async fn handler(&self, _msg: &EMessage) -> Ack {
        if let Some(announcer) = self.announcer.0.get().and_then(Weak::upgrade) {
            let sync = announcer.topic_sync();
            announcer
                .delivery
                .announce(crate::constant::TOPIC_SYNC, &sync)
                .await;
        }
        Ack::Ack
    }
}
