//! [`RedisWal`]: the WAL of a bus on Redis queues, as a façade over the queues' keys.
//!
//! The stream is the log: a message is in a subscription's stream from the moment `send`
//! accepted it until its handler's copy ends, so there is no second record to keep. Where
//! the states of [`Wal`] are:
//!
//! | state | in Redis |
//! |---|---|
//! | `Pending` | an entry of the subscription's stream not yet read by its group, or a member of its delayed set (`deliver_at` ahead, or a retry waiting out its delay: script `RETRY` settled the failed delivery's entry and added the next attempt) |
//! | `Processing` | an entry in the group's pending list (claimed, lease held) |
//! | `Complete` | gone: `XACK` + `XDEL` |
//! | `Failed` | an entry of the topic's dead-letter stream `<prefix>:{<topic>}:dlq` |
//!
//! A `Broadcast` message is an entry of the subscription's broadcast stream
//! (`<prefix>:{<topic>}:b:<handler>`) that each node reads through a group of its own, so
//! its states are per node: `Pending` while that node's group has not read it, `Processing`
//! while in that group's pending list, `Complete` for that node once acked there (`XACK`
//! only: the entry stays while another group has not finished it, and the trim after each
//! ack, `XTRIM MINID`, deletes it once none is left; a cap, `MAXLEN ~`, bounds the stream),
//! `Failed` as the dead letter of that node's copy. A node counts in flight what it
//! claimed until it settles it, as for any message.
//!
//! So `begin`, `complete`, `retry` and `cancel` do nothing (the queue's scripts make the
//! transitions), `pending` is empty (recovery is `XAUTOCLAIM`, by any consumer), and the
//! dead-letter methods read and change the dead-letter streams of every topic. `append`
//! does nothing either, except for a message this process listed or made as a dead
//! letter: sent again (a replay lists the dead letters first), its dead letter is deleted,
//! as the contract has it ("appending the same id replaces the dead letter").

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use async_trait::async_trait;
use event_base_core::backend::{StoredSchedule, Wal, WalCommit, WalRecord, WalStats};
use event_base_core::{DeadLetterMessage, DeadReason, EMessage, WalError};

use crate::codec;
use crate::error::RedisError;
use crate::keys::{Keys, DLQ_MAX_LEN};
use crate::link::Link;
use crate::reply;
use crate::scripts;
use crate::settings::Settings;

/// `KEYS[1]` schedule definitions, `KEYS[2]` last slots; `ARGV[1]` name, `ARGV[2]` slot
/// (ms since the epoch). Claims the slot if the schedule exists and its last slot is
/// earlier: returns 1 and records it, else 0.
const CLAIM_SLOT: &str = r"
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '-1')
if last >= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
";

/// `KEYS` as [`CLAIM_SLOT`]; `ARGV[1]` name. Removes the schedule and its last slot;
/// returns 1 if it existed.
const REMOVE_SCHEDULE: &str = r"
redis.call('HDEL', KEYS[2], ARGV[1])
return redis.call('HDEL', KEYS[1], ARGV[1])
";

/// The WAL of a bus whose queues are a [`RedisQueueFactory`](crate::RedisQueueFactory)'s: a façade over the same keys
/// (see the module docs), made with [`RedisWal::over`] or [`RedisQueueFactory::wal`](crate::RedisQueueFactory::wal), or
/// [`RedisWal::connect`] for one of its own.
///
/// Guarantees follow Redis's persistence, which this backend does not change:
///
/// | Redis runs with | an accepted send survives |
/// |---|---|
/// | `appendonly yes`, `appendfsync always` | a crash of Redis and a power loss |
/// | `appendonly yes`, `appendfsync everysec` (Redis's default for AOF) | a crash of Redis; a power loss may lose the last second |
/// | no AOF (RDB snapshots or nothing) | nothing past the last snapshot if Redis stops |
///
/// Replicas are copied asynchronously: a failover may lose the last writes.
#[derive(Clone)]
pub struct RedisWal {
    link: Link,
    keys: Keys,
    stats: Arc<Counters>,
}

#[derive(Default)]
struct Counters {
    /// Dead letters held, as far as this process knows (`WalStats::dead`): as many as the
    /// last listing (`dead_letters`) found, plus those made here since (by `fail`, and by the
    /// queues' consumers past `max_deliveries`: shared with the factory's settings), minus
    /// those taken, replayed or purged here since. Another process's changes show at the next
    /// listing.
    dead: Arc<AtomicU64>,
    /// Ids of the dead letters this process listed last or made since (a replay lists them
    /// first, then sends one again), at most [`DLQ_MAX_LEN`].
    dead_ids: Mutex<HashSet<String>>,
    /// `dead_ids.len()`, read without the lock on every append.
    known: AtomicU64,
}

impl Counters {
    fn ids(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.dead_ids.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn know(&self, id: &str) {
        let mut ids = self.ids();
        if ids.len() < DLQ_MAX_LEN {
            ids.insert(id.to_owned());
        }
        self.known.store(ids.len() as u64, Ordering::Release);
    }

    /// Knows exactly the dead letters of a listing, `ids`.
    fn listed<'a>(&self, ids: impl Iterator<Item = &'a str>) {
        let mut known = self.ids();
        known.clear();
        let mut held = 0;
        for id in ids {
            held += 1;
            if known.len() < DLQ_MAX_LEN {
                known.insert(id.to_owned());
            }
        }
        self.dead.store(held, Ordering::Relaxed);
        self.known.store(known.len() as u64, Ordering::Release);
    }

    /// One dead letter fewer (taken or replaced).
    fn one_less(&self) {
        let _ = self
            .dead
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Forgets `id`; whether it was known.
    fn forget(&self, id: &str) -> bool {
        if self.known.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut ids = self.ids();
        let was = ids.remove(id);
        self.known.store(ids.len() as u64, Ordering::Release);
        was
    }
}

impl std::fmt::Debug for RedisWal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisWal")
            .field("addr", &self.link.addr())
            .finish_non_exhaustive()
    }
}

impl RedisWal {
    /// The WAL over the keys of `settings`, on `link`: what [`RedisWal::over`] and
    /// [`RedisWal::connect`] make (they live with the factory, `factory.rs`).
    pub(crate) fn from_parts(link: Link, settings: &Settings) -> RedisWal {
        RedisWal {
            link,
            keys: settings.keys.clone(),
            stats: Arc::new(Counters {
                dead: settings.dead_letters.clone(),
                ..Counters::default()
            }),
        }
    }

    /// The topics that have had a dead letter.
    async fn topics(&self) -> Result<Vec<String>, RedisError> {
        let mut cmd = redis::cmd("SMEMBERS");
        cmd.arg(self.keys.topics());
        let v = self.link.run("SMEMBERS", cmd).await?;
        reply::array("SMEMBERS", &v)?
            .iter()
            .map(|t| reply::string("SMEMBERS", t))
            .collect()
    }

    /// Every dead letter of `topic`, with its entry id.
    async fn dead_of(&self, topic: &str) -> Result<Vec<(String, DeadLetterMessage)>, RedisError> {
        let key = self.keys.dlq(topic);
        let mut cmd = redis::cmd("XRANGE");
        cmd.arg(&key).arg("-").arg("+");
        let v = self.link.run("XRANGE", cmd).await?;
        let mut out = Vec::new();
        for (id, fields) in reply::entries("XRANGE", &v)? {
            let Some(fields) = fields else { continue };
            match codec::decode_dead(&fields) {
                Ok(d) => out.push((id, d)),
                Err(reason) => {
                    tracing::warn!(target: "event_base::redis", %key, entry = %id, %reason, "skipping a dead-letter entry that does not decode");
                }
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl Wal for RedisWal {
    // Recurring schedules: two hashes shared by every node (`keys.rs`), the definitions and
    // the last slot fired; a slot is claimed by one script, so of the nodes that fire the
    // same slot one wins.

    async fn put_schedule(&self, name: &str, definition: &[u8]) -> Result<(), WalError> {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(self.keys.schedules()).arg(name).arg(definition);
        self.link.run("HSET", cmd).await?;
        Ok(())
    }

    async fn remove_schedule(&self, name: &str) -> Result<bool, WalError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(REMOVE_SCHEDULE)
            .arg(2)
            .arg(self.keys.schedules())
            .arg(self.keys.schedule_slots())
            .arg(name);
        let v = self.link.run("EVAL", cmd).await?;
        Ok(reply::int("EVAL", &v)? == 1)
    }

    async fn stored_schedules(&self) -> Result<Vec<StoredSchedule>, WalError> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(self.keys.schedules());
        let defs = reply::pairs("HGETALL", &self.link.run("HGETALL", cmd).await?)?;
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(self.keys.schedule_slots());
        let slots = reply::pairs("HGETALL", &self.link.run("HGETALL", cmd).await?)?;
        let mut out: Vec<StoredSchedule> = defs
            .into_iter()
            .map(|(name, definition)| {
                let last_slot = slots
                    .iter()
                    .find(|(n, _)| *n == name)
                    .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok());
                StoredSchedule {
                    name: String::from_utf8_lossy(&name).into_owned(),
                    definition,
                    last_slot,
                }
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn claim_slot(&self, name: &str, slot: u64) -> Result<bool, WalError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(CLAIM_SLOT)
            .arg(2)
            .arg(self.keys.schedules())
            .arg(self.keys.schedule_slots())
            .arg(name)
            .arg(slot);
        let v = self.link.run("EVAL", cmd).await?;
        Ok(reply::int("EVAL", &v)? == 1)
    }

    fn append(&self, message: &Arc<EMessage>) -> Result<WalCommit, WalError> {
        // The queue's XADD is the record; `send` resolves when Redis has it. A dead letter
        // sent again leaves the dead letters, ahead of its entry on the writer.
        if self.stats.forget(&message.id) {
            let key = self.keys.dlq(message.topic.as_str());
            let cmd = scripts::evalsha(&scripts::UNDEAD, &[&key], message.id.as_str());
            self.link.push("UNDEAD", cmd, None)?;
            self.stats.one_less();
        }
        Ok(WalCommit::durable())
    }

    /// Keeps no records to check an id against (the stream is the log): every append is
    /// new here, and idempotent sends dedup only against this process's window of completed
    /// ids. A dedup across processes needs an id set in Redis (not there yet).
    fn append_unique(&self, message: &Arc<EMessage>) -> Result<Option<WalCommit>, WalError> {
        self.append(message).map(Some)
    }

    fn begin(&self, _id: &str) -> Result<bool, WalError> {
        // A claimed entry is live by definition (acked entries are deleted); it may have
        // been sent by another process, which this one has no record of.
        Ok(true)
    }

    fn complete(&self, _id: &str) -> Result<(), WalError> {
        Ok(())
    }

    fn retry(&self, _message: &Arc<EMessage>) -> Result<(), WalError> {
        Ok(())
    }

    fn fail(
        &self,
        message: &Arc<EMessage>,
        reason: &DeadReason,
        handlers: &[String],
    ) -> Result<(), WalError> {
        let topic = message.topic.as_str();
        let dead = DeadLetterMessage {
            message: (**message).clone(),
            reason: reason.clone(),
            attempts: message.attempts,
            died_at: SystemTime::now(),
            handlers: handlers.to_vec(),
        };
        let mut sadd = redis::cmd("SADD");
        sadd.arg(self.keys.topics()).arg(topic);
        let mut xadd = redis::cmd("XADD");
        xadd.arg(self.keys.dlq(topic))
            .arg("MAXLEN")
            .arg("~")
            .arg(DLQ_MAX_LEN)
            .arg("*")
            .arg(codec::DEAD)
            .arg(codec::dead_field(&dead));
        // Queued on the writer, ahead of the entry's ack, and retried until Redis has it.
        self.link.push("SADD", sadd, None)?;
        self.link.push("XADD", xadd, None)?;
        self.stats.dead.fetch_add(1, Ordering::Relaxed);
        // Sent again by this process, it replaces its dead letter (`append`).
        self.stats.know(&message.id);
        Ok(())
    }

    fn cancel(&self, _id: &str) -> Result<Option<WalCommit>, WalError> {
        // Nothing precedes the XADD, so a refused send left nothing behind.
        Ok(Some(WalCommit::durable()))
    }

    async fn pending(&self) -> Result<Vec<WalRecord>, WalError> {
        Ok(Vec::new())
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetterMessage>, WalError> {
        self.flush().await?;
        let mut all = Vec::new();
        for topic in self.topics().await? {
            all.extend(self.dead_of(&topic).await?.into_iter().map(|(_, d)| d));
        }
        self.stats.listed(all.iter().map(|d| d.message.id.as_str()));
        all.sort_by_key(|d| d.died_at);
        Ok(all)
    }

    async fn take_dead_letter(&self, id: &str) -> Result<Option<DeadLetterMessage>, WalError> {
        self.flush().await?;
        for topic in self.topics().await? {
            let found = self
                .dead_of(&topic)
                .await?
                .into_iter()
                .find(|(_, d)| d.message.id == id);
            if let Some((entry, dead)) = found {
                let mut cmd = redis::cmd("XDEL");
                cmd.arg(self.keys.dlq(&topic)).arg(&entry);
                let v = self.link.run("XDEL", cmd).await?;
                if reply::int("XDEL", &v)? == 1 {
                    self.stats.forget(id);
                    self.stats.one_less();
                    return Ok(Some(dead));
                }
            }
        }
        Ok(None)
    }

    async fn purge_dead_letters(&self) -> Result<usize, WalError> {
        self.flush().await?;
        let mut purged = 0;
        for topic in self.topics().await? {
            let key = self.keys.dlq(&topic);
            let mut xlen = redis::cmd("XLEN");
            xlen.arg(&key);
            let n = reply::int("XLEN", &self.link.run("XLEN", xlen).await?)?;
            let mut del = redis::cmd("DEL");
            del.arg(&key);
            self.link.run("DEL", del).await?;
            purged += usize::try_from(n).unwrap_or(0);
        }
        self.stats.listed(std::iter::empty());
        Ok(purged)
    }

    async fn flush(&self) -> Result<(), WalError> {
        // The writer keeps order: once this answers, everything queued before it has.
        self.link.run("PING", redis::cmd("PING")).await?;
        Ok(())
    }

    fn stats(&self) -> WalStats {
        WalStats {
            dead: self.stats.dead.load(Ordering::Relaxed),
            ..WalStats::default()
        }
    }

    /// The streams are the log: there is no record for a sender to complete.
    fn keeps_own_records(&self) -> bool {
        false
    }
}
