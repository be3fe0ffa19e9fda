//! [`RedisConsumer`]: claims a subscription's entries through its consumer group, renews the
//! leases of what it holds, takes over entries whose consumer died, and settles them.
//!
//! | trait method | Redis |
//! |---|---|
//! | `claim_batch` | `XREADGROUP GROUP <handler> <me> COUNT n BLOCK b STREAMS <stream> >` on a connection of its own; every half visibility timeout, first `XAUTOCLAIM` of entries idle past it |
//! | `stop_claiming` | nothing more is read; a blocked `XREADGROUP` is woken (`CLIENT UNBLOCK`) and returns what it got |
//! | `ack` | script `ACK`: one owner check of the batch (`XPENDING <first> <last> <n> <me>`), one `XACK` + one `XDEL` of what it owns, `XLEN` |
//! | `nack` | script `REQUEUE`: owner check of the batch, a copy of each at the end of the stream, `XACK` + `XDEL` of the originals |
//! | `retry_later` | script `RETRY`: owner check of the entry, `XACK` + `XDEL` of it, and its next attempt (`attempts` counted) into the subscription's delayed set, due after the delay by the server's clock (`PROMOTE` moves it back to this subscription's stream) |
//! | `claim_stale` | script `RECLAIM`: `XAUTOCLAIM … <min_idle> <cursor> COUNT n` and each entry's delivery count; one past `max_deliveries` is dead-lettered (script `DEAD`) instead of returned |
//! | (before reading) | script `PROMOTE` when a delayed message may be due (every `block`, and when this process scheduled one): moves what is due by the server's clock to the stream |
//! | (while held) | script `EXTEND` every third of the visibility timeout: owner check of the batch, one `XCLAIM … JUSTID` of what it still owns |
//! | `claim_in_doubt` | nothing: in doubt once the lease was last confirmed (claimed or renewed) half a visibility timeout ago or more, or this node may have been evicted since (`Node::unevicted_since`) |
//! | `confirm_claim` | script `EXTEND` over every claim held in doubt, one confirmation at a time: what is no longer owned is dropped unhandled; after a failed one, none again for a `block` (they fail at once) |
//!
//! A claim can be lost while it waits for its handler: a process paused (or starved) past
//! the visibility timeout stops renewing its leases, and another consumer's sweep takes its
//! entries over. Its acks are then fenced, but the handlers would still run on wake-up, on
//! work already done elsewhere. So the bus asks before each handler starts
//! (`claim_in_doubt`), and this consumer answers from memory: it keeps, for every entry it
//! holds, when its lease was last confirmed (the send of the command that claimed or renewed
//! it). Under half a visibility timeout old, with this node beating since, nobody can have
//! taken it over: no round trip. Older (which only a pause or a starved runtime makes, the
//! extender renewing every third), the bus asks `confirm_claim`, which checks and renews
//! every claim in doubt at once with `EXTEND`, the owner check the renewals already use: a
//! local deadline rather than an epoch on each claim, since Redis already names the owner of
//! each pending entry, and rather than one check per message, which would cost a round trip
//! on every delivery.
//!
//! A work lane's consumer also reads the subscription's broadcast stream, through this
//! node's group `n:<node id>` (created at the stream's end), with a connection of its own:
//! a group name is one per `XREADGROUP`, and the two streams' groups differ (one shared by
//! every node, one per node), so the two reads cannot be one command. The broadcast read
//! runs as a task of its own that outlives a claim (a claim that got work entries leaves it
//! blocked, so a busy consumer pays nothing for it); when it gets entries it wakes the work
//! read, and the claim returns both. Its entries are acked, never deleted (script
//! `ACK_ONLY`, which then trims what every node's group is done with); a `nack` leaves one
//! pending for this node's own sweep; a takeover past `max_deliveries` dead-letters it for
//! this node only. Receipts of broadcast entries carry [`BROADCAST_TAG`] in `lo`, so `ack`
//! and `nack` tell the lanes apart. An entry of the broadcast stream addressed to a worker
//! of another node (`to_worker: "<node id>/<worker>"`) is acked as soon as it is read
//! (or taken over), never handed to the bus.
//!
//! A work lane's consumer also reads, while it holds the subscription's keyed lease
//! (`lease.rs`), its keyed stream: a third lane, read by a task of its own as the broadcast
//! one is (`keyed.rs`), its receipts tagged with [`KEYED_TAG`]. Its reads are fenced by the
//! lease; nobody sweeps it by idle time (only a new lease holder takes its pending entries
//! over, in id order); a `nack` leaves the entry pending for the lease holder to claim again
//! in its place; a retry stays in the process (the bus keeps a keyed retry there, its
//! entry claimed, so that it keeps its place); a claim is in doubt once the lease was not
//! renewed for half its time to live, or was lost since the claim.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use event_base_core::backend::{ClaimStatus, Claimed, EConsumer, QueuedRetry, Receipt};
use event_base_core::{DeadLetterMessage, DeadReason, EMessage, QueueError};
use redis::aio::MultiplexedConnection;
use redis::Value;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::codec;
use crate::error::RedisError;
use crate::keys::{DLQ_MAX_LEN, POISON_MAX_LEN};
use crate::lane::Lane;
use crate::lease::KeyedLease;
use crate::queue::SubQueue;
use crate::reply::{self, RawEntry};
use crate::scripts;

mod keyed;

/// Ids per script call when settling or extending many entries.
const CHUNK: usize = 256;

/// Due messages one `PROMOTE` call moves at most.
const PROMOTE_BATCH: usize = 256;

/// Set in a receipt's `lo` (the entry id's sequence, far below it) for an entry of a
/// broadcast lane.
pub(crate) const BROADCAST_TAG: u64 = 1 << 63;

/// Set in a receipt's `lo` for an entry of a keyed lane.
pub(crate) const KEYED_TAG: u64 = 1 << 62;

/// Both lane tags.
const TAGS: u64 = BROADCAST_TAG | KEYED_TAG;

/// The claiming side of one subscription's stream (see the module docs).
pub(crate) struct RedisConsumer {
    inner: Arc<Inner>,
    /// A work lane's subscription's broadcast lane, read alongside it.
    bcast: Option<SideLane>,
    /// A work lane's subscription's keyed lane, read alongside it while this consumer
    /// holds the keyed lease.
    keyed: Option<SideLane>,
}

/// A read of a broadcast stream in flight: the claims it made (held, leases renewed).
type BroadcastRead = JoinHandle<Result<Vec<Claimed>, RedisError>>;

/// The broadcast lane's reading state.
#[derive(Default)]
struct Reading {
    /// The read in flight, as a task of its own so it can outlive one claim.
    task: Option<BroadcastRead>,
    /// Claims of an ended read that did not fit in the claim that took it (held, leases
    /// renewed): the next claims return them first.
    stash: Vec<Claimed>,
}

/// The broadcast or keyed lane of a subscription, and its read in flight.
struct SideLane {
    inner: Arc<Inner>,
    read: tokio::sync::Mutex<Reading>,
    /// Woken (`notify_one`) when that read ends, to wake the work read (shared by the
    /// side lanes of a consumer).
    ended: Arc<Notify>,
}

struct Inner {
    q: Arc<SubQueue>,
    /// [`BROADCAST_TAG`] on a broadcast lane, else 0: or-ed into each receipt's `lo`.
    tag: u64,
    /// This consumer's name in the group: unique per process start.
    name: String,
    reader: tokio::sync::Mutex<Reader>,
    /// Entries claimed and not yet settled (their leases are renewed), each with when its
    /// lease was last confirmed: when the command that claimed or renewed it was sent, so
    /// never later than Redis reset its idle time.
    held: Mutex<HashMap<Receipt, Instant>>,
    /// One confirmation of claims in doubt at a time (`confirm`): workers that ask
    /// meanwhile wait for it, and most then find theirs decided. Holds the last failed one:
    /// when it began and ended, and why.
    confirming: tokio::sync::Mutex<Option<(Instant, Instant, String)>>,
    /// Claims found lost by a confirmation before their handlers started.
    lost: std::sync::atomic::AtomicU64,
    /// A keyed lane's lease.
    lease: Option<Arc<KeyedLease>>,
    /// Where the last `claim_stale` scan stopped.
    cursor: tokio::sync::Mutex<String>,
    /// When `claim_batch` next looks for stale entries.
    next_sweep: Mutex<Instant>,
    /// Whether the group is known to exist.
    group_ready: std::sync::atomic::AtomicBool,
    /// Closed, and a read found nothing more (or claiming stopped: `stop_claiming`): every
    /// claim now reports `Closed`.
    drained: std::sync::atomic::AtomicBool,
    /// Once closed: the newest entry of the stream when the drain began (`None` inside: it
    /// was empty). The drain reads up to it, not what other processes send after.
    cutoff: tokio::sync::OnceCell<Option<Receipt>>,
    extender: std::sync::Once,
}

#[derive(Default)]
struct Reader {
    conn: Option<(MultiplexedConnection, i64)>,
}

impl RedisConsumer {
    pub(crate) fn new(q: Arc<SubQueue>, name: String) -> Self {
        q.consumes.store(true, std::sync::atomic::Ordering::Release);
        let ended = Arc::new(Notify::new());
        let side = |inner: Arc<Inner>| SideLane {
            inner,
            read: tokio::sync::Mutex::new(Reading::default()),
            ended: ended.clone(),
        };
        let bcast = q
            .companion(Lane::Broadcast)
            .map(|b| side(Inner::new(b, name.clone(), None)));
        let keyed = q.keyed_lane().map(|k| {
            let lease = Arc::new(KeyedLease::new(
                k.link.clone(),
                k.lease.clone(),
                name.clone(),
                k.node.beat_every(),
                crate::node::SILENT_BEATS,
            ));
            k.node.keep_lease(&lease);
            side(Inner::new(k, name.clone(), Some(lease)))
        });
        RedisConsumer {
            inner: Inner::new(q, name, None),
            bcast,
            keyed,
        }
    }

    /// The lane a claim came from.
    fn lane_of(&self, c: &Claimed) -> &Arc<Inner> {
        let tag = c.receipt.lo & TAGS;
        match (&self.bcast, &self.keyed) {
            (Some(b), _) if tag == BROADCAST_TAG => &b.inner,
            (_, Some(k)) if tag == KEYED_TAG => &k.inner,
            _ => &self.inner,
        }
    }

    /// `claimed` split by lane; `None` when all are of one lane (the common case, without
    /// copying).
    fn split(&self, claimed: &[Claimed]) -> Option<Vec<Vec<Claimed>>> {
        let first = claimed.first()?.receipt.lo & TAGS;
        if claimed.iter().all(|c| c.receipt.lo & TAGS == first) {
            return None;
        }
        let mut lanes: Vec<Vec<Claimed>> = vec![Vec::new(), Vec::new(), Vec::new()];
        for c in claimed {
            let i = match c.receipt.lo & TAGS {
                BROADCAST_TAG => 1,
                KEYED_TAG => 2,
                _ => 0,
            };
            lanes[i].push(c.clone());
        }
        lanes.retain(|l| !l.is_empty());
        Some(lanes)
    }

    /// The side lanes (broadcast, keyed) this consumer reads alongside its work lane.
    fn sides(&self) -> impl Iterator<Item = &SideLane> {
        self.bcast.iter().chain(self.keyed.iter())
    }
}

impl SideLane {
    /// One step of a drain, `before` claims already in `out`: what a read in flight got,
    /// then what is left up to the stream's newest entry when the drain began (on a keyed
    /// lane, only while this consumer holds the lease). Returns the claims added, and
    /// whether the lane is drained.
    async fn drain(
        &self,
        max: usize,
        before: usize,
        out: &mut Vec<Claimed>,
    ) -> Result<(usize, bool), RedisError> {
        let mut n = self
            .collect((max, max.saturating_sub(before)), out, (true, false))
            .await?;
        let mut done = self.read.lock().await.stash.is_empty();
        if before + n < max {
            let room = max - before - n;
            let (got, drained) = match &self.inner.lease {
                Some(lease) => keyed::drain_step(&self.inner, lease, room, out).await?,
                None => {
                    let mut r = self.inner.reader.lock().await;
                    self.inner.drain_step(&mut r, room, out).await?
                }
            };
            n += got;
            done &= drained;
        } else {
            done = false;
        }
        Ok((n, done))
    }

    /// Moves up to `room` claims of reads that ended to `out` (waiting for one in flight
    /// if `wait`), keeping the rest for the next claim, and, if `start` and nothing is kept
    /// or in flight, starts the next read. Returns how many claims it added to `out`.
    async fn collect(
        &self,
        (max, room): (usize, usize),
        out: &mut Vec<Claimed>,
        (wait, start): (bool, bool),
    ) -> Result<usize, RedisError> {
        let mut reading = self.read.lock().await;
        let ended = reading
            .task
            .as_ref()
            .is_some_and(|h| wait || h.is_finished());
        if ended {
            if let Some(h) = reading.task.take() {
                match h.await {
                    Ok(Ok(claims)) => reading.stash.extend(claims),
                    Ok(Err(e)) => return Err(e),
                    Err(e) => {
                        tracing::warn!(target: "event_base::redis", topic = %self.inner.q.topic, lane = ?self.inner.q.lane, error = %e, "a side lane's read task ended abnormally; what it claimed stays pending (for this node's sweep, or the keyed lease's next taking)");
                    }
                }
            }
        }
        let n = reading.stash.len().min(room);
        out.extend(reading.stash.drain(..n));
        if start && reading.task.is_none() && reading.stash.is_empty() {
            let inner = self.inner.clone();
            let ended = self.ended.clone();
            reading.task = Some(tokio::spawn(async move {
                let r = async {
                    if let Some(lease) = &inner.lease {
                        return keyed::read(&inner, lease, max).await;
                    }
                    let mut reader = inner.reader.lock().await;
                    let sent = Instant::now();
                    let entries = inner
                        .read(&mut reader, max, Some(inner.q.block), None)
                        .await?;
                    let mut out = Vec::new();
                    inner.accept(entries, &mut out, sent).await;
                    Ok(out)
                }
                .await;
                ended.notify_one();
                r
            }));
        }
        Ok(n)
    }
}

impl Inner {
    fn new(q: Arc<SubQueue>, name: String, lease: Option<Arc<KeyedLease>>) -> Arc<Inner> {
        let first_sweep = Instant::now() + q.visibility / 2;
        let tag = match q.lane {
            Lane::Broadcast => BROADCAST_TAG,
            Lane::Keyed => KEYED_TAG,
            Lane::Work => 0,
        };
        Arc::new(Inner {
            q,
            tag,
            name,
            reader: tokio::sync::Mutex::new(Reader::default()),
            held: Mutex::new(HashMap::new()),
            confirming: tokio::sync::Mutex::new(None),
            lost: std::sync::atomic::AtomicU64::new(0),
            lease,
            cursor: tokio::sync::Mutex::new("0-0".to_owned()),
            next_sweep: Mutex::new(first_sweep),
            group_ready: std::sync::atomic::AtomicBool::new(false),
            drained: std::sync::atomic::AtomicBool::new(false),
            cutoff: tokio::sync::OnceCell::new(),
            extender: std::sync::Once::new(),
        })
    }

    /// The receipt of entry `id` on this lane.
    fn receipt(&self, id: &str) -> Option<Receipt> {
        codec::receipt(id).map(|r| Receipt {
            hi: r.hi,
            lo: r.lo | self.tag,
        })
    }

    /// The entry id of a receipt of this lane.
    fn entry_id(&self, r: &Receipt) -> String {
        codec::entry_id(&Receipt {
            hi: r.hi,
            lo: r.lo & !TAGS,
        })
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Receipt, Instant>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates the group (at the stream's start, so entries added before it are read) if it
    /// is not known to exist.
    async fn ensure_group(&self) -> Result<(), RedisError> {
        use std::sync::atomic::Ordering;
        if self.group_ready.load(Ordering::Acquire) {
            return Ok(());
        }
        if self.q.lane == Lane::Broadcast {
            // The group makes the node addressable: be found by name first, or a send by
            // name in between misses this node (or picks its namesake as the only one).
            self.q.node.beat_now().await?;
        }
        let mut cmd = redis::cmd("XGROUP");
        cmd.arg("CREATE")
            .arg(&self.q.key)
            .arg(&self.q.group)
            // A node's broadcast group starts at the end: commands sent before it started
            // are not for it.
            .arg(if self.q.lane == Lane::Broadcast {
                "$"
            } else {
                "0"
            })
            .arg("MKSTREAM");
        match self.q.link.run("XGROUP CREATE", cmd).await {
            Ok(_) => {}
            Err(RedisError::Refused { message, .. }) if message.starts_with("BUSYGROUP") => {}
            Err(e) => return Err(e),
        }
        // Registered on either lane: other nodes send to (and publish on) what it lists.
        let as_handler = (
            self.q.registry.as_str(),
            self.q.topic.as_str(),
            self.q.handler.as_str(),
        );
        self.q
            .node
            .register(Some(as_handler), &self.q.key, &self.q.group, &self.name);
        self.group_ready.store(true, Ordering::Release);
        Ok(())
    }

    /// A failed command may mean the group is gone (Redis restarted without persistence):
    /// look again next time.
    fn forget_group_on(&self, e: &RedisError) {
        if matches!(e, RedisError::Refused { message, .. } if message.starts_with("NOGROUP")) {
            self.group_ready
                .store(false, std::sync::atomic::Ordering::Release);
        }
    }

    async fn reader_conn(
        &self,
        reader: &mut Reader,
    ) -> Result<(MultiplexedConnection, i64), RedisError> {
        if let Some(c) = &reader.conn {
            return Ok(c.clone());
        }
        let mut conn = self.q.link.dedicated(self.q.block).await?;
        let id: i64 = redis::cmd("CLIENT")
            .arg("ID")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.q.link.wire_error("CLIENT ID", e))?;
        reader.conn = Some((conn.clone(), id));
        Ok((conn, id))
    }

    /// One `XREADGROUP` of new entries, blocking up to `block` (`None`: not at all). Wakes
    /// early (`CLIENT UNBLOCK`) when the producer closes, a message is scheduled here for
    /// sooner, or `wake` is notified. Returns the entries read.
    async fn read(
        &self,
        reader: &mut Reader,
        max: usize,
        block: Option<Duration>,
        wake: Option<&Notify>,
    ) -> Result<Vec<RawEntry>, RedisError> {
        self.ensure_group().await?;
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(&self.q.group)
            .arg(&self.name)
            .arg("COUNT")
            .arg(max.max(1));
        if let Some(b) = block {
            cmd.arg("BLOCK").arg(b.as_millis().max(1) as u64);
        }
        cmd.arg("STREAMS").arg(&self.q.key).arg(">");
        let v = self
            .blocking(reader, "XREADGROUP", cmd, block.is_some(), wake)
            .await?;
        reply::read_group(&v)
    }

    /// Runs `cmd` on the reader's own connection; if it `blocks`, wakes it early (`CLIENT
    /// UNBLOCK`) when the producer closes, a message is scheduled here for sooner, or
    /// `wake` is notified.
    async fn blocking(
        &self,
        reader: &mut Reader,
        name: &'static str,
        cmd: redis::Cmd,
        blocks: bool,
        wake: Option<&Notify>,
    ) -> Result<Value, RedisError> {
        let (mut conn, client_id) = self.reader_conn(reader).await?;
        let read = async move { cmd.query_async::<Value>(&mut conn).await };
        tokio::pin!(read);
        let result = if blocks {
            let woken = tokio::select! {
                r = &mut read => Some(r),
                () = self.q.closed() => None,
                () = self.q.rearmed() => None,
                () = woken_by(wake) => None,
            };
            match woken {
                Some(r) => r,
                None => loop {
                    // Wake the blocked read; it then answers nil (or what it had just got).
                    // Repeated, in case the read had not reached the server yet.
                    let mut unblock = redis::cmd("CLIENT");
                    unblock.arg("UNBLOCK").arg(client_id);
                    let _ = self.q.link.run("CLIENT UNBLOCK", unblock).await;
                    if let Ok(r) = tokio::time::timeout(Duration::from_millis(200), &mut read).await
                    {
                        break r;
                    }
                },
            }
        } else {
            read.await
        };
        result.map_err(|e| {
            let e = self.q.link.wire_error(name, e);
            self.forget_group_on(&e);
            if !matches!(e, RedisError::Refused { .. }) {
                reader.conn = None;
            }
            e
        })
    }

    /// The newest entry of the stream when the drain began (read once, at the first claim
    /// after the producer closed); `None` if the stream was empty.
    async fn drain_cutoff(&self) -> Result<Option<Receipt>, RedisError> {
        self.cutoff
            .get_or_try_init(|| async {
                let mut cmd = redis::cmd("XREVRANGE");
                cmd.arg(&self.q.key).arg("+").arg("-").arg("COUNT").arg(1);
                let v = self.q.link.run("XREVRANGE", cmd).await?;
                let newest = reply::entries("XREVRANGE", &v)?
                    .into_iter()
                    .next()
                    .and_then(|(id, _)| codec::receipt(&id));
                Ok(newest)
            })
            .await
            .copied()
    }

    /// One step of a drain: reads (without blocking) what is left up to the newest entry of
    /// the stream when the drain began. Returns the claims it added to `out`, and whether
    /// the lane is drained.
    async fn drain_step(
        self: &Arc<Self>,
        reader: &mut Reader,
        max: usize,
        out: &mut Vec<Claimed>,
    ) -> Result<(usize, bool), RedisError> {
        use std::sync::atomic::Ordering;
        if self.drained.load(Ordering::Acquire) {
            return Ok((0, true));
        }
        let Some(cutoff) = self.drain_cutoff().await? else {
            self.drained.store(true, Ordering::Release);
            return Ok((0, true));
        };
        let sent = Instant::now();
        let entries = self.read(reader, max, None, None).await?;
        // Reads come in id order: one that reaches the cutoff has read all before it.
        let reached = entries.is_empty()
            || entries.iter().any(|(id, _)| {
                codec::receipt(id).is_none_or(|r| (r.hi, r.lo) >= (cutoff.hi, cutoff.lo))
            });
        if reached {
            self.drained.store(true, Ordering::Release);
        }
        Ok((self.accept(entries, out, sent).await, reached))
    }

    /// Turns read entries into claims (appended to `out`), holding their leases, confirmed
    /// when the command that claimed them was `sent`; entries that do not decode are moved to
    /// the poison stream.
    async fn accept(
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

    async fn poison(&self, id: &str, reason: String) {
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

    async fn claim_stale(
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
    async fn stalled(&self, (id, fields): RawEntry, count: i64) {
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

    /// Moves the subscription's messages that are due (by the server's clock) to its stream,
    /// if it is time to look; returns when to look next.
    async fn promote(&self) -> Result<Instant, RedisError> {
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

    /// Whether it is time to look for stale entries (and if so, the next time is set).
    fn sweep_due(&self) -> Option<Duration> {
        let mut next = self.next_sweep.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if now >= *next {
            *next = now + self.q.visibility / 2;
            None
        } else {
            Some(*next - now)
        }
    }

    /// Runs `script` over `receipts` in chunks; returns each chunk's reply.
    async fn settle(
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
    async fn settle_counted(
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

    /// Script `RETRY`: settles the entry of `receipt` and keeps `next` in the subscription's
    /// delayed set for `delay` (server clock), if this consumer still owns the entry. On an
    /// error the entry stays held (its lease renewed), for the bus to retry it here.
    async fn retry_later(
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

    /// Renews the leases of everything held; drops what was taken over.
    async fn extend(&self) -> Result<(), RedisError> {
        let sent = Instant::now();
        let held: Vec<Receipt> = self.held().keys().copied().collect();
        self.renew(&held, sent).await.map(drop)
    }

    /// Script `EXTEND` over `receipts`, sent at `sent`: those this consumer still owns are
    /// renewed (their leases confirmed at `sent`), the others are no longer held. Returns
    /// how many were lost.
    async fn renew(&self, receipts: &[Receipt], sent: Instant) -> Result<usize, RedisError> {
        if receipts.is_empty() {
            return Ok(0);
        }
        let mut lost = Vec::new();
        for v in self.settle("EXTEND", &scripts::EXTEND, receipts).await? {
            for id in reply::array("EXTEND", &v)? {
                if let Some(r) = self.receipt(&reply::string("EXTEND", id)?) {
                    lost.push(r);
                }
            }
        }
        let mut held = self.held();
        for r in &lost {
            held.remove(r);
        }
        for r in receipts {
            // Only those still held: one settled meanwhile is not taken back.
            if let Some(at) = held.get_mut(r) {
                *at = (*at).max(sent);
            }
        }
        Ok(lost.len())
    }

    /// Whether the lease of `receipt` is known to be this consumer's now, without asking
    /// Redis: held, and confirmed less than half a visibility timeout ago with this node
    /// beating since (see [`fresh`](Self::fresh)).
    fn lease_fresh(&self, receipt: &Receipt) -> bool {
        let confirmed = self.held().get(receipt).copied();
        confirmed.is_some_and(|at| self.fresh(at, Instant::now()))
    }

    /// Whether a lease confirmed at `at` cannot have been taken over by `now`. Another
    /// consumer takes an entry over once it is idle for a visibility timeout (its sweep,
    /// `XAUTOCLAIM`), or at once after the janitor evicted this node for three silent beats;
    /// `at` is never later than Redis reset the entry's idle time. Half the timeout leaves
    /// the other half for clocks and for the handler to start after the check: past it, a
    /// claim is confirmed before its handler starts. The extender renews every third of the
    /// timeout, so a process that is not paused (or starved) never gets there.
    fn fresh(&self, at: Instant, now: Instant) -> bool {
        if let Some(lease) = &self.lease {
            // Nobody takes a keyed entry over by its idle time: only a new lease holder.
            return lease.fresh(at, now);
        }
        now.saturating_duration_since(at) < self.q.visibility / 2
            && self.q.node.unevicted_since(at, now)
    }

    /// Confirms with Redis that `receipt`, a claim in doubt, is still this consumer's. One
    /// call confirms every claim held in doubt (one `EXTEND` per [`CHUNK`]), renewing those
    /// still owned and dropping the lost ones: after a pause every worker of the process
    /// asks, and all but the first find their claims decided (they wait for it on
    /// `confirming`). After a failed one (Redis away), the next is tried no sooner than a
    /// claim's block time later: meanwhile every delivery would pay a timeout for nothing.
    ///
    /// Not on a keyed lane: its claims are confirmed by its lease (`keyed::confirm`).
    async fn confirm(&self, receipt: Receipt) -> Result<ClaimStatus, RedisError> {
        let asked = Instant::now();
        let mut failed = self.confirming.lock().await;
        let sent = Instant::now();
        let doubt: Vec<Receipt> = {
            let held = self.held();
            match held.get(&receipt) {
                // Found lost by a confirmation or a renewal meanwhile.
                None => return Ok(ClaimStatus::Lost),
                Some(&at) if self.fresh(at, sent) => return Ok(ClaimStatus::Held),
                Some(_) => {}
            }
            if let Some((began, ended, reason)) = &*failed {
                if *began >= asked || ended.elapsed() < self.q.block {
                    return Err(RedisError::LeaseUnconfirmed {
                        reason: reason.clone(),
                    });
                }
            }
            held.iter()
                .filter(|(_, &at)| !self.fresh(at, sent))
                .map(|(r, _)| *r)
                .collect()
        };
        let lost = match self.renew(&doubt, sent).await {
            Ok(lost) => {
                *failed = None;
                lost
            }
            Err(e) => {
                // Logged here, once per attempt: the bus hears of it for every delivery.
                tracing::warn!(target: "event_base::redis", topic = %self.q.topic, consumer = %self.name, claims = doubt.len(), error = %e, "could not confirm that old claims (held since a pause or a stall) are still this consumer's; their handlers run anyway, so a message another consumer took over meanwhile may be handled twice");
                *failed = Some((sent, Instant::now(), e.to_string()));
                return Err(e);
            }
        };
        if lost > 0 {
            let total = self
                .lost
                .fetch_add(lost as u64, std::sync::atomic::Ordering::Relaxed)
                + lost as u64;
            tracing::warn!(target: "event_base::redis", topic = %self.q.topic, consumer = %self.name, lost, total, "claims were taken over by another consumer before their handlers started here (their leases ran out: was this process paused?); they are dropped here unhandled, their new owner handles them");
        }
        Ok(if self.held().contains_key(&receipt) {
            ClaimStatus::Held
        } else {
            ClaimStatus::Lost
        })
    }

    fn start_extender(self: &Arc<Self>) {
        self.extender.call_once(|| {
            let weak = Arc::downgrade(self);
            let every = self.q.visibility / 3;
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(extend_loop(weak, every));
            }
        });
    }
}

async fn extend_loop(inner: Weak<Inner>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        if let Err(e) = inner.extend().await {
            tracing::warn!(target: "event_base::redis", topic = %inner.q.topic, error = %e, "could not renew the leases of held entries; another consumer may take them over");
        }
    }
}

fn queue_error(e: RedisError) -> QueueError {
    e.into()
}

/// Resolves when `wake` is notified; never without one.
async fn woken_by(wake: Option<&Notify>) {
    match wake {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

#[async_trait]
impl EConsumer for RedisConsumer {
    async fn claim_batch(&self, max: usize, out: &mut Vec<Claimed>) -> Result<usize, QueueError> {
        let inner = &self.inner;
        let mut reader = inner.reader.lock().await;
        loop {
            if inner.q.is_closed() {
                let closed = || QueueError::Closed(inner.q.topic.0.clone());
                // Drain: what the streams held when it began, not what other processes
                // send since (the nodes still running take that). A side lane's read in
                // flight ends at once (it wakes on the close).
                let mut n = 0;
                let mut done = true;
                for side in self.sides() {
                    let (got, drained) = side.drain(max, n, out).await.map_err(queue_error)?;
                    n += got;
                    done &= drained;
                }
                if n < max {
                    let (got, drained) = inner
                        .drain_step(&mut reader, max - n, out)
                        .await
                        .map_err(queue_error)?;
                    n += got;
                    done &= drained;
                } else {
                    done = false;
                }
                if n > 0 {
                    return Ok(n);
                }
                if done {
                    if let Some(k) = &self.keyed {
                        k.inner.release_if_idle().await;
                    }
                    return Err(closed());
                }
                continue;
            }
            if let Some(b) = &self.bcast {
                // Before anything is read: once this node's handler is registered, its
                // group on the broadcast stream exists.
                b.inner.ensure_group().await.map_err(queue_error)?;
            }
            let next_look = inner.promote().await.map_err(queue_error)?;
            let block = match inner.sweep_due() {
                None => {
                    let mut n = inner
                        .claim_stale(inner.q.visibility, max, out)
                        .await
                        .map_err(queue_error)?;
                    if let Some(b) = &self.bcast {
                        n += b
                            .inner
                            .claim_stale(inner.q.visibility, max, out)
                            .await
                            .map_err(queue_error)?;
                    }
                    if n > 0 {
                        return Ok(n);
                    }
                    inner.q.block.min(inner.q.visibility / 2)
                }
                Some(until_sweep) => inner.q.block.min(until_sweep),
            };
            let block = block.min(next_look.saturating_duration_since(Instant::now()));
            let mut n = 0;
            for side in self.sides() {
                n += side
                    .collect((max, max.saturating_sub(n)), out, (false, true))
                    .await
                    .map_err(queue_error)?;
            }
            if n > 0 {
                return Ok(n);
            }
            let wake = self.sides().next().map(|s| &*s.ended);
            let sent = Instant::now();
            let entries = inner
                .read(&mut reader, max, Some(block), wake)
                .await
                .map_err(queue_error)?;
            let mut n = inner.accept(entries, out, sent).await;
            for side in self.sides() {
                // Woken by a side lane's read, or it ended meanwhile: its entries too, as
                // many as fit.
                n += side
                    .collect((max, max.saturating_sub(n)), out, (false, false))
                    .await
                    .map_err(queue_error)?;
            }
            if n > 0 {
                return Ok(n);
            }
        }
    }

    /// Claims nothing without waiting (every claim is a round trip), but reports `Closed`
    /// once a claim found the closed queue drained.
    fn try_claim(&self, _max: usize, _out: &mut Vec<Claimed>) -> Result<usize, QueueError> {
        use std::sync::atomic::Ordering;
        let drained = |i: &Inner| i.drained.load(Ordering::Acquire);
        if drained(&self.inner) && self.sides().all(|s| drained(&s.inner)) {
            return Err(QueueError::Closed(self.inner.q.topic.0.clone()));
        }
        Ok(0)
    }

    fn requires_ack(&self) -> bool {
        true
    }

    /// A drain with nothing left to read: every lane counts as drained, and the close wakes
    /// the reads that block (each returns what it had got, `CLIENT UNBLOCK`), so the next
    /// claims return what those reads claimed, then `Closed`. What the streams hold stays
    /// there, for the other consumers of the group (or this node's next start); the keyed
    /// lease is given up once this consumer holds no keyed claim.
    fn stop_claiming(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.inner.drained.store(true, Ordering::Release);
        for side in self.sides() {
            side.inner.drained.store(true, Ordering::Release);
        }
        self.inner.q.close();
        true
    }

    async fn ack(&self, claimed: &[Claimed]) -> Result<(), QueueError> {
        if let Some(lanes) = self.split(claimed) {
            let mut r = Ok(());
            for lane in lanes {
                r = r.and(Box::pin(self.ack(&lane)).await);
            }
            return r;
        }
        let Some(first) = claimed.first() else {
            return Ok(());
        };
        let inner = self.lane_of(first);
        let script = match inner.q.lane {
            Lane::Work | Lane::Keyed => &scripts::ACK,
            Lane::Broadcast => &scripts::ACK_ONLY,
        };
        let r = inner
            .settle_counted("ACK", script, claimed)
            .await
            .map(|_| ())
            .map_err(queue_error);
        inner.release_if_idle().await;
        r
    }

    async fn nack(&self, claimed: &[Claimed]) -> Result<(), QueueError> {
        if let Some(lanes) = self.split(claimed) {
            let mut r = Ok(());
            for lane in lanes {
                r = r.and(Box::pin(self.nack(&lane)).await);
            }
            return r;
        }
        let Some(first) = claimed.first() else {
            return Ok(());
        };
        let inner = self.lane_of(first);
        match inner.q.lane {
            Lane::Broadcast => {
                // A copy would go to every node again: leave the entry pending instead (no
                // longer renewed), for this node's own sweep to take again.
                let mut held = inner.held();
                for c in claimed {
                    held.remove(&c.receipt);
                }
                Ok(())
            }
            Lane::Keyed => {
                // A copy at the stream's end would lose its place in its key's order: left
                // pending, it is claimed again by the lease holder's next pass, in id order.
                keyed::give_back(inner, claimed).await;
                Ok(())
            }
            Lane::Work => inner
                .settle_counted("REQUEUE", &scripts::REQUEUE, claimed)
                .await
                .map(|_| ())
                .map_err(queue_error),
        }
    }

    /// On a work lane: the delayed retries of its entries wait in the subscription's delayed
    /// set. (A cluster-wide system topic's broadcast stream is every node's: no.)
    fn keeps_retries(&self) -> bool {
        self.inner.q.lane == Lane::Work
    }

    async fn retry_later(
        &self,
        claimed: &Claimed,
        next: &Arc<EMessage>,
        delay: Duration,
    ) -> Result<QueuedRetry, QueueError> {
        let inner = self.lane_of(claimed);
        if inner.q.lane != Lane::Work {
            // A broadcast entry is every node's; this node's copy retries in the process.
            // A keyed one keeps its place in its key's order only claimed here.
            return Err(QueueError::Backend(
                "a broadcast or keyed stream's entry retries in the process that holds it".into(),
            ));
        }
        inner
            .retry_later(claimed.receipt, next, delay)
            .await
            .map_err(queue_error)
    }

    /// A claim whose lease was confirmed less than half a visibility timeout ago, with this
    /// node beating since, is not in doubt (see `Inner::fresh`): a lookup in memory.
    fn claim_in_doubt(&self, claimed: &Claimed) -> bool {
        !self.lane_of(claimed).lease_fresh(&claimed.receipt)
    }

    /// Script `EXTEND` over every claim of the lane that is in doubt, at most one such
    /// confirmation at a time (see `Inner::confirm`); on the keyed lane, a renewal of its
    /// lease (see `keyed::confirm`).
    async fn confirm_claim(&self, claimed: &Claimed) -> Result<ClaimStatus, QueueError> {
        let lane = self.lane_of(claimed);
        let status = match &lane.lease {
            Some(lease) => keyed::confirm(lane, lease, claimed.receipt).await,
            None => lane.confirm(claimed.receipt).await,
        };
        status.map_err(queue_error)
    }

    async fn claim_stale(
        &self,
        min_idle: Duration,
        max: usize,
        out: &mut Vec<Claimed>,
    ) -> Result<usize, QueueError> {
        let mut n = self
            .inner
            .claim_stale(min_idle, max, out)
            .await
            .map_err(queue_error)?;
        if let Some(b) = &self.bcast {
            n += b
                .inner
                .claim_stale(min_idle, max.saturating_sub(n).max(1), out)
                .await
                .map_err(queue_error)?;
        }
        Ok(n)
    }
}
