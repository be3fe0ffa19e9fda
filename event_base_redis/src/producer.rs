//! [`RedisProducer`]: `XADD`s a subscription's messages, through the writer connection.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use event_base_core::backend::{EProducer, TrySendError};
use event_base_core::{EMessage, QueueError};

use crate::codec;
use crate::queue::SubQueue;
use crate::reply;
use crate::scripts;

/// How often a sender waiting for room reads the stream's length again, for acks made in
/// other processes (acks in this one wake it at once).
const ROOM_POLL: Duration = Duration::from_millis(100);

/// The sending side of one subscription's stream.
///
/// - `send` resolves once Redis has the entry (its `XADD` answered): that is the point at
///   which the message is accepted.
/// - `try_send` is synchronous, so it can only queue the entry for the writer connection,
///   which writes it within a round trip and retries it until Redis confirms it (a Redis
///   outage delays it, never drops it). A crash of this process in that window loses it:
///   call `Wal::flush` (on [`RedisWal`](crate::RedisWal)) to wait until everything queued is
///   written.
pub(crate) struct RedisProducer {
    q: Arc<SubQueue>,
}

impl RedisProducer {
    pub(crate) fn new(q: Arc<SubQueue>) -> Self {
        RedisProducer { q }
    }

    fn add_command(&self, message: &EMessage) -> redis::Cmd {
        let m = codec::message_field(message);
        scripts::evalsha(
            &scripts::ADD,
            &[&self.q.key],
            (m, message.payload.0.as_ref()),
        )
    }
}

impl Drop for RedisProducer {
    fn drop(&mut self) {
        self.q.close();
    }
}

#[async_trait]
impl EProducer for RedisProducer {
    fn try_send(&self, message: Arc<EMessage>) -> Result<(), TrySendError> {
        if !self.q.reserve() {
            return Err(TrySendError::Full(message));
        }
        let q = self.q.clone();
        let then = Box::new(move |v: &redis::Value| {
            if let Ok(parts) = reply::array("XADD", v) {
                if let Some(Ok(n)) = parts.get(1).map(|n| reply::int("XADD", n)) {
                    q.heard_len(n);
                }
            }
        });
        match self
            .q
            .link
            .push("XADD", self.add_command(&message), Some(then))
        {
            Ok(()) => Ok(()),
            Err(e) => {
                self.q.unreserve();
                Err(TrySendError::Failed(e.into()))
            }
        }
    }

    async fn send(&self, message: Arc<EMessage>) -> Result<(), QueueError> {
        while !self.q.reserve() {
            self.q.wait_room(ROOM_POLL).await?;
        }
        match self.q.link.run("XADD", self.add_command(&message)).await {
            Ok(v) => {
                if let Some(n) = reply::array("XADD", &v)?.get(1) {
                    self.q.heard_len(reply::int("XADD", n)?);
                }
                Ok(())
            }
            Err(e) => {
                self.q.unreserve();
                Err(e.into())
            }
        }
    }

    fn len(&self) -> usize {
        self.q.len()
    }
}
