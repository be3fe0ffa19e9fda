//! [`RedisRoutes`]: the registry of handlers (`<prefix>:{<topic>}:handlers`, refreshed by
//! every consuming node with each beat) cached in this process, so that a bus sends to the
//! handlers other nodes run: the Redis backend's [`RemoteRoutes`].
//!
//! - The cache is read again every heartbeat (`SMEMBERS <prefix>:registry`, then the
//!   handlers of every topic run within the max age, all sent at once), by a task of its own: a process that
//!   only sends, and so never beats, refreshes too. Sends read the cache, never Redis.
//! - A send to a topic the cache does not list looks that topic up once
//!   ([`look_up`](RemoteRoutes::look_up): one script, one round trip), at most every
//!   [`LOOK_UP_EVERY`] per topic; in between, such sends are answered from the cache (and
//!   a send that misses while a look-up runs waits for it, then answers from what it read).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Once, RwLock, Weak};
use std::time::Duration;

use async_trait::async_trait;
use event_base_core::backend::{
    EProducer, EvictedListener, NodeRecord, NodeWorker, Outstanding, RemoteRoutes, RevivedListener,
    RoutesListener,
};
use event_base_core::{MessageTopic, NodeType, QueueError};
use tokio::time::Instant;

use crate::error::RedisError;
use crate::lane::Lane;
use crate::link::Link;
use crate::node::Node;
use crate::producer::RedisProducer;
use crate::queue::SubQueue;
use crate::reply;
use crate::scripts;
use crate::settings::Settings;

/// The shortest time between two look-ups of one topic by sends that found no handler in
/// the cache.
pub const LOOK_UP_EVERY: Duration = Duration::from_millis(250);

/// The registry of handlers as this process sees it (see the module docs).
pub(crate) struct RedisRoutes {
    link: Link,
    settings: Settings,
    node: Arc<Node>,
    /// Handlers run within this long count.
    max_age: Duration,
    /// How often the cache is read again.
    every: Duration,
    /// Topic → its handlers, as last read.
    cache: RwLock<HashMap<String, Vec<Arc<str>>>>,
    /// When each topic was last looked up by a miss (pruned with each refresh).
    looked_up: Mutex<HashMap<String, Instant>>,
    listeners: Mutex<Vec<RoutesListener>>,
    /// Held by a look-up: a miss meanwhile waits for it, then answers from what it read.
    looking: tokio::sync::Mutex<()>,
    started: Once,
}

impl RedisRoutes {
    pub(crate) fn new(
        link: Link,
        settings: Settings,
        node: Arc<Node>,
        max_age: Duration,
        every: Duration,
    ) -> Arc<RedisRoutes> {
        Arc::new(RedisRoutes {
            link,
            settings,
            node,
            max_age,
            every,
            cache: RwLock::new(HashMap::new()),
            looked_up: Mutex::new(HashMap::new()),
            listeners: Mutex::new(Vec::new()),
            looking: tokio::sync::Mutex::new(()),
            started: Once::new(),
        })
    }

    /// Starts the refresh task (once, and only inside a runtime; without one the cache is
    /// filled by look-ups only).
    pub(crate) fn start(self: &Arc<Self>) {
        self.started.call_once(|| {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(refresh_loop(Arc::downgrade(self), self.every));
            }
        });
    }

    /// The handlers of `topic` run within the max age, from Redis.
    async fn read(&self, topic: &str) -> Result<Vec<Arc<str>>, RedisError> {
        read_handlers(
            self.link.clone(),
            self.settings.keys.handlers(topic),
            self.max_age,
        )
        .await
    }

    /// Reads the whole registry again (the topics' handlers all at once: the writers
    /// pipeline the reads); tells the listeners if anything changed.
    async fn refresh(&self) -> Result<(), RedisError> {
        let mut smembers = redis::cmd("SMEMBERS");
        smembers.arg(self.settings.keys.registry());
        let v = self.link.run("SMEMBERS", smembers).await?;
        let mut reads = tokio::task::JoinSet::new();
        for t in reply::array("SMEMBERS", &v)? {
            let topic = reply::string("SMEMBERS", t)?;
            let read = read_handlers(
                self.link.clone(),
                self.settings.keys.handlers(&topic),
                self.max_age,
            );
            reads.spawn(async move { (topic, read.await) });
        }
        let mut fresh = HashMap::new();
        while let Some(done) = reads.join_next().await {
            // A read task ends only by its reply, or with the runtime (then the link stops too).
            let (topic, handlers) = done.map_err(|_| RedisError::Stopped)?;
            let handlers = handlers?;
            if !handlers.is_empty() {
                fresh.insert(topic, handlers);
            }
        }
        let changed = {
            let mut cache = self.cache.write().unwrap_or_else(|e| e.into_inner());
            let changed = *cache != fresh;
            *cache = fresh;
            changed
        };
        self.looked_up
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, at| at.elapsed() < LOOK_UP_EVERY);
        if changed {
            self.notify();
        }
        Ok(())
    }

    fn notify(&self) {
        let mut listeners = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
        listeners.retain(|l| l());
    }

    fn cached(&self, topic: &str) -> Vec<Arc<str>> {
        self.cache
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
            .cloned()
            .unwrap_or_default()
    }
}

#[async_trait]
impl RemoteRoutes for RedisRoutes {
    fn handlers_of(&self, topic: &str) -> Vec<Arc<str>> {
        self.cached(topic)
    }

    async fn look_up(&self, topic: &str) -> Result<Vec<Arc<str>>, QueueError> {
        // One look-up at a time: concurrent misses of a topic find what the first read.
        let _one = self.looking.lock().await;
        {
            let mut looked_up = self.looked_up.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            match looked_up.get(topic) {
                Some(at) if now.duration_since(*at) < LOOK_UP_EVERY => {
                    drop(looked_up);
                    return Ok(self.cached(topic));
                }
                _ => {
                    looked_up.insert(topic.to_owned(), now);
                }
            }
        }
        let handlers = self.read(topic).await?;
        let changed = {
            let mut cache = self.cache.write().unwrap_or_else(|e| e.into_inner());
            let before = cache.get(topic).cloned().unwrap_or_default();
            if handlers.is_empty() {
                cache.remove(topic);
            } else {
                cache.insert(topic.to_owned(), handlers.clone());
            }
            before != handlers
        };
        if changed {
            self.notify();
        }
        Ok(handlers)
    }

    fn producer(
        &self,
        topic: &MessageTopic,
        handler: &str,
    ) -> Result<Arc<dyn EProducer>, QueueError> {
        // A handler of a cluster-wide system topic reads a broadcast stream.
        let lane = crate::lane::lane_of(topic).unwrap_or(Lane::Work);
        let q = SubQueue::new(
            self.link.clone(),
            &self.settings,
            self.node.clone(),
            (topic, handler),
            lane,
        );
        Ok(Arc::new(RedisProducer::new(q)))
    }

    async fn flush(&self) -> Result<(), QueueError> {
        // The writer keeps order: once this answers, everything queued before it has.
        self.link.run("PING", redis::cmd("PING")).await?;
        Ok(())
    }

    async fn outstanding(
        &self,
        subscriptions: &[(MessageTopic, Arc<str>)],
    ) -> Result<Option<Outstanding>, QueueError> {
        // One script per subscription (its keys share the topic's slot), all at once: the
        // writers pipeline them.
        let mut asks = tokio::task::JoinSet::new();
        for (topic, handler) in subscriptions {
            let keys = &self.settings.keys;
            let (topic, handler) = (topic.as_str(), &**handler);
            let cmd = scripts::eval(
                &scripts::OUTSTANDING,
                &[
                    &keys.stream(topic, handler),
                    &keys.sub_broadcast(topic, handler),
                    &keys.delayed(topic, handler),
                    &keys.keyed(topic, handler),
                ],
            );
            let link = self.link.clone();
            asks.spawn(async move { link.run("OUTSTANDING", cmd).await });
        }
        let mut total = Outstanding::default();
        while let Some(asked) = asks.join_next().await {
            // A task ends only by its reply, or with the runtime (then the link stops too).
            let v = asked.map_err(|_| RedisError::Stopped)??;
            match reply::ints("OUTSTANDING", &v)?[..] {
                [queued, delayed] => {
                    total.queued += queued.max(0) as u64;
                    total.delayed += delayed.max(0) as u64;
                }
                _ => {
                    return Err(RedisError::UnexpectedReply {
                        command: "OUTSTANDING",
                        what: format!("expected two counts, got {v:?}"),
                    }
                    .into())
                }
            }
        }
        Ok(Some(total))
    }

    fn on_refresh(&self, listener: RoutesListener) {
        self.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(listener);
    }

    /// The node's hash holds `name` and `kind` from its next beat on. Buses sharing one
    /// [`RedisQueueFactory`](crate::RedisQueueFactory) (or its clones) share one node: the
    /// first bus built on it names it, and a later one described otherwise is logged and
    /// ignored (give each bus its own factory to register it under its own name).
    fn describe_node(&self, name: &str, kind: NodeType) {
        self.node.describe(name, kind);
    }

    async fn list_workers(&self, node: &str, workers: Vec<NodeWorker>) -> Result<(), QueueError> {
        self.node.list_workers(node, workers).await?;
        Ok(())
    }

    fn on_evicted(&self, listener: EvictedListener) {
        self.node.on_evicted(listener);
    }

    fn on_revived(&self, listener: RevivedListener) {
        self.node.on_revived(listener);
    }

    async fn nodes(&self) -> Result<Option<Vec<NodeRecord>>, QueueError> {
        Ok(Some(self.node.records().await?))
    }
}

/// The handlers of the registry key `key` run within `max_age` (script `HANDLERS`), sorted.
async fn read_handlers(
    link: Link,
    key: String,
    max_age: Duration,
) -> Result<Vec<Arc<str>>, RedisError> {
    let cmd = scripts::evalsha(&scripts::HANDLERS, &[&key], max_age.as_millis() as u64);
    let v = link.run("HANDLERS", cmd).await?;
    let mut handlers = reply::array("HANDLERS", &v)?
        .iter()
        .map(|h| reply::string("HANDLERS", h).map(Arc::from))
        .collect::<Result<Vec<Arc<str>>, _>>()?;
    handlers.sort();
    Ok(handlers)
}

async fn refresh_loop(routes: Weak<RedisRoutes>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(routes) = routes.upgrade() else {
            return;
        };
        if let Err(e) = routes.refresh().await {
            tracing::warn!(target: "event_base::redis", error = %e, "could not read the registry of handlers; sends use what was read before, and try again next beat");
        }
    }
}
