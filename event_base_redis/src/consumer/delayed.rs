//! Retries and delayed messages: a retry kept in the subscription's delayed set (script
//! `RETRY`), and what is due moved back to the stream (script `PROMOTE`).

use std::time::Duration;

use event_base_core::backend::{QueuedRetry, Receipt};
use event_base_core::EMessage;
use tokio::time::Instant;

use super::lane_consumer::LaneConsumer;
use crate::codec;
use crate::error::RedisError;
use crate::reply;
use crate::scripts;

/// Due messages one `PROMOTE` call moves at most.
const PROMOTE_BATCH: usize = 256;

impl LaneConsumer {
    /// Moves the subscription's messages that are due (by the server's clock) to its stream,
    /// if it is time to look; returns when to look next.
    pub(super) async fn promote(&self) -> Result<Instant, RedisError> {
        if let Some(next) = self.q.promote_due(Instant::now() + self.q.block) {
            return Ok(next);
        }
        loop {
            let cmd = scripts::evalsha(
                &scripts::PROMOTE,
                &[
                    &self.q.delayed,
                    &self.q.delayed_fields,
                    &self.q.key,
                    &self.q.broadcast,
                    &self.q.keyed,
                ],
                (PROMOTE_BATCH, self.q.broadcast_max_len),
            );
            let v = match self.q.link.run("PROMOTE", cmd).await {
                Ok(v) => v,
                Err(e) => {
                    self.q.due_by(Instant::now());
                    return Err(e);
                }
            };
            let r = reply::ints("PROMOTE", &v)?;
            let (moved, wait) = (
                r.first().copied().unwrap_or(0),
                r.get(1).copied().unwrap_or(-1),
            );
            if moved > 0 && wait == 0 {
                continue; // more are due than one call moves
            }
            if let Ok(ms) = u64::try_from(wait) {
                self.q.due_by(Instant::now() + Duration::from_millis(ms));
            }
            return Ok(self.q.next_look());
        }
    }

    /// Script `RETRY`: settles the entry of `receipt` and keeps `next` in the subscription's
    /// delayed set for `delay` (server clock), if this consumer still owns the entry. On an
    /// error the entry stays held (its lease renewed), for the bus to retry it here.
    pub(super) async fn retry_later(
        &self,
        receipt: Receipt,
        next: &EMessage,
        delay: Duration,
    ) -> Result<QueuedRetry, RedisError> {
        let id = self.entry_id(&receipt);
        // The attempt in the member: a retry never replaces another message of the same id
        // that waits in the set (a send with `deliver_at`, say).
        let member = format!("{}#{}", next.id, next.attempts);
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX).max(1);
        let cmd = scripts::evalsha(
            &scripts::RETRY,
            &[&self.q.key, &self.q.delayed, &self.q.delayed_fields],
            (
                &self.q.group,
                &self.name,
                &id,
                ms,
                member,
                codec::message_field(next),
                next.payload.0.as_ref(),
            ),
        );
        let v = self.q.link.run("RETRY", cmd).await?;
        let r = reply::ints("RETRY", &v)?;
        self.held().remove(&receipt);
        if let Some(len) = r.get(1) {
            self.q.heard_len(*len);
        }
        if r.first().copied() == Some(1) {
            // Due then by this process's clock: its consumer looks then (any other every
            // `block`).
            self.q.due_by(Instant::now() + delay);
            Ok(QueuedRetry::Kept)
        } else {
            tracing::warn!(target: "event_base::redis", topic = %self.q.topic, consumer = %self.name, entry = %id, message = %next.id, "an entry was taken over by another consumer (its lease ran out) before its retry was kept; the new owner settles it");
            Ok(QueuedRetry::Fenced)
        }
    }
}
