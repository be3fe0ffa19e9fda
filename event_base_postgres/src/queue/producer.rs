//! [`PgProducer`]: puts copies of messages in a subscription's rows, through the writer.
//!
//! `send` resolves once the row is committed. `try_send` hands the row to the writer and
//! answers at once: it is then retried until it commits, never lost while the process lives
//! (as on the Redis backend). A message due later is a row whose `due_at` is ahead
//! (`keeps_delayed`), so it waits in PostgreSQL, not in the process, and survives a restart.
//!
//! Some messages go to the lanes of the processes consuming the subscription, not to the
//! subscription (`sql.rs`):
//! - a `Broadcast` for no worker in particular: a copy in each lane, so the workers of every
//!   process get it (with no process consuming the subscription, one copy waits in the
//!   subscription for the next);
//! - a message addressed to a worker of one process (`to_worker: "<node id>/<worker>"`, the
//!   bus having resolved a node name with [`resolve_node`](EProducer::resolve_node)): a copy
//!   in that process's lane, refused with [`QueueError::UnknownNode`] if it consumes none;
//! - every message of a cluster-wide system topic (`sub_queue.rs`).
//!
//! Those copies are not counted towards the bound.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use event_base_core::backend::{node_and_worker, ordering_key, EProducer, TrySendError};
use event_base_core::{DeliveryMode, EMessage, QueueError};
use tokio::sync::oneshot;

use crate::codec;
use crate::error::PostgresError;
use crate::queue::sub_queue::SubQueue;
use crate::queue::writer::{Answer, NewRow, Op};

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

    /// Whether `message` goes to the lanes (see the module docs), and then the one process
    /// it is addressed to, if any.
    fn lanes_of<'m>(&self, message: &'m EMessage) -> Option<Option<&'m str>> {
        match message.to_worker.as_deref().map(node_and_worker) {
            Some(Some((node, _))) => Some(Some(node)),
            Some(None) if self.q.fan_out => Some(None),
            Some(None) => None,
            None => {
                (self.q.fan_out || message.delivery_mode == DeliveryMode::Broadcast).then_some(None)
            }
        }
    }

    /// The change that puts `message`'s copies in the lanes (`node`: one process's only).
    fn fan_out(&self, message: &EMessage, node: Option<&str>, answer: Option<Answer>) -> Op {
        let mut row = self.row(message);
        row.key = None;
        Op::FanOut {
            row,
            node: node.map(str::to_owned),
            keep: node.is_none() && !self.q.fan_out,
            answer,
        }
    }

    fn unknown_node(&self, node: &str) -> QueueError {
        QueueError::UnknownNode {
            topic: self.q.topic.clone(),
            handler: self.q.handler.clone(),
            node: node.to_owned(),
        }
    }

    /// The processes consuming this subscription whose id or name is `node`: `(id, name)`.
    async fn readers(&self, node: &str) -> Result<Vec<(String, String)>, QueueError> {
        let conn = self.q.shared.claims.conn().await?;
        let name: &str = &self.q.name;
        conn.ran(1);
        let rows = conn
            .client
            .query(&conn.st.readers, &[&node, &name])
            .await
            .map_err(PostgresError::statement("the look-up of a node"))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
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
        if let Some(node) = self.lanes_of(&message) {
            // The bus sends addressed messages with `send`, which reports an unknown node.
            return self
                .push(self.fan_out(&message, node, None))
                .map_err(TrySendError::Failed);
        }
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
        if let Some(node) = self.lanes_of(&message) {
            let (tx, rx) = oneshot::channel();
            self.push(self.fan_out(&message, node, Some(tx)))?;
            let copies = rx.await.map_err(|_| {
                QueueError::Closed(format!("{} (the PostgreSQL writer stopped)", self.q.topic))
            })??;
            return match node {
                Some(node) if copies == 0 => Err(self.unknown_node(node)),
                _ => Ok(()),
            };
        }
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

    /// Whether the process `node` (an id) consumes this subscription now.
    async fn reads_addressed(&self, node: &str) -> Result<bool, QueueError> {
        Ok(self.readers(node).await?.iter().any(|(id, _)| id == node))
    }

    /// `node` as it is if it is the id of a process consuming this subscription; else the
    /// id of the one such process named `node`.
    async fn resolve_node(&self, node: &str) -> Result<Option<String>, QueueError> {
        let readers = self.readers(node).await?;
        if readers.iter().any(|(id, _)| id == node) {
            return Ok(None);
        }
        let mut named: Vec<String> = readers
            .into_iter()
            .filter(|(_, name)| name == node)
            .map(|(id, _)| id)
            .collect();
        match named.len() {
            0 => Err(self.unknown_node(node)),
            1 => Ok(named.pop()),
            _ => Err(QueueError::AmbiguousNode {
                topic: self.q.topic.clone(),
                handler: self.q.handler.clone(),
                name: node.to_owned(),
                ids: named,
            }),
        }
    }
}
