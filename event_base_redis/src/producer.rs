//! [`RedisProducer`]: `XADD`s a subscription's messages, through the writer connection; a
//! message due later goes to the subscription's delayed set instead (script `SCHEDULE`),
//! from which a consumer moves it to the stream once it is due (script `PROMOTE`). (A failed
//! delivery's retry reaches the same set from the consumer: script `RETRY`.)
//!
//! The stream follows the message's mode: a `Broadcast` message goes to the subscription's
//! broadcast stream (script `ADD_BROADCAST`), which every node running the handler reads
//! through a group of its own; so does a message addressed to a worker of one node
//! (`to_worker: "<node id>/<worker>"`, script `ADD_ADDRESSED`, which adds it only if that
//! node's group exists: the other nodes ack it unread); a keyed message (`ordering_key`:
//! `Standard`, for no worker in particular, with a key) to the subscription's keyed
//! stream, which only the holder of the keyed lease reads (due later: through the delayed
//! set, which moves it there when due); every other to the work stream, whose one group
//! the handler's consumers in every node compete on. An unkeyed message pays one look at
//! its headers for this.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use event_base_core::backend::{ordering_key, EProducer, TrySendError};
use event_base_core::{DeliveryMode, EMessage, QueueError};
use tokio::time::Instant;

use crate::codec;
use crate::lane::Lane;
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
    /// A work lane's keyed lane: the keyed stream, its own count towards `bound`.
    keyed: Option<Arc<SubQueue>>,
}

impl RedisProducer {
    pub(crate) fn new(q: Arc<SubQueue>) -> Self {
        let keyed = q.keyed_lane();
        RedisProducer { q, keyed }
    }

    /// The lane whose stream `message` goes to (when due): the keyed lane for a keyed
    /// message of a work lane, else this one. (Broadcast and addressed messages are not
    /// keyed: `ordering_key`.)
    #[inline]
    fn lane_of(&self, message: &EMessage) -> &Arc<SubQueue> {
        match &self.keyed {
            Some(k) if ordering_key(message).is_some() => k,
            _ => &self.q,
        }
    }

    /// Whether `message` goes to the subscription's broadcast stream rather than its work
    /// stream: a work lane's `Broadcast` message for no worker in particular (one addressed
    /// to a worker is that worker's alone: the work stream, as a `Standard` one). It is not
    /// counted towards `bound` (the broadcast stream is trimmed as every node's group acks,
    /// and capped).
    fn to_broadcast(&self, message: &EMessage) -> bool {
        self.q.lane == Lane::Work
            && match &message.to_worker {
                None => message.delivery_mode == DeliveryMode::Broadcast,
                Some(w) => addressed_node(w).is_some(),
            }
    }

    /// The error of a message addressed to `node`, which has no group on the
    /// subscription's broadcast stream.
    fn unknown_node(&self, node: &str) -> QueueError {
        QueueError::UnknownNode {
            topic: self.q.topic.to_string(),
            handler: self.q.handler.clone(),
            node: node.to_owned(),
        }
    }

    /// The command that adds `message`: to the stream, or, due later, to the subscription's
    /// delayed set (with the delay left by this process's clock, counted from the server's:
    /// the server's clock decides when it is due, whichever node moves it).
    fn add_command(&self, message: &EMessage) -> redis::Cmd {
        let m = codec::message_field(message);
        let p = message.payload.0.as_ref();
        let delay = message
            .deliver_at
            .and_then(|at| at.duration_since(SystemTime::now()).ok())
            .filter(|d| !d.is_zero());
        let broadcast = self.q.lane == Lane::Broadcast || self.to_broadcast(message);
        let addressed = message.to_worker.as_deref().and_then(addressed_node);
        match delay {
            // For a worker of one node: only if that node reads the stream.
            None if broadcast && addressed.is_some() => scripts::evalsha(
                &scripts::ADD_ADDRESSED,
                &[&self.q.broadcast],
                (
                    m,
                    p,
                    self.q.broadcast_max_len,
                    format!("n:{}", addressed.unwrap_or_default()),
                ),
            ),
            None if broadcast => {
                let cap = self.q.broadcast_max_len;
                match self.q.own_broadcast_group() {
                    Some(group) => scripts::evalsha(
                        &scripts::ADD_BROADCAST,
                        &[&self.q.broadcast],
                        (m, p, cap, group),
                    ),
                    None => {
                        scripts::evalsha(&scripts::ADD_BROADCAST, &[&self.q.broadcast], (m, p, cap))
                    }
                }
            }
            // A plain `XADD`: its length comes from acks and `SubQueue::recount`.
            None => {
                let mut cmd = redis::cmd("XADD");
                cmd.arg(&self.lane_of(message).key)
                    .arg("*")
                    .arg("m")
                    .arg(m)
                    .arg("p")
                    .arg(p);
                cmd
            }
            Some(d) => {
                self.q.due_by(Instant::now() + d);
                let lane = self.lane_of(message);
                let to = if broadcast {
                    1u8
                } else if lane.lane == Lane::Keyed {
                    2
                } else {
                    0
                };
                let mut cmd = scripts::evalsha(
                    &scripts::SCHEDULE,
                    &[&self.q.delayed, &self.q.delayed_fields, &lane.key],
                    (d.as_millis() as u64, message.id.as_str(), m, p, to),
                );
                if let (true, Some(node)) = (broadcast, addressed) {
                    cmd.arg(node);
                }
                cmd
            }
        }
    }
}

/// The node part of an address `to_worker: "<node>/<worker>"`, read as the bus reads it.
fn addressed_node(to_worker: &str) -> Option<&str> {
    event_base_core::backend::node_and_worker(to_worker).map(|(node, _)| node)
}

/// Whether `node` has the shape of a node id, `<pid>-<12 lowercase hex digits>`
/// ([`RedisQueueFactory::node_id`](crate::RedisQueueFactory::node_id)): anything else in
/// the node part of a `to_worker` is a node name.
pub(crate) fn is_node_id(node: &str) -> bool {
    node.split_once('-').is_some_and(|(pid, short)| {
        !pid.is_empty()
            && pid.bytes().all(|b| b.is_ascii_digit())
            && short.len() == 12
            && short
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// The stream's length in a reply of `ADD_BROADCAST` (`{id, length}`) or `SCHEDULE`
/// (length); `None` for a plain `XADD` (an id).
fn length_of(v: &redis::Value) -> Option<i64> {
    match v {
        redis::Value::Array(parts) => parts
            .get(1)
            .and_then(|n| reply::int("ADD_BROADCAST", n).ok()),
        redis::Value::Int(n) => Some(*n),
        _ => None,
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
        if self.to_broadcast(&message) {
            // The bus sends addressed messages with `send`, which reports an unknown node;
            // here it can only be logged.
            let then = message.to_worker.as_deref().and_then(addressed_node).map(|node| {
                let e = self.unknown_node(node);
                let id = message.id.clone();
                Box::new(move |v: &redis::Value| {
                    if matches!(v, redis::Value::Int(0)) {
                        tracing::error!(target: "event_base::redis", %id, error = %e, "an addressed message was not written");
                    }
                }) as crate::link::OnReply
            });
            return self
                .q
                .link
                .push("XADD", self.add_command(&message), then)
                .map_err(|e| TrySendError::Failed(e.into()));
        }
        let lane = self.lane_of(&message);
        if !lane.reserve() {
            return Err(TrySendError::Full(message));
        }
        lane.recount();
        let q = lane.clone();
        let then = Box::new(move |v: &redis::Value| {
            if let Some(n) = length_of(v) {
                q.heard_len(n);
            }
        });
        match lane
            .link
            .push("XADD", self.add_command(&message), Some(then))
        {
            Ok(()) => Ok(()),
            Err(e) => {
                lane.unreserve();
                Err(TrySendError::Failed(e.into()))
            }
        }
    }

    async fn send(&self, message: Arc<EMessage>) -> Result<(), QueueError> {
        if self.to_broadcast(&message) {
            let addressed = message.to_worker.as_deref().and_then(addressed_node);
            let later = message.deliver_at.is_some_and(|at| at > SystemTime::now());
            if let (Some(node), true) = (addressed, later) {
                // Due later: whether that node reads the stream is checked now, at send.
                if !self.reads_addressed(node).await? {
                    return Err(self.unknown_node(node));
                }
            }
            let v = self.q.link.run("XADD", self.add_command(&message)).await?;
            // `ADD_ADDRESSED` answers 0 when the node has no group (`SCHEDULE`: a length).
            if let (redis::Value::Int(0), Some(node), false) = (&v, addressed, later) {
                return Err(self.unknown_node(node));
            }
            return Ok(());
        }
        let lane = self.lane_of(&message);
        while !lane.reserve() {
            lane.wait_room(ROOM_POLL).await?;
        }
        lane.recount();
        match lane.link.run("XADD", self.add_command(&message)).await {
            Ok(v) => {
                if let Some(n) = length_of(&v) {
                    lane.heard_len(n);
                }
                Ok(())
            }
            Err(e) => {
                lane.unreserve();
                Err(e.into())
            }
        }
    }

    fn len(&self) -> usize {
        self.q.len() + self.keyed.as_ref().map_or(0, |k| k.len())
    }

    /// Messages due later wait in Redis (the subscription's delayed set), not in a process.
    fn keeps_delayed(&self) -> bool {
        true
    }

    /// Removes the message from the subscription's delayed set, with its fields, unless
    /// `PROMOTE` released it already (one script: one or the other).
    async fn cancel_delayed(&self, id: &str) -> Result<bool, QueueError> {
        let cmd = scripts::evalsha(
            &scripts::UNSCHEDULE,
            &[&self.q.delayed, &self.q.delayed_fields],
            id,
        );
        Ok(matches!(
            self.q.link.run("UNSCHEDULE", cmd).await?,
            redis::Value::Int(1)
        ))
    }

    /// Whether node `node` has its group on the subscription's broadcast stream (script
    /// `ADD_ADDRESSED` in its `check` mode: one round trip, nothing added).
    async fn reads_addressed(&self, node: &str) -> Result<bool, QueueError> {
        let check = scripts::evalsha(
            &scripts::ADD_ADDRESSED,
            &[&self.q.broadcast],
            ("", "", 0, format!("n:{node}"), "check"),
        );
        Ok(!matches!(
            self.q.link.run("XADD", check).await?,
            redis::Value::Int(0)
        ))
    }

    /// A node id (`<pid>-<12 hex digits>`, [`is_node_id`]) as it is; a name, the id of the
    /// one live node of that name (its hash in the nodes' registry not expired) that has a
    /// group on the subscription's broadcast stream.
    async fn resolve_node(&self, node: &str) -> Result<Option<String>, QueueError> {
        if is_node_id(node) {
            return Ok(None);
        }
        let mut reading = Vec::new();
        for id in self.q.node.ids_named(node).await? {
            if self.reads_addressed(&id).await? {
                reading.push(id);
            }
        }
        match reading.len() {
            0 => Err(self.unknown_node(node)),
            1 => Ok(reading.pop()),
            _ => {
                reading.sort();
                Err(QueueError::AmbiguousNode {
                    topic: self.q.topic.to_string(),
                    handler: self.q.handler.clone(),
                    name: node.to_owned(),
                    ids: reading,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_node_id;

    #[test]
    fn a_node_id_is_a_pid_and_twelve_hex_digits_anything_else_a_name() {
        assert!(is_node_id("4242-0123456789ab"));
        assert!(!is_node_id("4242-0123456789a"), "eleven digits");
        assert!(!is_node_id("4242-0123456789AB"), "upper case");
        assert!(!is_node_id("-0123456789ab"), "no pid");
        assert!(!is_node_id("web-1"));
        assert!(!is_node_id("1-nobody"));
        assert!(!is_node_id("host.example.com"));
    }
}
