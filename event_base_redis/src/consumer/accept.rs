//! Read entries into claims: held here with their leases, entries addressed to another
//! node's worker acked unread, and entries that do not decode moved to the poison stream.

use std::sync::Arc;

use event_base_core::backend::Claimed;
use tokio::time::Instant;

use super::lane_consumer::LaneConsumer;
use crate::codec;
use crate::error::RedisError;
use crate::keys::POISON_MAX_LEN;
use crate::lane::Lane;
use crate::reply::RawEntry;
use crate::scripts;

impl LaneConsumer {
    /// Turns read entries into claims (appended to `out`), holding their leases, confirmed
    /// when the command that claimed them was `sent`; entries that do not decode are moved to
    /// the poison stream.
    pub(super) async fn accept(
        self: &Arc<Self>,
        entries: Vec<RawEntry>,
        out: &mut Vec<Claimed>,
        sent: Instant,
    ) -> usize {
        let mut n = 0;
        // Entries addressed to a worker of another node: acked unread.
        let mut others = Vec::new();
        for (id, fields) in entries {
            let Some(fields) = fields else {
                continue; // deleted while pending: nothing left to deliver
            };
            let decoded = codec::decode_message(&fields);
            match (decoded, self.receipt(&id)) {
                (Ok(message), Some(receipt)) if self.for_another_node(&message) => {
                    others.push(receipt);
                }
                (Ok(message), Some(receipt)) => {
                    self.held().insert(receipt, sent);
                    out.push(Claimed {
                        message: Arc::new(message),
                        receipt,
                    });
                    n += 1;
                }
                (Err(reason), _) => self.poison(&id, reason).await,
                (Ok(_), None) => {
                    self.poison(&id, "an entry id that is not ms-seq".into())
                        .await
                }
            }
        }
        if !others.is_empty() {
            if let Err(e) = self.settle("ACK", &scripts::ACK_ONLY, &others).await {
                tracing::warn!(target: "event_base::redis", topic = %self.q.topic, error = %e, "could not ack entries addressed to other nodes; this node's sweep takes them again");
            }
        }
        if n > 0 {
            self.start_extender();
        }
        n
    }

    /// Whether `message`, read from a broadcast stream, is addressed to a worker of another
    /// node (`to_worker: "<node id>/<worker>"`): this node acks it without delivering it.
    fn for_another_node(&self, message: &event_base_core::EMessage) -> bool {
        self.q.lane == Lane::Broadcast
            && message
                .to_worker
                .as_deref()
                .and_then(event_base_core::backend::node_and_worker)
                .map(|(node, _)| node)
                .is_some_and(|node| node != self.q.node.id)
    }

    pub(super) async fn poison(&self, id: &str, reason: String) {
        let cmd = scripts::evalsha(
            &scripts::POISON,
            &[&self.q.key, &self.q.poison],
            (&self.q.group, id, &reason, POISON_MAX_LEN),
        );
        let moved = self.q.link.run("POISON", cmd).await;
        let e = RedisError::Undecodable {
            key: self.q.key.clone(),
            entry: id.to_owned(),
            reason,
            poison: self.q.poison.clone(),
        };
        match moved {
            Ok(_) => {
                tracing::error!(target: "event_base::redis", error = %e, "undecodable entry moved aside")
            }
            Err(m) => {
                tracing::error!(target: "event_base::redis", error = %e, move_error = %m, "undecodable entry could not be moved aside; it will be read again")
            }
        }
    }
}
