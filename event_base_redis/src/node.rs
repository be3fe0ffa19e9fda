//! [`Node`]: this process in the cluster. It beats (a hash with an expiry, and its score in
//! a sorted set of nodes), and lists the consumers it made, so that once it falls silent a
//! janitor can clean up after it.
//!
//! The node's name and type are those of the bus that built on it first
//! ([`Node::describe`]; the process's `node_name()` / `node_type()` until one did). The
//! janitor is whichever `Host` node holds the janitor lease (renewed with each beat).
//! For every node silent for three beats it:
//! - makes the silent node's pending entries claimable at once (`XCLAIM … IDLE <long>
//!   JUSTID`, which neither moves nor counts a delivery), so the next sweep of a live
//!   consumer takes them over without waiting out the visibility timeout;
//! - deletes each of its consumers whose pending list is empty, never one that still holds
//!   entries (`XGROUP DELCONSUMER` would drop them unacknowledged), checked in the same
//!   script as the deletion;
//! - forgets the node once all of its consumers are gone (and destroys its own groups on
//!   broadcast streams, after dead-lettering what they held or had not read of the
//!   messages addressed to that node: `orphans.rs`).
//!
//! The janitor also deletes dead letters older than the retention age (every 30 beats).
//!
//! | key | type | holds |
//! |---|---|---|
//! | `<prefix>:{nodes}:z` | sorted set | node id → its last beat (server ms) |
//! | `<prefix>:{nodes}:n:<id>` | hash | `name`, `type` (the bus's, [`Node::describe`]), `pid`, `beat`; expires after three beats |
//! | `<prefix>:{nodes}:subs:<id>` | set | the node's consumers, `<stream> US <group> US <consumer>` |
//! | `<prefix>:{nodes}:janitor` | string | the id of the node holding the janitor lease |
//! | `<prefix>:{nodes}:w:<id>` | string | the node's live workers as its bus listed them, JSON `{"name", "workers": [{"name", "topic"}]}`; none once they all stopped |
//!
//! The janitor takes the workers' list of a silent node on the first pass of its eviction
//! (`GETDEL`, so only one pass has it) and hands it to the bus's listeners
//! (`RemoteRoutes::on_evicted`), which announce those workers as dead. A node that stopped
//! cleanly left no list. A node taken for dead that was only paused lists its workers again
//! with its next beat; that write (`SET … GET`) finds its old list gone, and the node tells
//! its bus (`RemoteRoutes::on_revived`), which announces its workers as joined again.
//!
//! With each beat the node also renews the keyed leases its consumers hold (`lease.rs`):
//! their time to live is three beats, as the node's own.
//!
//! With each beat the node also registers its handlers (`<prefix>:{<topic>}:handlers`, the
//! handler scored by the server's time), so the registry tells when a node last ran each.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once, Weak};
use std::time::{Duration, SystemTime};

use event_base_core::backend::{
    EvictedListener, EvictedNode, NodeRecord, NodeWorker, RevivedListener,
};
use event_base_core::NodeType;
use tokio::time::Instant;

use crate::error::RedisError;
use crate::keys::Keys;
use crate::lease::KeyedLease;
use crate::link::Link;
use crate::reply;
use crate::scripts;

/// Separates the parts of a consumer's member in the node's set (the ASCII unit separator,
/// which no stream, group or consumer name of event_base holds).
const SEP: char = '\u{1f}';

/// Beats after which a silent node is evicted (and a keyed lease not renewed lapses).
pub(crate) const SILENT_BEATS: u32 = 3;

/// When the beats that reached Redis were sent (by this process's monotonic clock, which a
/// paused process's clock keeps counting through).
#[derive(Default)]
struct BeatClock {
    /// The last one.
    last: Option<Instant>,
    /// The first one after a silence of half the eviction window or more: the janitor may
    /// have evicted the node before it.
    after_silence: Option<Instant>,
}

impl BeatClock {
    /// A beat sent at `sent` reached Redis; `half`: half the eviction window.
    fn reached(&mut self, sent: Instant, half: Duration) {
        if self
            .last
            .is_some_and(|last| sent.saturating_duration_since(last) >= half)
        {
            self.after_silence = Some(sent);
        }
        if self.last.is_none_or(|last| last < sent) {
            self.last = Some(sent);
        }
    }

    /// Whether the janitor cannot have evicted the node at any time from `since` to `now`:
    /// the last beat was sent less than `half` the eviction window (three beats) before
    /// `now`, and none came after a silence that long since `since`. Half, so that a late
    /// beat is not yet a doubt, and the beat's own way to Redis is covered. A node that
    /// never beat is unknown to the janitor.
    fn unevicted_since(&self, since: Instant, now: Instant, half: Duration) -> bool {
        let Some(last) = self.last else {
            return true;
        };
        now.saturating_duration_since(last) < half && self.after_silence.is_none_or(|t| t <= since)
    }
}

/// What a beat found.
enum Beat {
    /// Another node holds the janitor lease.
    Member,
    /// This node holds it; these nodes are silent.
    Janitor(Vec<String>),
}

/// This process's node (see the module docs).
pub(crate) struct Node {
    link: Link,
    /// The node's id: unique per process start (its consumers' names start with it).
    pub(crate) id: String,
    beat: Duration,
    zset: String,
    hash: String,
    janitor: String,
    /// `<prefix>:{nodes}:subs:`, to which a node id is appended.
    subs_prefix: String,
    /// This node's consumers, as listed in its set (again with every beat, so a node taken
    /// for dead and evicted, that was only paused, is listed again).
    subs: Mutex<Vec<String>>,
    /// This node's handlers, as (registry key, topic, handler): registered again with
    /// every beat.
    handlers: Mutex<Vec<(String, String, String)>>,
    /// The set of topics in the registry.
    registry: String,
    /// `<prefix>:{nodes}:n:`, to which a node id is appended.
    hash_prefix: String,
    started: Once,
    keys: Keys,
    /// Dead letters older than this are trimmed by the janitor.
    dead_letter_age: Duration,
    /// `<prefix>:{nodes}:w:`, to which a node id is appended.
    workers_prefix: String,
    /// The workers' list as last given by the bus (JSON), written again with every beat;
    /// `None` while no worker runs.
    workers: Mutex<Option<String>>,
    /// Told of every node this one evicts.
    evicted: Mutex<Vec<EvictedListener>>,
    /// Whether this node's workers' list is in Redis as far as it knows (written, not
    /// deleted since): a write that finds none there then means the janitor took it.
    kept: AtomicBool,
    /// Told each time this node finds it was taken for dead (its list taken) and runs again.
    revived: Mutex<Vec<RevivedListener>>,
    /// When this node's beats were sent, for the leases of its consumers
    /// ([`unevicted_since`](Self::unevicted_since)).
    beats: Mutex<BeatClock>,
    /// The keyed leases of this node's consumers, renewed with every beat.
    leases: Mutex<Vec<Weak<KeyedLease>>>,
    /// The node name and type the first bus built on this node gave it
    /// ([`describe`](Self::describe)); `None` until then (the process's are used).
    identity: Mutex<Option<(String, NodeType)>>,
}

impl Node {
    pub(crate) fn new(
        link: Link,
        keys: &Keys,
        id: String,
        beat: Duration,
        dead_letter_age: Duration,
    ) -> Arc<Node> {
        let prefix = keys.prefix();
        let base = format!("{prefix}:{{nodes}}");
        Arc::new(Node {
            keys: keys.clone(),
            dead_letter_age,
            link,
            beat,
            zset: format!("{base}:z"),
            hash: format!("{base}:n:{id}"),
            janitor: format!("{base}:janitor"),
            subs_prefix: format!("{base}:subs:"),
            hash_prefix: format!("{base}:n:"),
            workers_prefix: format!("{base}:w:"),
            workers: Mutex::new(None),
            evicted: Mutex::new(Vec::new()),
            kept: AtomicBool::new(false),
            revived: Mutex::new(Vec::new()),
            identity: Mutex::new(None),
            beats: Mutex::new(BeatClock::default()),
            subs: Mutex::new(Vec::new()),
            handlers: Mutex::new(Vec::new()),
            leases: Mutex::new(Vec::new()),
            registry: format!("{prefix}:registry"),
            id,
            started: Once::new(),
        })
    }

    /// A consumer of this node reads `stream` as `consumer` of `group`: listed for the
    /// janitor, and the node starts beating (if it has not yet).
    /// `handler`: the registry key, topic and handler name to register (`None`: not in the
    /// registry). A handler on a broadcast stream (a cluster-wide system topic) is
    /// registered too, so that nodes without it publish to it.
    pub(crate) fn register(
        self: &Arc<Self>,
        handler: Option<(&str, &str, &str)>,
        stream: &str,
        group: &str,
        consumer: &str,
    ) {
        if let Some((registry, topic, name)) = handler {
            let handler = (registry.to_owned(), topic.to_owned(), name.to_owned());
            self.register_handler(&handler);
            let mut handlers = self.handlers.lock().unwrap_or_else(|e| e.into_inner());
            if !handlers.contains(&handler) {
                handlers.push(handler);
            }
        }
        let member = format!("{stream}{SEP}{group}{SEP}{consumer}");
        let mut sadd = redis::cmd("SADD");
        sadd.arg(format!("{}{}", self.subs_prefix, self.id))
            .arg(&member);
        if let Err(e) = self.link.push("SADD", sadd, None) {
            tracing::warn!(target: "event_base::redis", error = %e, "could not list a consumer for the janitor");
        }
        {
            let mut subs = self.subs.lock().unwrap_or_else(|e| e.into_inner());
            if !subs.contains(&member) {
                subs.push(member);
            }
        }
        self.started.call_once(|| {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(beat_loop(Arc::downgrade(self), self.beat));
            }
        });
    }

    /// How often this node beats.
    pub(crate) fn beat_every(&self) -> Duration {
        self.beat
    }

    /// Renews `lease` with every beat from now on, while it lives.
    pub(crate) fn keep_lease(&self, lease: &std::sync::Arc<KeyedLease>) {
        let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        leases.retain(|l| l.strong_count() > 0);
        leases.push(Arc::downgrade(lease));
    }

    /// Renews the keyed leases held here (each one's script on its own topic's slot).
    async fn renew_leases(&self) {
        let leases: Vec<Arc<KeyedLease>> = {
            let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
            leases.retain(|l| l.strong_count() > 0);
            leases.iter().filter_map(Weak::upgrade).collect()
        };
        for lease in leases {
            if let Err(e) = lease.renew().await {
                tracing::warn!(target: "event_base::redis", lease = %lease.key, error = %e, "could not renew a keyed lease; another consumer takes it over if this lasts three beats");
            }
        }
    }

    /// Gives this node the node name and type of a bus built on it, written with every beat
    /// from then on (the hash's `name`, resolved by [`ids_named`](Self::ids_named), and
    /// `type`; only a `Host` may take the janitor lease). The first bus's wins: several
    /// buses on one factory share one node (one id, one hash), so a later bus described
    /// otherwise is only logged.
    pub(crate) fn describe(&self, name: &str, kind: NodeType) {
        let mut identity = self.identity.lock().unwrap_or_else(|e| e.into_inner());
        match &*identity {
            None => *identity = Some((name.to_owned(), kind)),
            Some((first, first_kind)) if first != name || *first_kind != kind => {
                tracing::warn!(target: "event_base::redis", node = %self.id, kept = %first, kept_type = %first_kind, ignored = %name, ignored_type = %kind, "another bus was built on this Redis factory under another node name or type; the node keeps the first bus's (give each bus its own factory)");
            }
            Some(_) => {}
        }
    }

    /// The node name and type written with each beat: the first bus's, else the process's.
    fn identity(&self) -> (String, NodeType) {
        self.identity
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_else(|| (event_base_core::node_name(), event_base_core::node_type()))
    }

    /// Records in the registry that this node runs `handler` (queued on the writer).
    fn register_handler(&self, (key, topic, handler): &(String, String, String)) {
        let mut sadd = redis::cmd("SADD");
        sadd.arg(&self.registry).arg(topic);
        let zadd = scripts::evalsha(&scripts::REGISTER, &[key], handler);
        for (name, cmd) in [("SADD", sadd), ("REGISTER", zadd)] {
            if let Err(e) = self.link.push(name, cmd, None) {
                tracing::warn!(target: "event_base::redis", error = %e, %topic, %handler, "could not register a handler");
            }
        }
    }

    /// The ids of the live nodes (their hash not expired) named `name`, in one round trip:
    /// `SORT <nodes> BY nosort GET # GET <prefix>:{nodes}:n:*->name` pairs each node id
    /// with the `name` of its hash (nil once the hash expired; the pattern keeps to the
    /// `{nodes}` slot).
    pub(crate) async fn ids_named(&self, name: &str) -> Result<Vec<String>, RedisError> {
        let mut cmd = redis::cmd("SORT");
        cmd.arg(&self.zset)
            .arg("BY")
            .arg("nosort")
            .arg("GET")
            .arg("#")
            .arg("GET")
            .arg(format!("{}*->name", self.hash_prefix));
        let v = self.link.run("SORT", cmd).await?;
        let mut ids = Vec::new();
        for pair in reply::array("SORT", &v)?.chunks(2) {
            if let [id, redis::Value::BulkString(n)] = pair {
                if n.as_slice() == name.as_bytes() {
                    ids.push(reply::string("SORT", id)?);
                }
            }
        }
        Ok(ids)
    }

    /// Every node in the set of nodes, by id: its last beat (the set's score), and what its
    /// hash (`name`, `type`, `pid`) and workers' list say, in two round trips (`ZRANGE …
    /// WITHSCORES`, then one `SORT … BY nosort GET …` that reads every hash and list, as
    /// [`ids_named`](Self::ids_named) does). A silent node not yet evicted is there too, with
    /// no name, type or pid once its hash expired.
    pub(crate) async fn records(&self) -> Result<Vec<NodeRecord>, RedisError> {
        let mut zrange = redis::cmd("ZRANGE");
        zrange.arg(&self.zset).arg(0).arg(-1).arg("WITHSCORES");
        let v = self.link.run("ZRANGE", zrange).await?;
        let mut records = Vec::new();
        for pair in reply::array("ZRANGE", &v)?.chunks(2) {
            if let [id, score] = pair {
                let ms = reply::string("ZRANGE", score)?
                    .parse::<f64>()
                    .unwrap_or(0.0)
                    .max(0.0);
                let seen = SystemTime::UNIX_EPOCH + Duration::from_millis(ms as u64);
                records.push(NodeRecord::new(reply::string("ZRANGE", id)?, seen));
            }
        }
        let mut sort = redis::cmd("SORT");
        sort.arg(&self.zset)
            .arg("BY")
            .arg("nosort")
            .arg("GET")
            .arg("#");
        for field in ["name", "type", "pid"] {
            sort.arg("GET")
                .arg(format!("{}*->{field}", self.hash_prefix));
        }
        sort.arg("GET").arg(format!("{}*", self.workers_prefix));
        let v = self.link.run("SORT", sort).await?;
        for row in reply::array("SORT", &v)?.chunks(5) {
            let [id, name, kind, pid, workers] = row else {
                continue;
            };
            let id = reply::string("SORT", id)?;
            // A node that joined between the two reads has no record yet: left for next time.
            let Some(record) = records.iter_mut().find(|r| r.id == id) else {
                continue;
            };
            let text = |v: &redis::Value| reply::string("SORT", v).ok();
            if let Some(name) = text(name) {
                record.name = name;
            }
            record.kind = text(kind).and_then(|k| match k.as_str() {
                "host" => Some(NodeType::Host),
                "worker" => Some(NodeType::Worker),
                _ => None,
            });
            record.pid = text(pid).and_then(|p| p.parse().ok());
            if let Some((name, listed)) = text(workers).and_then(|w| parse_workers(w.as_bytes())) {
                if record.name.is_empty() {
                    record.name = name;
                }
                record.workers = listed;
            }
        }
        Ok(records)
    }

    /// Keeps `workers` (this node's live workers, under its node name `name`) for the
    /// janitor; an empty list deletes what was kept.
    pub(crate) async fn list_workers(
        &self,
        name: &str,
        workers: Vec<NodeWorker>,
    ) -> Result<(), RedisError> {
        let key = format!("{}{}", self.workers_prefix, self.id);
        let listed = if workers.is_empty() {
            None
        } else {
            Some(serde_json::json!({ "name": name, "workers": workers }).to_string())
        };
        *self.workers.lock().unwrap_or_else(|e| e.into_inner()) = listed.clone();
        match listed {
            Some(json) => self.keep_workers(json).await,
            None => {
                let mut del = redis::cmd("DEL");
                del.arg(&key);
                self.kept.store(false, Ordering::Release);
                self.link.run("DEL", del).await?;
                Ok(())
            }
        }
    }

    /// Writes the workers' list `json`, reading what it replaces: nothing there after an
    /// earlier write means the janitor took it (this node was taken for dead while it was
    /// paused or cut off, and runs again), and the listeners are told.
    async fn keep_workers(&self, json: String) -> Result<(), RedisError> {
        let mut set = redis::cmd("SET");
        set.arg(format!("{}{}", self.workers_prefix, self.id))
            .arg(json)
            .arg("GET");
        let before = self.link.run("SET", set).await?;
        let was_kept = self.kept.swap(true, Ordering::AcqRel);
        if was_kept && matches!(before, redis::Value::Nil) {
            tracing::warn!(target: "event_base::redis", node = %self.id, "this node was taken for dead and evicted (paused or cut off past three beats); it runs again");
            self.revived
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|listener| listener());
        }
        Ok(())
    }

    /// Adds a listener told each time this node finds it was taken for dead and runs again.
    pub(crate) fn on_revived(&self, listener: RevivedListener) {
        self.revived
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(listener);
    }

    /// Adds a listener told of every node this one evicts.
    pub(crate) fn on_evicted(&self, listener: EvictedListener) {
        self.evicted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(listener);
    }

    /// Writes the workers' list again (a node taken for dead while paused lost it).
    async fn relist_workers(&self) {
        let listed = self
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(json) = listed {
            if let Err(e) = self.keep_workers(json).await {
                tracing::debug!(target: "event_base::redis", error = %e, "could not list this node's workers again");
            }
        }
    }

    /// Takes the workers' list of the silent node `dead` (only the first pass of its
    /// eviction finds it) and tells the listeners.
    async fn announce_dead(&self, dead: &str) -> Result<(), RedisError> {
        let cmd = scripts::evalsha(
            &scripts::TAKE_WORKERS,
            &[&self.zset, &format!("{}{dead}", self.workers_prefix)],
            (dead, self.ttl_ms()),
        );
        let taken = self.link.run("TAKE_WORKERS", cmd).await?;
        let parts = reply::array("TAKE_WORKERS", &taken)?;
        let (Some(last), Some(redis::Value::BulkString(bytes))) = (parts.first(), parts.get(1))
        else {
            // Beat again (only paused), or its list was taken already (or never written).
            return Ok(());
        };
        let Some((name, workers)) = parse_workers(bytes) else {
            tracing::warn!(target: "event_base::redis", node = %dead, "a silent node's workers' list is not readable; its workers are not announced dead");
            return Ok(());
        };
        let last_ms = match last {
            redis::Value::BulkString(b) => std::str::from_utf8(b)
                .ok()
                .and_then(|t| t.parse::<f64>().ok()),
            redis::Value::Double(d) => Some(*d),
            _ => None,
        };
        let last_seen = last_ms
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms as u64))
            .unwrap_or_else(SystemTime::now);
        let node = EvictedNode::new(name, workers, last_seen);
        self.evicted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|listener| listener(node.clone()));
        Ok(())
    }

    /// Writes one beat now, before the beat loop's first: the node's hash (its name) and its
    /// place in the nodes' set. Called before the node's group on a broadcast stream is made,
    /// so that a node another node can address is already found by its name
    /// ([`ids_named`](Self::ids_named)). A janitor's list of silent nodes is left to the loop.
    pub(crate) async fn beat_now(&self) -> Result<(), RedisError> {
        self.beat().await.map(drop)
    }

    /// Whether the janitor cannot have evicted this node (made its entries claimable by
    /// anyone at once) at any time from `since` to `now` (see [`BeatClock::unevicted_since`]).
    pub(crate) fn unevicted_since(&self, since: Instant, now: Instant) -> bool {
        let half = self.beat * SILENT_BEATS / 2;
        let beats = self.beats.lock().unwrap_or_else(|e| e.into_inner());
        beats.unevicted_since(since, now, half)
    }

    /// A beat sent at `sent` reached Redis.
    fn beat_reached(&self, sent: Instant) {
        let half = self.beat * SILENT_BEATS / 2;
        let mut beats = self.beats.lock().unwrap_or_else(|e| e.into_inner());
        beats.reached(sent, half);
    }

    fn ttl_ms(&self) -> u64 {
        (self.beat * SILENT_BEATS).as_millis() as u64
    }

    /// One beat; with the janitor lease, the silent nodes.
    async fn beat(&self) -> Result<Beat, RedisError> {
        let (name, kind) = self.identity();
        let subs = self.subs.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let cmd = scripts::evalsha(
            &scripts::BEAT,
            &[
                &self.zset,
                &self.hash,
                &self.janitor,
                &format!("{}{}", self.subs_prefix, self.id),
            ],
            (
                &self.id,
                self.ttl_ms(),
                name,
                kind.to_string(),
                std::process::id(),
                u8::from(kind == NodeType::Host),
                subs,
            ),
        );
        let sent = Instant::now();
        let v = self.link.run("BEAT", cmd).await?;
        self.beat_reached(sent);
        let parts = reply::array("BEAT", &v)?;
        let janitor = parts
            .first()
            .map(|m| reply::int("BEAT", m))
            .transpose()?
            .unwrap_or(0)
            == 1;
        if !janitor {
            return Ok(Beat::Member);
        }
        let mut silent = Vec::new();
        if let Some(list) = parts.get(1) {
            for n in reply::array("BEAT", list)? {
                let n = reply::string("BEAT", n)?;
                if n != self.id {
                    silent.push(n);
                }
            }
        }
        Ok(Beat::Janitor(silent))
    }

    /// Cleans up after the silent node `dead` (see the module docs).
    async fn evict(&self, dead: &str) -> Result<(), RedisError> {
        if let Err(e) = self.announce_dead(dead).await {
            tracing::warn!(target: "event_base::redis", node = %dead, error = %e, "could not read a silent node's workers; they are not announced dead");
        }
        let subs = format!("{}{dead}", self.subs_prefix);
        let mut smembers = redis::cmd("SMEMBERS");
        smembers.arg(&subs);
        let v = self.link.run("SMEMBERS", smembers).await?;
        let mut left = 0;
        for m in reply::array("SMEMBERS", &v)? {
            let member = reply::string("SMEMBERS", m)?;
            let mut parts = member.split(SEP);
            let (Some(stream), Some(group), Some(consumer), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                left += self.forget_sub(&subs, &member).await?;
                continue;
            };
            let own_group = u8::from(group == format!("n:{dead}"));
            if own_group == 1 {
                // What was addressed to the node goes with its group: dead-letter it first.
                crate::orphans::dead_letter_orphans(&self.link, &self.keys, stream, dead).await?;
            }
            let cmd = scripts::evalsha(&scripts::EVICT, &[stream], (group, consumer, own_group));
            let gone = reply::int("EVICT", &self.link.run("EVICT", cmd).await?)?;
            if gone == 1 {
                left += self.forget_sub(&subs, &member).await?;
                tracing::info!(target: "event_base::redis", node = %dead, %stream, %group, %consumer, "deleted the consumer of a silent node (it held nothing)");
            } else {
                left += 1;
                tracing::info!(target: "event_base::redis", node = %dead, %stream, %group, %consumer, "a silent node's consumer still holds entries; released them for takeover, and keep it until they are settled");
            }
        }
        if left == 0 {
            let cmd = scripts::evalsha(
                &scripts::FORGET,
                &[
                    &self.zset,
                    &subs,
                    &format!("{}{dead}", self.hash_prefix),
                    &format!("{}{dead}", self.workers_prefix),
                ],
                (dead, self.ttl_ms()),
            );
            if reply::int("FORGET", &self.link.run("FORGET", cmd).await?)? == 1 {
                tracing::info!(target: "event_base::redis", node = %dead, "forgot a silent node");
            } else {
                tracing::info!(target: "event_base::redis", node = %dead, "a node taken for silent beat again while it was cleaned up after; it is kept");
            }
        }
        Ok(())
    }

    /// Trims every topic's dead letters older than the retention age (the janitor does,
    /// now and then).
    async fn trim_dead_letters(&self) -> Result<(), RedisError> {
        let mut smembers = redis::cmd("SMEMBERS");
        smembers.arg(self.keys.topics());
        let v = self.link.run("SMEMBERS", smembers).await?;
        let age = self.dead_letter_age.as_millis() as u64;
        for t in reply::array("SMEMBERS", &v)? {
            let topic = reply::string("SMEMBERS", t)?;
            let cmd = scripts::evalsha(&scripts::TRIM_AGE, &[&self.keys.dlq(&topic)], age);
            let n = reply::int("TRIM", &self.link.run("TRIM", cmd).await?)?;
            if n > 0 {
                tracing::info!(target: "event_base::redis", %topic, trimmed = n, "dead letters past their retention age deleted");
            }
        }
        Ok(())
    }

    /// Drops `member` from the set `subs`; returns 0 (nothing left for it).
    async fn forget_sub(&self, subs: &str, member: &str) -> Result<usize, RedisError> {
        let mut srem = redis::cmd("SREM");
        srem.arg(subs).arg(member);
        self.link.run("SREM", srem).await?;
        Ok(0)
    }
}

/// The node name and workers of a workers' list as [`Node::list_workers`] wrote it; `None`
/// if it is not one.
fn parse_workers(bytes: &[u8]) -> Option<(String, Vec<NodeWorker>)> {
    let mut v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let name = v.get("name")?.as_str()?.to_owned();
    let workers = serde_json::from_value(v.get_mut("workers")?.take()).ok()?;
    Some((name, workers))
}

/// Beats between two trims of the dead letters by age (and the janitor's first beat).
const TRIM_EVERY: u32 = 30;

async fn beat_loop(node: Weak<Node>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut since_trim = TRIM_EVERY;
    loop {
        tick.tick().await;
        let Some(node) = node.upgrade() else { return };
        let handlers = node
            .handlers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for h in &handlers {
            node.register_handler(h);
        }
        let beat = node.beat().await;
        node.renew_leases().await;
        // After the beat, so that a janitor evicting this node meanwhile sees it alive.
        node.relist_workers().await;
        match beat {
            Ok(Beat::Janitor(silent)) => {
                since_trim += 1;
                if since_trim >= TRIM_EVERY {
                    since_trim = 0;
                    if let Err(e) = node.trim_dead_letters().await {
                        tracing::warn!(target: "event_base::redis", error = %e, "could not trim old dead letters; trying again later");
                    }
                }
                for dead in silent {
                    if let Err(e) = node.evict(&dead).await {
                        tracing::warn!(target: "event_base::redis", node = %dead, error = %e, "could not clean up after a silent node; trying again next beat");
                    }
                }
            }
            Ok(Beat::Member) => since_trim = TRIM_EVERY,
            Err(e) => {
                tracing::warn!(target: "event_base::redis", error = %e, "heartbeat failed; other nodes may take this node for dead after three beats");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HALF: Duration = Duration::from_millis(3000);

    #[test]
    fn a_node_that_never_beat_cannot_be_evicted() {
        let t0 = Instant::now();
        assert!(BeatClock::default().unevicted_since(t0, t0 + HALF * 10, HALF));
    }

    #[test]
    fn beats_on_time_keep_a_claim_safe() {
        let t0 = Instant::now();
        let mut c = BeatClock::default();
        for i in 0..5 {
            c.reached(t0 + HALF / 2 * i, HALF);
        }
        let last = t0 + HALF * 2;
        assert!(c.unevicted_since(t0, last + HALF / 2, HALF));
        assert!(
            !c.unevicted_since(t0, last + HALF, HALF),
            "the beat is late"
        );
    }

    #[test]
    fn a_silence_puts_in_doubt_what_was_confirmed_before_it() {
        let t0 = Instant::now();
        let mut c = BeatClock::default();
        c.reached(t0, HALF);
        // Paused: the next beat reaches Redis long after.
        let woke = t0 + HALF * 4;
        c.reached(woke, HALF);
        let now = woke + HALF / 4;
        assert!(!c.unevicted_since(t0 + HALF / 2, now, HALF));
        assert!(c.unevicted_since(woke, now, HALF));
    }
}
