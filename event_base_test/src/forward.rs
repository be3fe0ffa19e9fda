//! [`Forward`]: a handler that hands each payload it handles to the test, as text, and acks.

use event_base::{async_trait, Ack, EHandler, EMessage};
use tokio::sync::mpsc::UnboundedSender;

/// Sends each handled message's payload (lossy UTF-8) to its channel, then acks.
#[derive(Debug, Clone)]
pub struct Forward(pub UnboundedSender<String>);

#[async_trait]
impl EHandler for Forward {
    async fn handler(&self, msg: &EMessage) -> Ack {
        let _ = self
            .0
            .send(String::from_utf8_lossy(&msg.payload.0).into_owned());
        Ack::Ack
    }
}
