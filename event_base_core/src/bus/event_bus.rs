//! [`EventBus`]: a running system, and the handle to observe and stop it.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::wal::{Wal, WalStats};
use crate::bus::global;
use crate::bus::shared::BusShared;
use crate::bus::tasks::BusTasks;
use crate::delivery::topic_router::TopicRouter;
use crate::error::CoreError;
use crate::message::dead_letter::DeadLetterMessage;
use crate::message::emessage::{EMessage, IntoMessage};
use crate::message::id::MessageId;
use crate::observe::audit_log::AuditLog;
use crate::observe::metrics_manager::MetricsManager;
use crate::observe::metrics_store::MetricsStore;
use crate::observe::snapshot::MetricsSnapshot;
use crate::shutdown::strategy::{ShutdownReport, ShutdownStrategy};
use crate::worker::registry::WorkerRegistry;

/// A running system: its topics, workers, WAL and queues.
///
/// Built with [`EventBus::builder`] (isolated systems, as many as you like in one process) or
/// by `start_system!` (which also installs it as the global default behind
/// [`TopicRouter::global`]). Clones are handles to the same system. An isolated system stops
/// when its last handle is dropped; the global one runs until [`EventBus::shutdown`].
#[derive(Clone)]
pub struct EventBus {
    pub(crate) shared: Arc<BusShared>,
    pub(crate) tasks: Arc<BusTasks>,
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBus")
            .field("topics", &self.router().topics())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl EventBus {
    /// The global system, if `start_system!` (or [`EventBus::install_global`]) installed one.
    pub fn global() -> Option<EventBus> {
        global::bus().map(|tasks| EventBus {
            shared: tasks.shared.clone(),
            tasks,
        })
    }

    /// Makes this system the global default behind [`TopicRouter::global`] and `send_msg!`.
    /// Fails with [`CoreError::AlreadyStarted`] while another global system runs.
    pub fn install_global(&self) -> Result<(), CoreError> {
        global::install(&self.tasks)
    }

    /// Whether `TopicRouter::global()` currently points at a running system.
    pub fn global_is_running() -> bool {
        global::router_shared().is_some()
    }

    /// The router to send into this system.
    pub fn router(&self) -> TopicRouter {
        TopicRouter::for_system(self.shared.clone())
    }

    /// Sends a message or payload to `topic`, waiting for room in its queue.
    ///
    /// Shorthand for `router().send(topic, msg, None, None)`.
    pub async fn send(
        &self,
        topic: impl AsRef<str>,
        message: impl IntoMessage,
    ) -> Result<MessageId, CoreError> {
        self.router().publish(topic, message).await
    }

    /// Sends many messages with one WAL commit (see [`TopicRouter::send_batch`]).
    pub async fn send_batch(
        &self,
        topic: impl AsRef<str>,
        messages: Vec<EMessage>,
    ) -> Result<Vec<MessageId>, CoreError> {
        self.router().send_batch(topic, messages).await
    }

    /// Sends with explicit `try_send` / `timeout` (see [`TopicRouter::send`]).
    pub async fn send_with(
        &self,
        topic: impl AsRef<str>,
        message: EMessage,
        try_send: Option<bool>,
        timeout: Option<Duration>,
    ) -> Result<MessageId, CoreError> {
        self.router().send(topic, message, try_send, timeout).await
    }

    /// Waits until every accepted message has reached a final state (complete or dead
    /// letter), including retries and delayed messages. Fails with [`CoreError::Timeout`]
    /// (saying how many are still in flight) after `timeout`.
    pub async fn wait_idle(&self, timeout: Duration) -> Result<(), CoreError> {
        self.shared.in_flight.wait_idle(timeout).await
    }

    /// Accepted messages not yet in a final state.
    pub fn in_flight(&self) -> u64 {
        self.shared.in_flight.get()
    }

    /// Every dead letter the WAL holds.
    pub async fn dead_letters(&self) -> Result<Vec<DeadLetterMessage>, CoreError> {
        Ok(self.shared.wal.dead_letters().await?)
    }

    /// Sends a dead letter again, with `attempts` reset, and removes it from the dead letters.
    pub async fn replay_dead_letter(&self, id: &str) -> Result<MessageId, CoreError> {
        let dead = self
            .shared
            .wal
            .dead_letters()
            .await?
            .into_iter()
            .find(|d| d.message.id == id)
            .ok_or_else(|| CoreError::NotFound(id.to_owned()))?;
        let mut message = dead.message;
        message.attempts = 0;
        message.deliver_at = None;
        let topic = message.topic.0.clone();
        // Appending the same id replaces the dead letter with a live record.
        self.shared
            .send_internal(&topic, message, false, None)
            .await
    }

    /// Replays every dead letter; returns the ids sent again.
    pub async fn replay_dead_letters(&self) -> Result<Vec<MessageId>, CoreError> {
        let mut ids = Vec::new();
        for dead in self.shared.wal.dead_letters().await? {
            ids.push(self.replay_dead_letter(&dead.message.id).await?);
        }
        Ok(ids)
    }

    /// Removes every dead letter; returns how many.
    pub async fn purge_dead_letters(&self) -> Result<usize, CoreError> {
        Ok(self.shared.wal.purge_dead_letters().await?)
    }

    /// Names of the workers of `topic`.
    pub fn workers(&self, topic: &str) -> Vec<String> {
        self.shared.registry.names_for(topic)
    }

    /// This bus's node name (see [`node_name`](crate::node_name)).
    pub fn node_name(&self) -> &str {
        &self.shared.node.name
    }

    /// This bus's node type.
    pub fn node_type(&self) -> crate::NodeType {
        self.shared.node.kind
    }

    /// The worker registry.
    pub fn registry(&self) -> &WorkerRegistry {
        &self.shared.registry
    }

    /// Every counter now: per topic (sent, handled, acked, retried, dead, in flight, queue
    /// depth, latency percentiles), per worker, and for the node.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics_store().snapshot()
    }

    /// The live metrics, for snapshots without a bus handle.
    pub fn metrics_store(&self) -> MetricsStore {
        MetricsStore {
            shared: self.shared.clone(),
        }
    }

    /// The exporter to the `metrics` facade (feature `metrics`).
    pub fn metrics_manager(&self) -> MetricsManager {
        MetricsManager::new(Arc::new(self.metrics_store()))
    }

    /// The audit log (empty unless the builder turned auditing on).
    pub fn audit(&self) -> &AuditLog {
        &self.shared.audit
    }

    /// The WAL.
    pub fn wal(&self) -> &Arc<dyn Wal> {
        &self.shared.wal
    }

    /// The WAL's counters.
    pub fn wal_stats(&self) -> WalStats {
        self.shared.wal.stats()
    }

    /// Whether the system still accepts sends.
    pub fn is_accepting(&self) -> bool {
        self.shared.is_accepting()
    }

    /// Stops the system (or, with `Graceful`, one worker) with `strategy`; see
    /// [`ShutdownStrategy`] for what each does with queued and in-flight messages. Unfinished
    /// messages stay in the WAL for the next start.
    pub async fn shutdown(&self, strategy: ShutdownStrategy) -> Result<ShutdownReport, CoreError> {
        crate::shutdown::coordinator::shutdown(&self.tasks, strategy).await
    }

    /// Waits for SIGINT (Ctrl-C) or SIGTERM, then shuts down with `strategy`.
    ///
    /// The signal handlers are installed when this is called, before the returned future is
    /// first polled, so a signal that arrives in between is not missed.
    ///
    /// ```no_run
    /// # async fn run(bus: event_base_core::EventBus) -> Result<(), event_base_core::CoreError> {
    /// use event_base_core::ShutdownStrategy;
    /// use std::time::Duration;
    /// let report = bus
    ///     .run_until_signal(ShutdownStrategy::Drain { timeout: Duration::from_secs(10) })?
    ///     .await?;
    /// println!("{} messages left for the next start", report.left_for_replay);
    /// # Ok(()) }
    /// ```
    pub fn run_until_signal(
        &self,
        strategy: ShutdownStrategy,
    ) -> Result<
        impl std::future::Future<Output = Result<ShutdownReport, CoreError>> + Send + 'static,
        CoreError,
    > {
        let signal = crate::shutdown::signal::ShutdownSignal::install()?;
        let bus = self.clone();
        Ok(async move {
            let which = signal.recv().await;
            tracing::info!(signal = which, "signal received; shutting down");
            bus.shutdown(strategy).await
        })
    }

    /// Starts `n` more workers for the handler called `handler` (scale up); returns their
    /// names.
    pub async fn add_workers(&self, handler: &str, n: usize) -> Result<Vec<String>, CoreError> {
        if !self.is_accepting() {
            return Err(CoreError::SystemShutdown);
        }
        let runtime = self
            .tasks
            .handlers
            .get(handler)
            .cloned()
            .ok_or_else(|| CoreError::Config(format!("no handler named `{handler}`")))?;
        let mut names = Vec::with_capacity(n);
        for _ in 0..n {
            let state = self.tasks.spawn_worker(&runtime)?;
            self.shared
                .announce_worker(
                    crate::system_topics::discovery::DiscoveryEvent::Joined,
                    &state,
                )
                .await;
            names.push(state.name.clone());
        }
        Ok(names)
    }

    /// Stops one worker once it has finished its current message (scale down); the same as
    /// `shutdown(ShutdownStrategy::Graceful { .. })`.
    pub async fn remove_worker(&self, name: &str) -> Result<ShutdownReport, CoreError> {
        self.shutdown(ShutdownStrategy::Graceful {
            worker_name: name.to_owned(),
            poll_interval: Duration::from_secs(1),
        })
        .await
    }
}
