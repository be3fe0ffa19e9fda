//! Settling claims: acks and requeues by script, in chunks, each with one owner check.

use event_base_core::backend::{Claimed, Receipt};
use redis::Value;

use super::lane_consumer::LaneConsumer;
use crate::error::RedisError;
use crate::reply;
use crate::scripts;

/// Ids per script call when settling or extending many entries.
pub(super) const CHUNK: usize = 256;

impl LaneConsumer {
    /// Runs `script` over `receipts` in chunks; returns each chunk's reply.
    pub(super) async fn settle(
        &self,
        name: &'static str,
        script: &scripts::Script,
        receipts: &[Receipt],
    ) -> Result<Vec<Value>, RedisError> {
        let mut replies = Vec::new();
        for chunk in receipts.chunks(CHUNK) {
            let ids: Vec<String> = chunk.iter().map(|r| self.entry_id(r)).collect();
            // The range the owner check reads (one `XPENDING` of this consumer's entries).
            let first = chunk.iter().min_by_key(|r| (r.hi, r.lo));
            let last = chunk.iter().max_by_key(|r| (r.hi, r.lo));
            let (Some(first), Some(last)) = (first, last) else {
                continue;
            };
            let cmd = scripts::evalsha(
                script,
                &[&self.q.key],
                (
                    &self.q.group,
                    &self.name,
                    self.entry_id(first),
                    self.entry_id(last),
                    ids,
                ),
            );
            replies.push(self.q.link.run(name, cmd).await?);
        }
        Ok(replies)
    }

    /// Settles with `script` (ACK or REQUEUE); returns how many were fenced (owned by
    /// another consumer by now).
    pub(super) async fn settle_counted(
        &self,
        name: &'static str,
        script: &scripts::Script,
        claimed: &[Claimed],
    ) -> Result<i64, RedisError> {
        let receipts: Vec<Receipt> = claimed.iter().map(|c| c.receipt).collect();
        let replies = self.settle(name, script, &receipts).await?;
        {
            let mut held = self.held();
            for r in &receipts {
                held.remove(r);
            }
        }
        let mut fenced = 0;
        for v in replies {
            let counts = reply::ints(name, &v)?;
            fenced += counts.get(1).copied().unwrap_or(0);
            if let Some(len) = counts.get(2) {
                self.q.heard_len(*len);
            }
        }
        if fenced > 0 {
            tracing::warn!(target: "event_base::redis", topic = %self.q.topic, consumer = %self.name, fenced, "entries were taken over by another consumer (their lease ran out); their outcome here is ignored, the new owner settles them");
        }
        Ok(fenced)
    }
}
