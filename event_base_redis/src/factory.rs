//! [`RedisQueueFactory`]: the queue of each subscription as a Redis stream with a consumer
//! group, and the settings they share.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use event_base_core::backend::{QueueFactory, RateLimiter, RemoteRoutes, TopicQueue};
use event_base_core::constant::MAX_WAIT;
use event_base_core::{MessageTopic, QueueError, Rate};
use event_base_queue::FlumeQueueFactory;

use crate::consumer::RedisConsumer;
use crate::error::RedisError;
use crate::keys::{Keys, DEFAULT_DLQ_MAX_AGE};
use crate::lane::{lane_of, Lane};
use crate::link::{Link, Timeouts};
use crate::node::Node;
use crate::producer::RedisProducer;
use crate::queue::SubQueue;
use crate::rate::RedisRate;
use crate::reply;
use crate::routes::RedisRoutes;
use crate::scripts;
use crate::settings::Settings;
use crate::wal::RedisWal;

/// Messages a subscription's stream holds before senders wait, unless set otherwise.
pub const DEFAULT_BOUND: usize = 100_000;
/// How long a claimed entry may go without its lease being renewed before another consumer
/// may take it over, unless set otherwise.
pub const DEFAULT_VISIBILITY_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a claim waits in Redis (`XREADGROUP BLOCK`) before looking again.
pub const DEFAULT_BLOCK: Duration = Duration::from_secs(2);
/// The key prefix, unless set otherwise.
pub const DEFAULT_PREFIX: &str = "eb";
/// How many times an entry may be delivered (claimed, then taken over from a consumer that
/// neither settled it nor renewed its lease) before it is dead-lettered, unless set otherwise.
pub const DEFAULT_MAX_DELIVERIES: u32 = 5;
/// How often a node beats, unless set otherwise; silent for three beats, it is evicted.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(2);
/// How long after a node last ran a handler a send still routes to it, unless set otherwise
/// ([`RedisQueueFactory::registry_max_age`]): long enough for every node of a handler to
/// restart (a deploy, a crash loop) while its messages wait in its stream.
pub const DEFAULT_REGISTRY_MAX_AGE: Duration = Duration::from_secs(15 * 60);

/// Queues on Redis Streams, shared by every process that connects to the same server and
/// prefix: the distributed mode's queue backend.
///
/// Each subscription (a handler of a topic) has a stream, `<prefix>:{<topic>}:s:<handler>`,
/// and a consumer group named after the handler. Every process running that handler reads
/// through the same group, so its workers in all processes compete for the entries, and each
/// entry is handled by one of them. An entry is deleted once its handler's copy has ended
/// (acked or dead-lettered), so a stream holds only what is unfinished. A claimed entry
/// whose consumer stops renewing its lease (the process died or hangs) for the
/// [visibility timeout](Self::visibility_timeout) is taken over by another consumer
/// (`XAUTOCLAIM`). Consumer names are unique per process start.
///
/// The system topics of the cluster (`_system.shutdown`, `_system.shutdown_ack`,
/// `_system.worker_discovery`, `_system.topic_sync`, `_system.topic_discovery`) are carried
/// between nodes: each handler of one has a broadcast stream,
/// `<prefix>:{<topic>}:bc:<handler>`, that every node running the handler reads through a
/// group of its own, and the handler is in the registry, so a node without it publishes to
/// it too. A shutdown command sent from any node thus reaches every node, and a subscriber
/// on one node sees every node's discovery events, topic tables and shutdown acks. The
/// other system topics (audit, heartbeats, dead-letter notices) stay in the process, on
/// in-memory queues.
///
/// `create_subscription` does no I/O: each queue connects when first used, so a factory can
/// be made outside a runtime with [`open`](Self::open). [`connect`](Self::connect) also
/// checks the server first.
///
/// ```no_run
/// # async fn demo() -> Result<(), event_base_core::CoreError> {
/// use event_base_redis::{RedisQueueFactory, RedisWal};
/// let queue = RedisQueueFactory::connect("redis://127.0.0.1:6379").await?;
/// let bus = event_base_core::EventBus::builder()
///     .wal(RedisWal::over(&queue))
///     .queue(queue)
///     .build()
///     .await?;
/// # drop(bus); Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisQueueFactory {
    pub(crate) link: Link,
    pub(crate) settings: Settings,
    local: FlumeQueueFactory,
    /// This process in the cluster: heartbeats, and its consumers for the janitor.
    node: Arc<Node>,
    heartbeat: Duration,
    dead_letter_age: Duration,
    registry_max_age: Duration,
    /// The cached registry of handlers, made when a bus first asks (`routes`), shared by
    /// the factory's clones.
    routes: Arc<OnceLock<Arc<RedisRoutes>>>,
    /// Unique per factory: consumer names are `<incarnation>-<n>`.
    incarnation: Arc<str>,
    consumers: Arc<AtomicU64>,
}

impl std::fmt::Debug for RedisQueueFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisQueueFactory")
            .field("addr", &self.link.addr())
            .field("prefix", &self.settings.prefix)
            .field("bound", &self.settings.bound)
            .field("visibility_timeout", &self.settings.visibility)
            .field("max_deliveries", &self.settings.max_deliveries)
            .field("heartbeat", &self.heartbeat)
            .field("registry_max_age", &self.registry_max_age)
            .field("node_id", &self.incarnation)
            .finish_non_exhaustive()
    }
}

impl RedisQueueFactory {
    /// Connects to the Redis server at `url` (`redis://host:port/db`) and checks it: it must
    /// answer, be Redis 7.0 or newer, and not evict keys (`maxmemory-policy noeviction`:
    /// any other policy may silently drop a stream, and the messages in it).
    pub async fn connect(url: &str) -> Result<RedisQueueFactory, RedisError> {
        let factory = Self::open(url)?;
        factory.check_server().await?;
        Ok(factory)
    }

    /// A factory for the server at `url` that connects when first used, without checking
    /// the server (see [`connect`](Self::connect)). Fails only on a malformed URL.
    pub fn open(url: &str) -> Result<RedisQueueFactory, RedisError> {
        let link = Link::open(
            url,
            Timeouts {
                connect: Duration::from_secs(1),
                response: Duration::from_secs(2),
            },
        )?;
        let id = event_base_core::new_message_id();
        let short: String = id.chars().filter(|c| *c != '-').take(12).collect();
        let incarnation = format!("{}-{short}", std::process::id());
        Ok(RedisQueueFactory {
            node: Node::new(
                link.clone(),
                &Keys::new(DEFAULT_PREFIX),
                incarnation.clone(),
                DEFAULT_HEARTBEAT,
                DEFAULT_DLQ_MAX_AGE,
            ),
            heartbeat: DEFAULT_HEARTBEAT,
            dead_letter_age: DEFAULT_DLQ_MAX_AGE,
            registry_max_age: DEFAULT_REGISTRY_MAX_AGE,
            routes: Arc::new(OnceLock::new()),
            link,
            settings: Settings {
                keys: Keys::new(DEFAULT_PREFIX),
                prefix: DEFAULT_PREFIX.to_owned(),
                bound: DEFAULT_BOUND,
                visibility: DEFAULT_VISIBILITY_TIMEOUT,
                block: DEFAULT_BLOCK,
                max_deliveries: DEFAULT_MAX_DELIVERIES,
                dead_letters: Arc::new(AtomicU64::new(0)),
            },
            local: FlumeQueueFactory::default(),
            incarnation: Arc::from(incarnation),
            consumers: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Puts every key under `prefix` (default [`DEFAULT_PREFIX`]): buses with different
    /// prefixes on one server share nothing.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        self.settings.keys = Keys::new(&prefix);
        self.settings.prefix = prefix;
        self.renew_node();
        self
    }

    /// How often this node beats (default [`DEFAULT_HEARTBEAT`]; at least 50 ms). A node
    /// beats once it consumes (its first claim): its hash `<prefix>:{nodes}:n:<id>` expires
    /// after three beats, and its score in `<prefix>:{nodes}:z` is the time of its last beat.
    /// One `Host` node (its bus's `EventBusBuilder::node_type`, else the process's
    /// [`event_base_core::set_node_type`]) holds the janitor lease and
    /// cleans up after nodes silent for three beats: their entries are released for
    /// takeover at once, their consumers deleted once they hold nothing. So three beats,
    /// not the visibility timeout, is how long a whole node may stall before its entries
    /// move: keep it well above the pauses expected. Use the same value on every node.
    /// At most [`MAX_WAIT`] (30 years): a longer one is taken as that.
    pub fn heartbeat(mut self, d: Duration) -> Self {
        self.heartbeat = d.clamp(Duration::from_millis(50), MAX_WAIT);
        self.renew_node();
        self
    }

    /// How long dead letters are kept (default [`DEFAULT_DLQ_MAX_AGE`], 90 days), besides
    /// their count (about [`DLQ_MAX_LEN`](crate::DLQ_MAX_LEN) per topic): the janitor
    /// deletes older ones every 30 heartbeats. The janitor's value is the one that counts.
    /// At most [`MAX_WAIT`] (30 years): a longer one is taken as that.
    pub fn dead_letter_max_age(mut self, d: Duration) -> Self {
        self.dead_letter_age = d.min(MAX_WAIT);
        self.renew_node();
        self
    }

    /// This node's id in the cluster (unique per process start; its consumers' names start
    /// with it). Its shape, `<pid>-<12 lowercase hex digits>`, tells it from a node name in
    /// a `to_worker: "<node>/<worker>"` (anything else there is a name, resolved to the id of
    /// the one running node of that name that runs the worker's handler).
    pub fn node_id(&self) -> &str {
        &self.incarnation
    }

    /// The handlers of `topic` that some node of the cluster ran within `max_age` (by the
    /// server's clock): the registry, which every consuming node refreshes with each
    /// heartbeat. A handler removed from the code stays in the registry, aging, until
    /// [`forget_handler`](Self::forget_handler) removes it; pick `max_age` for how long a
    /// handler may be down (all its nodes stopped) and still count as there.
    pub async fn handlers_of(
        &self,
        topic: &str,
        max_age: Duration,
    ) -> Result<Vec<String>, RedisError> {
        let key = self.settings.keys.handlers(topic);
        let cmd = scripts::evalsha(&scripts::HANDLERS, &[&key], max_age.as_millis() as u64);
        let v = self.link.run("HANDLERS", cmd).await?;
        reply::array("HANDLERS", &v)?
            .iter()
            .map(|h| reply::string("HANDLERS", h))
            .collect()
    }

    /// The application topics in the registry (that some node has run a handler of). The
    /// system topics carried between nodes (`_system.shutdown`, discovery, ...) are in the
    /// registry too, since other nodes publish to their handlers, but are not listed.
    pub async fn registered_topics(&self) -> Result<Vec<String>, RedisError> {
        let mut cmd = redis::cmd("SMEMBERS");
        cmd.arg(self.settings.keys.registry());
        let v = self.link.run("SMEMBERS", cmd).await?;
        let mut topics: Vec<String> = reply::array("SMEMBERS", &v)?
            .iter()
            .map(|t| reply::string("SMEMBERS", t))
            .collect::<Result<_, _>>()?;
        topics.retain(|t| !t.starts_with(event_base_core::constant::SYSTEM_PREFIX));
        topics.sort();
        Ok(topics)
    }

    /// Removes `handler` of `topic` from the registry (a handler taken out of the code).
    /// Its stream and consumer group stay: delete them with `DEL <prefix>:{<topic>}:s:<handler>`
    /// once nothing in them is needed. A node still running the handler registers it
    /// again with its next heartbeat.
    pub async fn forget_handler(&self, topic: &str, handler: &str) -> Result<(), RedisError> {
        let mut cmd = redis::cmd("ZREM");
        cmd.arg(self.settings.keys.handlers(topic)).arg(handler);
        self.link.run("ZREM", cmd).await?;
        Ok(())
    }

    /// How long after some node last ran a handler (by the registry) a bus built with this
    /// factory still sends it a copy (default [`DEFAULT_REGISTRY_MAX_AGE`]; at least three
    /// heartbeats). A bus sends a message for a topic it has no handler of to every handler
    /// of the topic the registry lists within this age, and a message for a topic it has
    /// handlers of also to the topic's listed handlers it does not run itself; only a topic
    /// no node ran a handler of within this age is refused with `NoHandler`. So it is how
    /// long every node of a handler may be down (restarting, say) and its messages still
    /// queued for it; a handler taken out of the code stops getting copies this long after
    /// its last node stopped, or at once with [`forget_handler`](Self::forget_handler).
    /// At most [`MAX_WAIT`] (30 years): a longer one is taken as that.
    pub fn registry_max_age(mut self, d: Duration) -> Self {
        self.registry_max_age = d.min(MAX_WAIT);
        self.renew_node();
        self
    }

    fn renew_node(&mut self) {
        self.routes = Arc::new(OnceLock::new());
        self.node = Node::new(
            self.link.clone(),
            &self.settings.keys,
            self.incarnation.to_string(),
            self.heartbeat,
            self.dead_letter_age,
        );
    }

    /// Entries a subscription's stream holds (unfinished: queued or being handled) before
    /// `send` waits and `try_send` fails (default [`DEFAULT_BOUND`]; at least 1). The count
    /// is this process's view, refreshed by every reply from Redis, so across processes it
    /// is a soft limit.
    pub fn bound(mut self, n: usize) -> Self {
        self.settings.bound = n.max(1);
        self
    }

    /// How long a claimed entry's lease lasts (default [`DEFAULT_VISIBILITY_TIMEOUT`]). A
    /// consumer renews the leases of what it holds every third of it while its handlers run;
    /// an entry whose lease ran out (its process died, or stopped for longer) is taken over
    /// by the next consumer of the group that looks, which every consumer does every half of
    /// it. So a dead process's entries are delivered again within about 1.5 times this.
    /// At most [`MAX_WAIT`] (30 years): a longer one is taken as that.
    pub fn visibility_timeout(mut self, d: Duration) -> Self {
        self.settings.visibility = d.clamp(Duration::from_millis(100), MAX_WAIT);
        self
    }

    /// How many deliveries an entry gets at most (default [`DEFAULT_MAX_DELIVERIES`]; at
    /// least 1). An entry is delivered once when first claimed, and once more each time it
    /// is taken over from a consumer whose lease ran out (Redis's delivery count, as
    /// `XPENDING` shows it). A takeover that would deliver it more often dead-letters it
    /// instead, in the topic's dead-letter stream with a reason that says so: a message that
    /// crashes (or hangs) every process that handles it stops there rather than take the
    /// cluster down one process after the other.
    ///
    /// Retries (`Ack::NoAck`) and `nack`s do not count: they are handled by the bus's
    /// `max_retries`; this counts only deliveries whose consumer vanished.
    pub fn max_deliveries(mut self, n: u32) -> Self {
        self.settings.max_deliveries = n.max(1);
        self
    }

    /// The longest one claim waits in Redis before looking again (default
    /// [`DEFAULT_BLOCK`]).
    /// At most [`MAX_WAIT`] (30 years): a longer one is taken as that.
    pub fn block(mut self, d: Duration) -> Self {
        self.settings.block = d.clamp(Duration::from_millis(10), MAX_WAIT);
        self
    }

    /// The [`RedisWal`] over this factory's keys: dead letters in each topic's dead-letter
    /// stream, written through the same connection, so a dead letter reaches Redis before
    /// the ack of its entry.
    pub fn wal(&self) -> RedisWal {
        RedisWal::over(self)
    }

    /// Checks the server: reachable, Redis 7.0 or newer, `maxmemory-policy noeviction`.
    pub async fn check_server(&self) -> Result<(), RedisError> {
        let addr = self.link.addr().to_owned();
        let mut info = redis::cmd("INFO");
        info.arg("server").arg("memory");
        let v = self.link.run("INFO", info).await?;
        let text = reply::string("INFO", &v)?;
        let version = reply::info_field(&text, "redis_version").unwrap_or_default();
        let major: u32 = version
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        if major < 7 {
            return Err(RedisError::TooOld { addr, version });
        }
        let policy = reply::info_field(&text, "maxmemory_policy").unwrap_or_default();
        if policy != "noeviction" {
            return Err(RedisError::Evicting { addr, policy });
        }
        Ok(())
    }

    fn subscription(&self, topic: &MessageTopic, handler: &str, lane: Lane) -> TopicQueue {
        let n = self.consumers.fetch_add(1, Ordering::Relaxed);
        let q = SubQueue::new(
            self.link.clone(),
            &self.settings,
            self.node.clone(),
            (topic, handler),
            lane,
        );
        let name = format!("{}-{n}", self.incarnation);
        TopicQueue {
            producer: Arc::new(RedisProducer::new(q.clone())),
            consumer: Arc::new(RedisConsumer::new(q, name)),
        }
    }
}

/// The handler name `create` (without one) uses: its queue is shared by every `create` of
/// the topic on the same prefix.
const NO_HANDLER: &str = "queue";

impl QueueFactory for RedisQueueFactory {
    fn create(&self, topic: &MessageTopic) -> Result<TopicQueue, QueueError> {
        self.create_subscription(topic, NO_HANDLER)
    }

    fn create_subscription(
        &self,
        topic: &MessageTopic,
        handler: &str,
    ) -> Result<TopicQueue, QueueError> {
        match lane_of(topic) {
            Some(lane) => Ok(self.subscription(topic, handler, lane)),
            None => self.local.create(topic),
        }
    }

    /// The registry of handlers, cached in the process and read again every heartbeat (see
    /// [`registry_max_age`](RedisQueueFactory::registry_max_age)).
    fn routes(&self) -> Option<Arc<dyn RemoteRoutes>> {
        let routes = self.routes.get_or_init(|| {
            RedisRoutes::new(
                self.link.clone(),
                self.settings.clone(),
                self.node.clone(),
                self.registry_max_age.max(self.heartbeat * 3),
                self.heartbeat,
            )
        });
        routes.start();
        Some(routes.clone())
    }

    /// Every node running the handler shares its rate: one script call a start, on the
    /// server's clock.
    fn rate_limiter(
        &self,
        topic: &MessageTopic,
        handler: &str,
        rate: Rate,
    ) -> Option<Arc<dyn RateLimiter>> {
        if topic.is_system() {
            return None;
        }
        let key = self.settings.keys.rate(topic.as_str(), handler);
        Some(Arc::new(RedisRate::new(self.link.clone(), key, rate)))
    }

    fn name(&self) -> &'static str {
        "redis"
    }
}

/// The WAL over a factory's keys: with the factory, so that `wal.rs` needs nothing of it.
impl RedisWal {
    /// The WAL over `queue`'s keys, sharing its connection: a dead letter is written before
    /// the ack of its entry, so a crash between them delivers the entry again rather than
    /// lose the dead letter.
    pub fn over(queue: &RedisQueueFactory) -> RedisWal {
        RedisWal::from_parts(queue.link.clone(), &queue.settings)
    }

    /// A WAL of its own for the server at `url`, with the default prefix, after checking
    /// the server as [`RedisQueueFactory::connect`] does. Prefer [`over`](Self::over) (or
    /// [`RedisQueueFactory::wal`]), which also shares the queue's connection and prefix.
    pub async fn connect(url: &str) -> Result<RedisWal, RedisError> {
        Ok(RedisWal::over(&RedisQueueFactory::connect(url).await?))
    }
}
