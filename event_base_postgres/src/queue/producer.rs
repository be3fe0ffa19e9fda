//! [`PgProducer`]: puts copies of messages in a subscription's rows, through the writer.
//!
//! `send` resolves once the row is committed. `try_send` hands the row to the writer and
//! answers at once: it is then retried until it commits, never lost while the process lives
//! (as on the Redis backend). A message due later is a row whose `due_at` is ahead
//! (`keeps_delayed`), so it waits in PostgreSQL, not in the process, and survives a restart.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use event_base_core::backend::{ordering_key, EProducer, TrySendError};
use event_base_core::{EMessage, QueueError};
use tokio::sync::oneshot;

use crate::codec;
use crate::queue::sub_queue::SubQueue;
use crate::queue::writer::{NewRow, Op};

/// How long a `send` to a full subscription waits for room before reading the count again.
const RECOUNT_EVERY: Duration = Duration::from_millis(100);

/// The producer of one subscription (see the module docs).
pub(crate) struct PgProducer {
    q: Arc<SubQueue>,
}

impl PgProducer {
    pub(crate) fn new(q: Arc<SubQueue>) -> PgProducer {
        q.producer_made();
        crate::queue::tasks::start(&q.shared);
        PgProducer { q }
    }

    fn row(&self, message: &EMessage) -> NewRow {
        let (json, payload) = codec::columns(message);
        NewRow {
            subscription: self.q.name.clone(),
            id: message.id.to_string(),
            key: ordering_key(message).map(str::to_owned),
            due_at: message
                .deliver_at
                .unwrap_or(SystemTime::UNIX_EPOCH)
                .max(SystemTime::UNIX_EPOCH),
            message: json,
            payload,
        }
    }

    fn push(&self, op: Op) -> Result<(), QueueError> {
        self.q.shared.ops.send(op).map_err(|_| {
            QueueError::Closed(format!("{} (the PostgreSQL writer stopped)", self.q.topic))
        })
    }

    fn after_send(&self) {
        if self.q.count_due() {
            let q = self.q.clone();
            tokio::spawn(async move { q.recount().await });
        }
    }
}

impl Drop for PgProducer {
    fn drop(&mut self) {
        self.q.producer_dropped();
    }
}

#[async_trait]
impl EProducer for PgProducer {
    fn try_send(&self, message: Arc<EMessage>) -> Result<(), TrySendError> {
        if !self.q.reserve() {
            return Err(TrySendError::Full(message));
        }
        if let Err(e) = self.push(Op::Insert(self.row(&message), None)) {
            self.q.settled(1);
            return Err(TrySendError::Failed(e));
        }
        self.after_send();
        Ok(())
    }

    async fn send(&self, message: Arc<EMessage>) -> Result<(), QueueError> {
        while !self.q.reserve() {
            self.q.room(RECOUNT_EVERY).await;
            if !self.q.reserve() {
                self.q.recount().await;
                continue;
            }
            break;
        }
        let (tx, rx) = oneshot::channel();
        if let Err(e) = self.push(Op::Insert(self.row(&message), Some(tx))) {
            self.q.settled(1);
            return Err(e);
        }
        self.after_send();
        match rx.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                self.q.settled(1);
                Err(e.into())
            }
            Err(_) => Err(QueueError::Closed(format!(
                "{} (the PostgreSQL writer stopped)",
                self.q.topic
            ))),
        }
    }

    fn len(&self) -> usize {
        self.q.len()
    }

    fn keeps_delayed(&self) -> bool {
        true
    }

    async fn cancel_delayed(&self, id: &str) -> Result<bool, QueueError> {
        let (tx, rx) = oneshot::channel();
        self.push(Op::Cancel {
            subscription: self.q.name.clone(),
            id: id.to_owned(),
            answer: tx,
        })?;
        match rx.await {
            Ok(Ok(n)) => {
                if n > 0 {
                    self.q.settled(1);
                }
                Ok(n > 0)
            }
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(QueueError::Closed(self.q.topic.clone())),
        }
    }
}
