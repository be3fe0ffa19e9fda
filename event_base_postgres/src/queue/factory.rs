//! [`PostgresQueueFactory`]: each subscription's queue as rows of one table, shared by every
//! process on the database, and the send inside the application's own transaction.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use event_base_core::backend::{
    is_cluster_system_topic, node_and_worker, ordering_key, QueueFactory, RateLimiter,
    RemoteRoutes, TopicQueue,
};
use event_base_core::constant::MAX_WAIT;
use event_base_core::{DeliveryMode, EMessage, MessageId, MessageTopic, QueueError, Rate};
use event_base_queue::FlumeQueueFactory;
use tokio_postgres::GenericClient;

use crate::codec;
use crate::error::PostgresError;
use crate::link::parse_url;
use crate::queue::consumer::PgConsumer;
use crate::queue::producer::PgProducer;
use crate::queue::rate::PgRate;
use crate::queue::routes::PgRoutes;
use crate::queue::shared::{Settings, Shared};
use crate::queue::sql::INSERT_FOR_TOPIC;
use crate::queue::sub_queue::SubQueue;
use crate::queue::wal::PostgresQueueWal;
use crate::queue::writer::Op;

/// Rows a subscription holds before senders wait, unless set otherwise.
pub const DEFAULT_BOUND: usize = 100_000;
/// How long a claimed row may go without its lease being renewed before it is freed for
/// another consumer, unless set otherwise.
pub const DEFAULT_VISIBILITY_TIMEOUT: Duration = Duration::from_secs(30);
/// How many deliveries a row gets at most (a first claim, then one a lease that ran out)
/// before it is dead-lettered, unless set otherwise.
pub const DEFAULT_MAX_DELIVERIES: u32 = 5;

/// Queues in PostgreSQL, shared by every process that connects to the same database: the
/// distributed mode's second engine, beside Redis Streams.
///
/// Each subscription (a handler of a topic) is the rows of `event_base_queue` that name it;
/// every process running the handler claims from them, in batches, with `FOR UPDATE SKIP
/// LOCKED`, so its workers in all processes compete and each row is handled by one of them.
/// A row is deleted once its handler's copy ended (acked or dead-lettered). A claimed row
/// whose holder stops renewing its lease (its process died or hangs) for the
/// [visibility timeout](Self::visibility_timeout) is freed and claimed again. Wake-ups come
/// by `LISTEN`/`NOTIFY`: an idle consumer waits without polling. Messages with an ordering
/// key (`EMessage::with_key`) are handled one at a time per key and handler, in send
/// order, across every process. Messages due later wait as rows (`due_at`), retries keep
/// their row (and their key's place).
///
/// Each process's workers of a handler get a `Broadcast` message each (a copy per process,
/// in its *lane* of the subscription), and a message addressed to a worker of one process
/// (`to_worker: "<node name or id>/<worker>"`) reaches that process only. The system topics
/// that carry shutdown commands and their acks, worker discovery and the topic tables
/// (`_system.shutdown`, `_system.shutdown_ack`, `_system.worker_discovery`,
/// `_system.topic_sync`, `_system.topic_discovery`) reach every process that handles them;
/// the other system topics stay in each process, on in-memory queues.
///
/// Each process keeps a record of itself (`event_base_nodes`, what
/// [`EventBus::nodes`](event_base_core::EventBus::nodes) lists), beating every third of the
/// visibility timeout. A process silent for the whole timeout is evicted by the first other
/// process to notice: its record and its lanes are deleted (what was addressed to its
/// workers becomes dead letters), and the evicting bus announces its workers as
/// [`Dead`](event_base_core::DiscoveryEvent::Dead). One that was only paused records itself
/// again when it runs, and its bus announces its workers as joined again.
///
/// Three connections a factory: the writer (sends, acks, retries, dead letters, many to a
/// transaction), claims (`synchronous_commit = off`: a claim lost in a server crash only
/// makes its row claimable again), and the listener. Each comes back by itself after the
/// server restarts.
///
/// ```no_run
/// # async fn demo() -> Result<(), event_base_core::CoreError> {
/// use event_base_postgres::PostgresQueueFactory;
/// let queue = PostgresQueueFactory::connect("postgres://postgres@127.0.0.1:5432/postgres").await?;
/// let bus = event_base_core::EventBus::builder()
///     .wal(queue.wal())
///     .queue(queue)
///     .build()
///     .await?;
/// # drop(bus); Ok(()) }
/// ```
///
/// Clones share everything (connections, settings, counts): keep one to read
/// [`statements`](Self::statements) after handing another to a bus.
#[derive(Clone)]
pub struct PostgresQueueFactory {
    shared: Arc<Shared>,
    local: FlumeQueueFactory,
    routes: OnceLock<Arc<PgRoutes>>,
}

impl std::fmt::Debug for PostgresQueueFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresQueueFactory")
            .field("owner", &self.shared.owner)
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}

impl PostgresQueueFactory {
    /// A factory for the database at `url` (`postgres://user:password@host:port/database`,
    /// or the `key=value` form), connecting when first used: it can be made outside a
    /// runtime. Errors: only a URL that does not parse ([`PostgresError::BadUrl`]).
    pub fn open(url: &str) -> Result<PostgresQueueFactory, PostgresError> {
        let config = parse_url(url)?;
        let settings = Settings {
            bound: DEFAULT_BOUND,
            visibility: DEFAULT_VISIBILITY_TIMEOUT,
            max_deliveries: DEFAULT_MAX_DELIVERIES,
        };
        Ok(PostgresQueueFactory {
            shared: Arc::new(Shared::new(config, settings)),
            local: FlumeQueueFactory::bounded(DEFAULT_BOUND),
            routes: OnceLock::new(),
        })
    }

    /// [`open`](Self::open), then connects once: the server is reachable, accepts the
    /// login, and event_base's tables are created or upgraded (a database made by a newer
    /// event_base is refused with [`PostgresError::SchemaTooNew`]).
    pub async fn connect(url: &str) -> Result<PostgresQueueFactory, PostgresError> {
        let factory = PostgresQueueFactory::open(url)?;
        factory.shared.claims.conn().await?;
        crate::queue::tasks::start(&factory.shared);
        Ok(factory)
    }

    fn with_settings(self, change: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = self.shared.settings.clone();
        change(&mut settings);
        PostgresQueueFactory {
            shared: Arc::new(Shared::new(self.shared.config.clone(), settings)),
            local: self.local,
            routes: OnceLock::new(),
        }
    }

    /// Rows a subscription holds (queued or being handled) before `send` waits and
    /// `try_send` hands the message back (default [`DEFAULT_BOUND`]; at least 1). The count
    /// is this process's, read again from the table every 1,024 sends and while full, so
    /// across processes it is a soft limit. Set before the factory is used.
    pub fn bound(self, n: usize) -> Self {
        self.with_settings(|s| s.bound = n.max(1))
    }

    /// How long a claimed row's lease lasts (default [`DEFAULT_VISIBILITY_TIMEOUT`],
    /// at least 100 ms). A process renews the leases of what it holds every third of it;
    /// every half of it, each process frees the claims whose lease ran out, which any
    /// consumer then claims again: a dead process's rows are delivered again within about
    /// 1.5 times this. Set before the factory is used.
    pub fn visibility_timeout(self, d: Duration) -> Self {
        self.with_settings(|s| s.visibility = d.clamp(Duration::from_millis(100), MAX_WAIT))
    }

    /// How many deliveries a row gets at most (default [`DEFAULT_MAX_DELIVERIES`]; at least
    /// 1): once when first claimed, once more each time it is claimed again after its
    /// holder's lease ran out. One more would dead-letter it instead, with a reason that says
    /// so. Retries (`Ack::NoAck`) do not count: the bus's `max_retries` handles those.
    pub fn max_deliveries(self, n: u32) -> Self {
        self.with_settings(|s| s.max_deliveries = n.max(1))
    }

    /// Statements this factory has run on PostgreSQL so far (each one round trip): sends,
    /// acks and dead letters in the writer's transactions (with their `BEGIN` and
    /// `COMMIT`), claims, lease renewals, reads. Divided by the messages handled, what a
    /// message costs the server; the listener's `LISTEN` is not counted.
    pub fn statements(&self) -> u64 {
        self.shared
            .statements
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The WAL over this factory's tables ([`PostgresQueueWal`]): the rows are the log, dead
    /// letters go to `event_base_dead_letters` through the same writer, ahead of the ack of
    /// their row.
    pub fn wal(&self) -> PostgresQueueWal {
        PostgresQueueWal::new(self.shared.clone())
    }

    /// Sends `message` inside the application's own transaction (or on its client):
    /// a copy for every subscription of its topic recorded on the database, visible to the
    /// handlers only if `client`'s transaction commits — a rollback leaves no trace, and the
    /// consumers are woken at the commit. The bus's WAL and dedup window are not involved:
    /// the rows are the record (the same message sent twice is two copies).
    ///
    /// A `Broadcast` message gets a copy for each process consuming each subscription, as
    /// from a bus.
    ///
    /// Errors: [`PostgresError::NoSubscription`] when no process ever started a handler of
    /// the topic on this database (the statement then changed nothing);
    /// [`PostgresError::AddressedInTransaction`] for a message addressed to a worker of one
    /// process (`to_worker: "<node>/<worker>"`), which only a bus resolves; a failed
    /// statement.
    ///
    /// ```no_run
    /// # async fn demo(queue: &event_base_postgres::PostgresQueueFactory,
    /// #               client: &mut tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// use event_base_core::EMessage;
    /// let tx = client.transaction().await?;
    /// tx.execute("INSERT INTO orders (id) VALUES ($1)", &[&42_i64]).await?;
    /// queue.send_in(&tx, EMessage::standard("order.created", "42")).await?;
    /// tx.commit().await?; // the order and its event, or neither
    /// # Ok(()) }
    /// ```
    pub async fn send_in<C: GenericClient>(
        &self,
        client: &C,
        message: EMessage,
    ) -> Result<MessageId, PostgresError> {
        if let Some(to_worker) = message
            .to_worker
            .as_deref()
            .filter(|w| node_and_worker(w).is_some())
        {
            return Err(PostgresError::AddressedInTransaction {
                to_worker: to_worker.to_owned(),
            });
        }
        let broadcast =
            message.to_worker.is_none() && message.delivery_mode == DeliveryMode::Broadcast;
        let topic = message.topic.as_str().to_owned();
        let (json, payload) = codec::columns(&message);
        let id = message.id.to_string();
        let key = ordering_key(&message).map(str::to_owned);
        let due = message
            .deliver_at
            .unwrap_or(SystemTime::UNIX_EPOCH)
            .max(SystemTime::UNIX_EPOCH);
        let rows = client
            .query(
                INSERT_FOR_TOPIC,
                &[&topic, &id, &key, &due, &json, &payload, &broadcast],
            )
            .await
            .map_err(PostgresError::statement(
                "a send inside the caller's transaction",
            ))?;
        if rows.is_empty() {
            return Err(PostgresError::NoSubscription { topic });
        }
        Ok(MessageId::from(&message.id))
    }

    /// This process's id in the database's records (`<pid>-<8 hex digits>`, new with each
    /// factory): what `EventBus::nodes` lists as a node's id, and the node part of a
    /// `to_worker: "<node id>/<worker>"` (a node's name serves too, if it is unique).
    pub fn node_id(&self) -> &str {
        &self.shared.owner
    }

    /// The subscription `handler` of `topic`, consumed here: recorded for every process,
    /// and as one this process consumes (its lane gets broadcasts from now on).
    fn subscription(&self, topic: &MessageTopic, handler: &str) -> TopicQueue {
        let q = SubQueue::new(self.shared.clone(), topic.as_str(), handler);
        let _ = self.shared.ops.send(Op::Register {
            subscription: q.name.clone(),
            topic: topic.as_str().to_owned(),
            handler: handler.to_owned(),
        });
        {
            let mut record = self.shared.record();
            if !record.subscriptions.iter().any(|s| **s == *q.name) {
                record.subscriptions.push(q.name.to_string());
            }
        }
        let _ = self.shared.ops.send(Op::Enlist {
            id: self.shared.owner.clone(),
            name: self.shared.node_name(),
            pid: crate::queue::shared::pid(),
            subscription: q.name.to_string(),
        });
        TopicQueue {
            producer: Arc::new(PgProducer::new(q.clone())),
            consumer: Arc::new(PgConsumer::new(q)),
        }
    }
}

/// The handler name `create` (without one) uses: its rows are shared by every `create` of
/// the topic on the database.
const NO_HANDLER: &str = "queue";

impl QueueFactory for PostgresQueueFactory {
    fn create(&self, topic: &MessageTopic) -> Result<TopicQueue, QueueError> {
        self.create_subscription(topic, NO_HANDLER)
    }

    fn create_subscription(
        &self,
        topic: &MessageTopic,
        handler: &str,
    ) -> Result<TopicQueue, QueueError> {
        if topic.is_system() && !is_cluster_system_topic(topic.as_str()) {
            return self.local.create(topic);
        }
        Ok(self.subscription(topic, handler))
    }

    /// The subscriptions recorded on the database, cached in the process and read again
    /// when one is created anywhere.
    fn routes(&self) -> Option<Arc<dyn RemoteRoutes>> {
        let routes = self
            .routes
            .get_or_init(|| PgRoutes::start(self.shared.clone()));
        Some(routes.clone())
    }

    /// Every process running the handler shares its rate: one statement a start, on the
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
        let name = crate::queue::sql::subscription(topic.as_str(), handler);
        Some(Arc::new(PgRate::new(self.shared.clone(), name, rate)))
    }

    fn name(&self) -> &'static str {
        "postgres"
    }
}
