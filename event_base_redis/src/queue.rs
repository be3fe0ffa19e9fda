//! [`SubQueue`]: one subscription's stream, as its producer and consumer in this process see
//! it: the keys, the settings, this process's count of what the stream holds, and whether
//! the producer side is closed.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_base_core::MessageTopic;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::error::RedisError;
use crate::lane::Lane;
use crate::link::Link;
use crate::node::Node;
use crate::reply;
use crate::settings::Settings;

/// Entries the broadcast stream of a cluster-wide system topic keeps at most (about).
pub(crate) const BROADCAST_MAX_LEN: usize = 1_000;

/// Entries a subscription's broadcast stream keeps at most (about): entries every node's
/// group has acked are trimmed with each ack (`MINID`), so this cap only bites when a node
/// lags this far behind (or stopped without being evicted yet).
pub(crate) const SUB_BROADCAST_MAX_LEN: usize = 100_000;

/// Sends after which a process reads its stream's length again (`XLEN`, queued behind
/// them): a plain `XADD` does not answer it, and a process that only sends hears no acks.
pub(crate) const LEN_EVERY: usize = 1_024;

/// One subscription's stream (see the module docs).
pub(crate) struct SubQueue {
    pub(crate) lane: Lane,
    pub(crate) link: Link,
    /// The node this process is, to which the consumer reports itself.
    pub(crate) node: Arc<Node>,
    pub(crate) topic: MessageTopic,
    /// The stream.
    pub(crate) key: String,
    /// The consumer group (the handler's name; on a broadcast stream, `n:<node id>`).
    pub(crate) group: String,
    /// The handler whose subscription this is (registered under this name, and named in
    /// dead letters).
    pub(crate) handler: String,
    /// Where `Broadcast` messages go: on the work lane, the subscription's broadcast
    /// stream; on a broadcast lane, its own stream.
    pub(crate) broadcast: String,
    /// The broadcast stream's cap (about), for `ADD_BROADCAST` and `PROMOTE`.
    pub(crate) broadcast_max_len: usize,
    /// The subscription's keyed stream (where keyed messages go, and `PROMOTE` moves the
    /// delayed ones), and its keyed lease.
    pub(crate) keyed: String,
    pub(crate) lease: String,
    /// A work lane's keyed lane, made once ([`keyed_lane`](Self::keyed_lane)), so that its
    /// producer and consumer share its count.
    keyed_lane: std::sync::OnceLock<Arc<SubQueue>>,
    /// Whether a consumer of this process reads this subscription: then a broadcast sent
    /// from here first makes sure this node's group exists (so a send right after the bus
    /// started, before the first claim, is not missed by this node).
    pub(crate) consumes: std::sync::atomic::AtomicBool,
    /// Where undecodable entries go.
    pub(crate) poison: String,
    pub(crate) bound: usize,
    pub(crate) visibility: Duration,
    pub(crate) block: Duration,
    /// The topic's handler registry.
    pub(crate) registry: String,
    /// Messages due later, and their fields.
    pub(crate) delayed: String,
    pub(crate) delayed_fields: String,
    /// When this process's consumer next moves due messages to the stream.
    promote_at: Mutex<Instant>,
    /// Woken when a message is scheduled here for earlier than `promote_at`.
    rearmed: Notify,
    /// Deliveries an entry gets at most; a takeover past it dead-letters the entry.
    pub(crate) max_deliveries: u32,
    /// The topic's dead-letter stream.
    pub(crate) dlq: String,
    /// The set of topics with dead letters.
    pub(crate) topics: String,
    /// Dead letters this process made (shared with the factory's WAL).
    pub(crate) dead_letters: Arc<AtomicU64>,
    /// Entries in the stream as last heard from Redis, plus this process's sends since.
    len: AtomicUsize,
    /// Sends since `len` was last heard from Redis.
    unheard: AtomicUsize,
    /// Woken when `len` drops (an ack or a fresh count).
    room: Notify,
    /// `true` once the producer is dropped: the consumer drains, then reports `Closed`.
    /// Shared with the subscription's broadcast lane ([`companion`](Self::companion)).
    closed: Arc<watch::Sender<bool>>,
}

impl SubQueue {
    pub(crate) fn new(
        link: Link,
        settings: &Settings,
        node: Arc<Node>,
        (topic, handler): (&MessageTopic, &str),
        lane: Lane,
    ) -> Arc<SubQueue> {
        let (key, group, broadcast, broadcast_max_len) = match lane {
            Lane::Work | Lane::Keyed => (
                settings.keys.stream(topic.as_str(), handler),
                handler.to_owned(),
                settings.keys.sub_broadcast(topic.as_str(), handler),
                SUB_BROADCAST_MAX_LEN,
            ),
            Lane::Broadcast => (
                settings.keys.broadcast(topic.as_str(), handler),
                format!("n:{}", node.id),
                settings.keys.broadcast(topic.as_str(), handler),
                BROADCAST_MAX_LEN,
            ),
        };
        Arc::new(SubQueue {
            lane,
            link,
            node,
            topic: topic.clone(),
            key,
            group,
            handler: handler.to_owned(),
            broadcast,
            broadcast_max_len,
            keyed: settings.keys.keyed(topic.as_str(), handler),
            lease: settings.keys.keyed_lease(topic.as_str(), handler),
            keyed_lane: std::sync::OnceLock::new(),
            consumes: std::sync::atomic::AtomicBool::new(false),
            poison: settings.keys.poison(topic.as_str()),
            bound: settings.bound,
            visibility: settings.visibility,
            block: settings.block,
            registry: settings.keys.handlers(topic.as_str()),
            delayed: settings.keys.delayed(topic.as_str(), handler),
            delayed_fields: settings.keys.delayed_fields(topic.as_str(), handler),
            promote_at: Mutex::new(Instant::now()),
            rearmed: Notify::new(),
            max_deliveries: settings.max_deliveries,
            dlq: settings.keys.dlq(topic.as_str()),
            topics: settings.keys.topics(),
            dead_letters: settings.dead_letters.clone(),
            len: AtomicUsize::new(0),
            unheard: AtomicUsize::new(0),
            room: Notify::new(),
            closed: Arc::new(watch::Sender::new(false)),
        })
    }

    /// Another lane of a work lane's subscription, closed with it: its broadcast lane (the
    /// broadcast stream, read through this node's group `n:<node id>`) or its keyed lane
    /// (the keyed stream, read through the handler's group by the lease holder). `None` for
    /// a lane that is not a work lane (it has no other).
    pub(crate) fn companion(&self, lane: Lane) -> Option<Arc<SubQueue>> {
        (self.lane == Lane::Work && lane != Lane::Work).then(|| self.view(lane))
    }

    /// This work lane's subscription seen as `lane` (see [`companion`](Self::companion)).
    fn view(&self, lane: Lane) -> Arc<SubQueue> {
        let (key, group) = match lane {
            Lane::Broadcast => (self.broadcast.clone(), format!("n:{}", self.node.id)),
            Lane::Keyed | Lane::Work => (self.keyed.clone(), self.group.clone()),
        };
        Arc::new(SubQueue {
            lane,
            link: self.link.clone(),
            node: self.node.clone(),
            topic: self.topic.clone(),
            key,
            group,
            handler: self.handler.clone(),
            broadcast: self.broadcast.clone(),
            broadcast_max_len: self.broadcast_max_len,
            keyed: self.keyed.clone(),
            lease: self.lease.clone(),
            keyed_lane: std::sync::OnceLock::new(),
            consumes: std::sync::atomic::AtomicBool::new(lane == Lane::Broadcast),
            poison: self.poison.clone(),
            bound: self.bound,
            visibility: self.visibility,
            block: self.block,
            registry: self.registry.clone(),
            // Delayed broadcast and keyed messages wait in the work lane's set, whose
            // `PROMOTE` moves them here.
            delayed: self.delayed.clone(),
            delayed_fields: self.delayed_fields.clone(),
            promote_at: Mutex::new(Instant::now()),
            rearmed: Notify::new(),
            max_deliveries: self.max_deliveries,
            dlq: self.dlq.clone(),
            topics: self.topics.clone(),
            dead_letters: self.dead_letters.clone(),
            len: AtomicUsize::new(0),
            unheard: AtomicUsize::new(0),
            room: Notify::new(),
            closed: self.closed.clone(),
        })
    }

    /// A work lane's keyed lane, the same one each time (`None` for other lanes).
    pub(crate) fn keyed_lane(&self) -> Option<Arc<SubQueue>> {
        if self.lane != Lane::Work {
            return None;
        }
        Some(
            self.keyed_lane
                .get_or_init(|| self.view(Lane::Keyed))
                .clone(),
        )
    }

    /// This node's group on the broadcast stream, if a consumer here reads it (see
    /// `consumes`).
    pub(crate) fn own_broadcast_group(&self) -> Option<String> {
        self.consumes
            .load(Ordering::Acquire)
            .then(|| format!("n:{}", self.node.id))
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Counts one more entry if there is room under the bound.
    pub(crate) fn reserve(&self) -> bool {
        self.len
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.bound).then_some(n + 1)
            })
            .is_ok()
    }

    /// After a send was reserved: every [`LEN_EVERY`] sends without news of the length,
    /// queues an `XLEN` (behind the sends already queued) whose reply resets the count.
    pub(crate) fn recount(self: &Arc<Self>) {
        if self.unheard.fetch_add(1, Ordering::AcqRel) + 1 < LEN_EVERY {
            return;
        }
        self.unheard.store(0, Ordering::Release);
        let mut xlen = redis::cmd("XLEN");
        xlen.arg(&self.key);
        let q = Arc::downgrade(self);
        let then = Box::new(move |v: &redis::Value| {
            if let (Some(q), Ok(n)) = (q.upgrade(), reply::int("XLEN", v)) {
                q.heard_len(n);
            }
        });
        // Not queued (the runtime is gone): the next ack or `wait_room` reads it instead.
        let _ = self.link.push("XLEN", xlen, Some(then));
    }

    /// Un-counts an entry reserved but not added.
    pub(crate) fn unreserve(&self) {
        let _ = self
            .len
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        self.room.notify_waiters();
    }

    /// Redis says the stream holds `n` entries.
    pub(crate) fn heard_len(&self, n: i64) {
        let n = usize::try_from(n).unwrap_or(0);
        self.unheard.store(0, Ordering::Release);
        let before = self.len.swap(n, Ordering::AcqRel);
        if n < before || n < self.bound {
            self.room.notify_waiters();
        }
    }

    /// Waits until `len` may have dropped: an ack here, or, for acks in other processes,
    /// `poll` passes and the length is read again from Redis.
    pub(crate) async fn wait_room(&self, poll: Duration) -> Result<(), RedisError> {
        let woken = self.room.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if self.len() < self.bound {
            return Ok(());
        }
        if tokio::time::timeout(poll, woken).await.is_err() {
            let mut xlen = redis::cmd("XLEN");
            xlen.arg(&self.key);
            let v = self.link.run("XLEN", xlen).await?;
            self.heard_len(reply::int("XLEN", &v)?);
        }
        Ok(())
    }

    fn promote_at(&self) -> std::sync::MutexGuard<'_, Instant> {
        self.promote_at.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A message was scheduled here, due at `at` by this process's clock: the consumer looks
    /// then at the latest (woken if it waits for longer).
    pub(crate) fn due_by(&self, at: Instant) {
        let mut next = self.promote_at();
        if at < *next {
            *next = at;
            drop(next);
            self.rearmed.notify_waiters();
        }
    }

    /// When the consumer should next move due messages; `None`: now, and the next look is
    /// set to `fallback` already, to be brought forward with [`due_by`](Self::due_by) once
    /// Redis said when the next message is due. (Set before asking Redis, so a message
    /// scheduled meanwhile, too late for that answer, brings it forward too.)
    pub(crate) fn promote_due(&self, fallback: Instant) -> Option<Instant> {
        let mut next = self.promote_at();
        let now = Instant::now();
        if now < *next {
            Some(*next)
        } else {
            *next = fallback;
            None
        }
    }

    /// When the consumer next moves due messages.
    pub(crate) fn next_look(&self) -> Instant {
        *self.promote_at()
    }

    /// Resolves when a message was scheduled for earlier than the consumer's next look.
    pub(crate) async fn rearmed(&self) {
        self.rearmed.notified().await;
    }

    pub(crate) fn close(&self) {
        self.closed.send_replace(true);
    }

    pub(crate) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Resolves once the producer side is closed.
    pub(crate) async fn closed(&self) {
        let mut rx = self.closed.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }
}
