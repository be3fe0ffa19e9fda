//! Takeover of stale entries: those whose consumer stopped renewing their leases
//! (`XAUTOCLAIM`, script `RECLAIM`), and dead letters of those taken over too often.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use event_base_core::backend::Claimed;
use event_base_core::{DeadLetterMessage, DeadReason};
use tokio::time::Instant;

use super::lane_consumer::LaneConsumer;
use crate::codec;
use crate::error::RedisError;
use crate::keys::DLQ_MAX_LEN;
use crate::lane::Lane;
use crate::reply::{self, RawEntry};
use crate::scripts;

impl LaneConsumer {
    pub(super) async fn claim_stale(
        self: &Arc<Self>,
        min_idle: Duration,
        max: usize,
        out: &mut Vec<Claimed>,
    ) -> Result<usize, RedisError> {
        self.ensure_group().await?;
        let mut cursor = self.cursor.lock().await;
        let start = cursor.clone();
        let mut got = 0;
        // One pass over the pending list at most: from the kept cursor round to it again.
        loop {
            let cmd = scripts::evalsha(
                &scripts::RECLAIM,
                &[&self.q.key],
                (
                    &self.q.group,
                    &self.name,
                    min_idle.as_millis() as u64,
                    cursor.as_str(),
                    (max - got).max(1),
                ),
            );
            let sent = Instant::now();
            let v = match self.q.link.run("RECLAIM", cmd).await {
                Ok(v) => v,
                Err(e) => {
                    self.forget_group_on(&e);
                    return Err(e);
                }
            };
            let (next, taken) = reply::reclaim(&v)?;
            let mut live = Vec::with_capacity(taken.len());
            for (entry, count) in taken {
                // On a broadcast lane this is this node's own group: the dead letter is this
                // node's delivery's, and the entry stays for the other nodes.
                if count > i64::from(self.q.max_deliveries) {
                    self.stalled(entry, count).await;
                } else {
                    live.push(entry);
                }
            }
            got += self.accept(live, out, sent).await;
            let wrapped = next == "0-0";
            *cursor = next;
            if got >= max || wrapped || *cursor == start {
                break;
            }
        }
        Ok(got)
    }

    /// Dead-letters an entry taken over once too often (its delivery count `count` is past
    /// `max_deliveries`): every consumer that had it died or stopped before settling it, so
    /// it is likely the message that brings them down.
    pub(super) async fn stalled(&self, (id, fields): RawEntry, count: i64) {
        let Some(fields) = fields else { return };
        let message = match codec::decode_message(&fields) {
            Ok(m) => m,
            Err(reason) => return self.poison(&id, reason).await,
        };
        let max = self.q.max_deliveries;
        let reason = DeadReason::Other(format!(
            "delivered {count} times, over max_deliveries ({max}): each consumer that claimed it \
             died or stopped before settling it (a message that crashes or hangs its process?); \
             fix the handler, then replay it"
        ));
        let dead = DeadLetterMessage {
            attempts: message.attempts,
            message,
            reason,
            died_at: SystemTime::now(),
            handlers: vec![self.q.handler.clone()],
        };
        let mut sadd = redis::cmd("SADD");
        sadd.arg(&self.q.topics).arg(self.q.topic.as_str());
        let cmd = scripts::evalsha(
            &scripts::DEAD,
            &[&self.q.key, &self.q.dlq],
            (
                &self.q.group,
                &self.name,
                &id,
                codec::dead_field(&dead),
                DLQ_MAX_LEN,
                u8::from(self.q.lane != Lane::Broadcast),
            ),
        );
        // The topic is listed first (same writer, in order), so the dead letter is found.
        let listed = self.q.link.push("SADD", sadd, None);
        match (listed, self.q.link.run("DEAD", cmd).await) {
            (Ok(()), Ok(v)) if reply::int("DEAD", &v).unwrap_or(0) == 1 => {
                self.q
                    .dead_letters
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::error!(target: "event_base::redis", topic = %self.q.topic, handler = %self.q.group, entry = %id, message = %dead.message.id, deliveries = count, max_deliveries = max, "message dead-lettered: delivered too often without being settled");
            }
            (Ok(()), Ok(_)) => {}
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(target: "event_base::redis", topic = %self.q.topic, entry = %id, error = %e, "could not dead-letter an entry past max_deliveries; it stays pending and the next takeover tries again");
            }
        }
    }

    /// Whether it is time to look for stale entries (and if so, the next time is set).
    pub(super) fn sweep_due(&self) -> Option<Duration> {
        let mut next = self.next_sweep.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if now >= *next {
            *next = now + self.q.visibility / 2;
            None
        } else {
            Some(*next - now)
        }
    }
}
