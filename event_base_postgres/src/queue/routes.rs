//! [`PgRoutes`]: the handlers of every process on the database, from
//! `event_base_subscriptions`, so a bus sends to topics only other processes handle, and to
//! the handlers of its own topics that only other processes run.
//!
//! The whole table is read into the cache when the listener connects and again after a
//! subscription was created anywhere (a notification on the routes channel, see
//! `listener.rs`): nothing is read while nothing changes. A miss reads its topic at most once
//! a second. A subscription stays recorded when its processes stop: its messages wait in its
//! rows until a process runs the handler again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use async_trait::async_trait;
use event_base_core::backend::{
    EProducer, EvictedListener, NodeRecord, NodeWorker, Outstanding, RemoteRoutes, RevivedListener,
    RoutesListener,
};
use event_base_core::{MessageTopic, NodeType, QueueError};
use tokio::time::Instant;

use crate::error::PostgresError;
use crate::queue::producer::PgProducer;
use crate::queue::shared::{pid, Shared};
use crate::queue::sub_queue::SubQueue;
use crate::queue::writer::Op;

/// A topic looked up is not looked up again within this.
const LOOK_UP_AT_MOST_EVERY: Duration = Duration::from_secs(1);

/// The routes of a factory (see the module docs).
pub(crate) struct PgRoutes {
    shared: Arc<Shared>,
    handlers: Mutex<HashMap<String, Vec<Arc<str>>>>,
    looked_up: Mutex<HashMap<String, Instant>>,
    listeners: Mutex<Vec<RoutesListener>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl PgRoutes {
    /// The routes, following the table from now on.
    pub(crate) fn start(shared: Arc<Shared>) -> Arc<PgRoutes> {
        let routes = Arc::new(PgRoutes {
            shared,
            handlers: Mutex::new(HashMap::new()),
            looked_up: Mutex::new(HashMap::new()),
            listeners: Mutex::new(Vec::new()),
        });
        if tokio::runtime::Handle::try_current().is_ok() {
            crate::queue::tasks::start(&routes.shared);
            tokio::spawn(follow(Arc::downgrade(&routes)));
        }
        routes
    }

    /// Reads the whole table into the cache and tells the listeners.
    async fn refresh(&self) -> Result<(), PostgresError> {
        let conn = self.shared.claims.conn().await?;
        conn.ran(1);
        let rows = conn
            .client
            .query(&conn.st.all_subscriptions, &[])
            .await
            .map_err(PostgresError::statement("the read of the subscriptions"))?;
        let mut all: HashMap<String, Vec<Arc<str>>> = HashMap::new();
        for r in &rows {
            all.entry(r.get::<_, String>(0))
                .or_default()
                .push(Arc::from(r.get::<_, &str>(1)));
        }
        *lock(&self.handlers) = all;
        self.tell();
        Ok(())
    }

    fn tell(&self) {
        lock(&self.listeners).retain(|l| l());
    }
}

/// Refreshes the cache each time the routes change, until the routes are gone.
async fn follow(routes: Weak<PgRoutes>) {
    loop {
        let Some(r) = routes.upgrade() else { return };
        let shared = r.shared.clone();
        drop(r);
        let mut stop = shared.stop.subscribe();
        tokio::select! {
            () = shared.routes_stale.notified() => {}
            _ = stop.changed() => return,
        }
        let Some(r) = routes.upgrade() else { return };
        if let Err(e) = r.refresh().await {
            tracing::warn!(target: "event_base::postgres", error = %e, "could not read the subscriptions; trying again");
            tokio::time::sleep(Duration::from_millis(500)).await;
            shared.routes_changed();
        }
    }
}

#[async_trait]
impl RemoteRoutes for PgRoutes {
    fn handlers_of(&self, topic: &str) -> Vec<Arc<str>> {
        lock(&self.handlers).get(topic).cloned().unwrap_or_default()
    }

    async fn look_up(&self, topic: &str) -> Result<Vec<Arc<str>>, QueueError> {
        // Rate-limited from the end of the last look-up: sends that miss while one runs
        // look up too, rather than answer from a cache not yet filled.
        if lock(&self.looked_up)
            .get(topic)
            .is_some_and(|at| at.elapsed() < LOOK_UP_AT_MOST_EVERY)
        {
            return Ok(self.handlers_of(topic));
        }
        let conn = self.shared.claims.conn().await?;
        conn.ran(1);
        let rows = conn
            .client
            .query(&conn.st.handlers, &[&topic])
            .await
            .map_err(PostgresError::statement(
                "the look-up of a topic's handlers",
            ))?;
        let handlers: Vec<Arc<str>> = rows
            .iter()
            .map(|r| Arc::from(r.get::<_, &str>(0)))
            .collect();
        lock(&self.looked_up).insert(topic.to_owned(), Instant::now());
        let changed = {
            let mut all = lock(&self.handlers);
            let before = all.insert(topic.to_owned(), handlers.clone());
            before.as_ref() != Some(&handlers)
        };
        if changed {
            self.tell();
        }
        Ok(handlers)
    }

    fn producer(
        &self,
        topic: &MessageTopic,
        handler: &str,
    ) -> Result<Arc<dyn EProducer>, QueueError> {
        let q = SubQueue::new(self.shared.clone(), topic.as_str(), handler);
        Ok(Arc::new(PgProducer::new(q)))
    }

    /// Once this answers, every copy queued before it is committed (a barrier on the
    /// writer): a bus whose own WAL holds a record for handlers elsewhere lets it go only
    /// then.
    async fn flush(&self) -> Result<(), QueueError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.shared
            .ops
            .send(Op::Flush(tx))
            .map_err(|_| QueueError::Closed("the PostgreSQL queues' writer stopped".into()))?;
        rx.await
            .map_err(|_| QueueError::Closed("the PostgreSQL queues' writer stopped".into()))?
            .map(|_| ())
            .map_err(Into::into)
    }

    /// Records this process in `event_base_nodes`; the lease keeper beats for it from then
    /// on.
    fn describe_node(&self, name: &str, kind: NodeType) {
        let kind = serde_json::to_string(&kind).ok();
        *self.shared.node.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((name.to_owned(), kind.clone()));
        let _ = self.shared.ops.send(Op::Node {
            id: self.shared.owner.clone(),
            name: name.to_owned(),
            kind,
            pid: pid(),
            workers: None,
            subscriptions: None,
            answer: None,
        });
    }

    /// Records this process's live workers, committed when this answers.
    async fn list_workers(&self, node: &str, workers: Vec<NodeWorker>) -> Result<(), QueueError> {
        let kind = self.shared.described().and_then(|(_, kind)| kind);
        let workers =
            serde_json::to_string(&workers).map_err(|e| QueueError::Backend(Box::new(e)))?;
        {
            let mut record = self.shared.record();
            record.workers = Some(workers.clone());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.shared
            .ops
            .send(Op::Node {
                id: self.shared.owner.clone(),
                name: node.to_owned(),
                kind,
                pid: pid(),
                workers: Some(workers),
                subscriptions: None,
                answer: Some(tx),
            })
            .map_err(|_| QueueError::Closed("the PostgreSQL queues' writer stopped".into()))?;
        rx.await
            .map_err(|_| QueueError::Closed("the PostgreSQL queues' writer stopped".into()))??;
        self.shared.record().confirmed = true;
        Ok(())
    }

    /// What the rows of `subscriptions` (and of every process's lanes of them) hold, in one
    /// statement: `EventBus::wait_idle` waits for other processes' handlers too.
    async fn outstanding(
        &self,
        subscriptions: &[(MessageTopic, Arc<str>)],
    ) -> Result<Option<Outstanding>, QueueError> {
        let names: Vec<String> = subscriptions
            .iter()
            .map(|(topic, handler)| crate::queue::sql::subscription(topic.as_str(), handler))
            .collect();
        let conn = self.shared.claims.conn().await?;
        conn.ran(1);
        let row = conn
            .client
            .query_one(&conn.st.outstanding, &[&names])
            .await
            .map_err(PostgresError::statement(
                "the count of what the queues hold",
            ))?;
        let count = |i: usize| u64::try_from(row.get::<_, i64>(i)).unwrap_or(0);
        Ok(Some(Outstanding {
            queued: count(0),
            delayed: count(1),
        }))
    }

    /// The processes that beat within the visibility timeout (three beats), with their
    /// live workers.
    async fn nodes(&self) -> Result<Option<Vec<NodeRecord>>, QueueError> {
        let conn = self.shared.claims.conn().await?;
        conn.ran(1);
        let within = self.shared.settings.visibility.as_secs_f64() * 1000.0;
        let rows = conn
            .client
            .query(&conn.st.nodes, &[&within])
            .await
            .map_err(PostgresError::statement("the read of the nodes"))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let mut record = NodeRecord::new(row.get(0), row.get(4));
            record.name = row.get(1);
            record.kind = row
                .get::<_, Option<&str>>(2)
                .and_then(|k| serde_json::from_str(k).ok());
            record.pid = u32::try_from(row.get::<_, i32>(3)).ok();
            record.workers = serde_json::from_str(row.get(5)).unwrap_or_default();
            out.push(record);
        }
        Ok(Some(out))
    }

    fn on_refresh(&self, listener: RoutesListener) {
        lock(&self.listeners).push(listener);
    }

    /// Called with each process this one evicts (`lease.rs`): silent for the visibility
    /// timeout, with workers listed.
    fn on_evicted(&self, listener: EvictedListener) {
        self.shared.listeners().evicted.push(listener);
    }

    /// Called each time this process finds its record was deleted by another's eviction
    /// (its beat found none) and records itself again.
    fn on_revived(&self, listener: RevivedListener) {
        self.shared.listeners().revived.push(listener);
    }
}
