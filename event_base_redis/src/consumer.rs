//! [`RedisConsumer`]: claims a subscription's entries through its consumer group, renews the
//! leases of what it holds, takes over entries whose consumer died, and settles them.
//!
//! | trait method | Redis |
//! |---|---|
//! | `claim_batch` | `XREADGROUP GROUP <handler> <me> COUNT n BLOCK b STREAMS <stream> >` on a connection of its own; every half visibility timeout, first `XAUTOCLAIM` of entries idle past it |
//! | `ack` | script `ACK`: one owner check of the batch (`XPENDING <first> <last> <n> <me>`), one `XACK` + one `XDEL` of what it owns, `XLEN` |
//! | `nack` | script `REQUEUE`: owner check of the batch, a copy of each at the end of the stream, `XACK` + `XDEL` of the originals |
//! | `claim_stale` | script `RECLAIM`: `XAUTOCLAIM … <min_idle> <cursor> COUNT n` and each entry's delivery count; one past `max_deliveries` is dead-lettered (script `DEAD`) instead of returned |
//! | (before reading) | script `PROMOTE` when a delayed message may be due (every `block`, and when this process scheduled one): moves what is due by the server's clock to the stream |
//! | (while held) | script `EXTEND` every third of the visibility timeout: owner check of the batch, one `XCLAIM … JUSTID` of what it still owns |

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use event_base_core::backend::{Claimed, EConsumer, Receipt};
use event_base_core::{DeadLetterMessage, DeadReason, QueueError};
use redis::aio::MultiplexedConnection;
use redis::Value;
use tokio::time::Instant;

use crate::codec;
use crate::error::RedisError;
use crate::keys::{DLQ_MAX_LEN, POISON_MAX_LEN};
use crate::queue::{Lane, SubQueue};
use crate::reply::{self, RawEntry};
use crate::scripts;

/// Ids per script call when settling or extending many entries.
const CHUNK: usize = 256;

/// Due messages one `PROMOTE` call moves at most.
const PROMOTE_BATCH: usize = 256;

/// The claiming side of one subscription's stream (see the module docs).
pub(crate) struct RedisConsumer {
    inner: Arc<Inner>,
}

struct Inner {
    q: Arc<SubQueue>,
    /// This consumer's name in the group: unique per process start.
    name: String,
    reader: tokio::sync::Mutex<Reader>,
    /// Entries claimed and not yet settled: their leases are renewed.
    held: Mutex<HashSet<Receipt>>,
    /// Where the last `claim_stale` scan stopped.
    cursor: tokio::sync::Mutex<String>,
    /// When `claim_batch` next looks for stale entries.
    next_sweep: Mutex<Instant>,
    /// Whether the group is known to exist.
    group_ready: std::sync::atomic::AtomicBool,
    /// Closed, and a read found nothing more: every claim now reports `Closed`.
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
        let first_sweep = Instant::now() + q.visibility / 2;
        RedisConsumer {
            inner: Arc::new(Inner {
                q,
                name,
                reader: tokio::sync::Mutex::new(Reader::default()),
                held: Mutex::new(HashSet::new()),
                cursor: tokio::sync::Mutex::new("0-0".to_owned()),
                next_sweep: Mutex::new(first_sweep),
                group_ready: std::sync::atomic::AtomicBool::new(false),
                drained: std::sync::atomic::AtomicBool::new(false),
                cutoff: tokio::sync::OnceCell::new(),
                extender: std::sync::Once::new(),
            }),
        }
    }
}

impl Inner {
    fn held(&self) -> std::sync::MutexGuard<'_, HashSet<Receipt>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates the group (at the stream's start, so entries added before it are read) if it
    /// is not known to exist.
    async fn ensure_group(&self) -> Result<(), RedisError> {
        use std::sync::atomic::Ordering;
        if self.group_ready.load(Ordering::Acquire) {
            return Ok(());
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
    /// early when the producer closes (`CLIENT UNBLOCK`). Returns the entries read.
    async fn read(
        &self,
        reader: &mut Reader,
        max: usize,
        block: Option<Duration>,
    ) -> Result<Vec<RawEntry>, RedisError> {
        self.ensure_group().await?;
        let (mut conn, client_id) = self.reader_conn(reader).await?;
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
        let read = async move { cmd.query_async::<Value>(&mut conn).await };
        tokio::pin!(read);
        let result = if block.is_some() {
            // Woken early when the producer closes, or a message is scheduled here for
            // before the block ends.
            let woken = tokio::select! {
                r = &mut read => Some(r),
                () = self.q.closed() => None,
                () = self.q.rearmed() => None,
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
        match result {
            Ok(v) => reply::read_group(&v),
            Err(e) => {
                let e = self.q.link.wire_error("XREADGROUP", e);
                self.forget_group_on(&e);
                if !matches!(e, RedisError::Refused { .. }) {
                    reader.conn = None;
                }
                Err(e)
            }
        }
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

    /// Turns read entries into claims (appended to `out`), holding their leases; entries
    /// that do not decode are moved to the poison stream.
    async fn accept(self: &Arc<Self>, entries: Vec<RawEntry>, out: &mut Vec<Claimed>) -> usize {
        let mut n = 0;
        for (id, fields) in entries {
            let Some(fields) = fields else {
                continue; // deleted while pending: nothing left to deliver
            };
            let decoded = codec::decode_message(&fields);
            match (decoded, codec::receipt(&id)) {
                (Ok(message), Some(receipt)) => {
                    self.held().insert(receipt);
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
        if n > 0 {
            self.start_extender();
        }
        n
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
                // A broadcast entry is only this node's to take again (its own group), and
                // dead-lettering would delete it for every node.
                if count > i64::from(self.q.max_deliveries) && self.q.lane == Lane::Work {
                    self.stalled(entry, count).await;
                } else {
                    live.push(entry);
                }
            }
            got += self.accept(live, out).await;
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
            handlers: vec![self.q.group.clone()],
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
                &[&self.q.delayed, &self.q.delayed_fields, &self.q.key],
                PROMOTE_BATCH,
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
            let ids: Vec<String> = chunk.iter().map(codec::entry_id).collect();
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
                    codec::entry_id(first),
                    codec::entry_id(last),
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

    /// Renews the leases of everything held; drops what was taken over.
    async fn extend(&self) -> Result<(), RedisError> {
        let held: Vec<Receipt> = self.held().iter().copied().collect();
        if held.is_empty() {
            return Ok(());
        }
        for v in self.settle("EXTEND", &scripts::EXTEND, &held).await? {
            let lost = reply::array("EXTEND", &v)?;
            if lost.is_empty() {
                continue;
            }
            let mut h = self.held();
            for id in lost {
                if let Some(r) = codec::receipt(&reply::string("EXTEND", id)?) {
                    h.remove(&r);
                }
            }
        }
        Ok(())
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

#[async_trait]
impl EConsumer for RedisConsumer {
    async fn claim_batch(&self, max: usize, out: &mut Vec<Claimed>) -> Result<usize, QueueError> {
        let inner = &self.inner;
        let mut reader = inner.reader.lock().await;
        loop {
            if inner.q.is_closed() {
                use std::sync::atomic::Ordering;
                let closed = || QueueError::Closed(inner.q.topic.0.clone());
                if inner.drained.load(Ordering::Acquire) {
                    return Err(closed());
                }
                // Drain: what the stream held when it began, not what other processes
                // send since (the nodes still running take that).
                let Some(cutoff) = inner.drain_cutoff().await.map_err(queue_error)? else {
                    inner.drained.store(true, Ordering::Release);
                    return Err(closed());
                };
                let entries = inner
                    .read(&mut reader, max, None)
                    .await
                    .map_err(queue_error)?;
                // Reads come in id order: one that reaches the cutoff has read all before it.
                let reached = entries.is_empty()
                    || entries.iter().any(|(id, _)| {
                        codec::receipt(id).is_none_or(|r| (r.hi, r.lo) >= (cutoff.hi, cutoff.lo))
                    });
                if reached {
                    inner.drained.store(true, Ordering::Release);
                }
                let n = inner.accept(entries, out).await;
                if n > 0 {
                    return Ok(n);
                }
                if reached {
                    return Err(closed());
                }
                continue;
            }
            let next_look = inner.promote().await.map_err(queue_error)?;
            let block = match inner.sweep_due() {
                None => {
                    let n = inner
                        .claim_stale(inner.q.visibility, max, out)
                        .await
                        .map_err(queue_error)?;
                    if n > 0 {
                        return Ok(n);
                    }
                    inner.q.block.min(inner.q.visibility / 2)
                }
                Some(until_sweep) => inner.q.block.min(until_sweep),
            };
            let block = block.min(next_look.saturating_duration_since(Instant::now()));
            let entries = inner
                .read(&mut reader, max, Some(block))
                .await
                .map_err(queue_error)?;
            let n = inner.accept(entries, out).await;
            if n > 0 {
                return Ok(n);
            }
        }
    }

    /// Claims nothing without waiting (every claim is a round trip), but reports `Closed`
    /// once a claim found the closed queue drained.
    fn try_claim(&self, _max: usize, _out: &mut Vec<Claimed>) -> Result<usize, QueueError> {
        if self
            .inner
            .drained
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return Err(QueueError::Closed(self.inner.q.topic.0.clone()));
        }
        Ok(0)
    }

    fn requires_ack(&self) -> bool {
        true
    }

    async fn ack(&self, claimed: &[Claimed]) -> Result<(), QueueError> {
        if claimed.is_empty() {
            return Ok(());
        }
        let script = match self.inner.q.lane {
            Lane::Work => &scripts::ACK,
            Lane::Broadcast => &scripts::ACK_ONLY,
        };
        self.inner
            .settle_counted("ACK", script, claimed)
            .await
            .map(|_| ())
            .map_err(queue_error)
    }

    async fn nack(&self, claimed: &[Claimed]) -> Result<(), QueueError> {
        if claimed.is_empty() {
            return Ok(());
        }
        if self.inner.q.lane == Lane::Broadcast {
            // A copy would go to every node again: leave the entry pending instead (no
            // longer renewed), for this node's own sweep to take again.
            let mut held = self.inner.held();
            for c in claimed {
                held.remove(&c.receipt);
            }
            return Ok(());
        }
        self.inner
            .settle_counted("REQUEUE", &scripts::REQUEUE, claimed)
            .await
            .map(|_| ())
            .map_err(queue_error)
    }

    async fn claim_stale(
        &self,
        min_idle: Duration,
        max: usize,
        out: &mut Vec<Claimed>,
    ) -> Result<usize, QueueError> {
        self.inner
            .claim_stale(min_idle, max, out)
            .await
            .map_err(queue_error)
    }
}
