//! [`EventBus`]: a running system, and the handle to observe and stop it.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::backend::routes::NodeRecord;
use crate::backend::wal::{Wal, WalStats};
use crate::bus::global;
use crate::bus::observe::metrics_manager::MetricsManager;
use crate::bus::observe::metrics_store::MetricsStore;
use crate::bus::shared::BusShared;
use crate::bus::tasks::BusTasks;
use crate::delivery::send::topic_router::{routed, SendOptions, TopicRouter};
use crate::error::CoreError;
use crate::message::dead_letter::DeadLetterMessage;
use crate::message::emessage::{EMessage, TryIntoMessage};
use crate::message::id::MessageId;
use crate::message::json::Json;
use crate::observe::audit_log::AuditLog;
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
        crate::delivery::send::topic_router::default_hub().is_some()
    }

    /// The router to send into this system.
    pub fn router(&self) -> TopicRouter {
        TopicRouter::for_system(&self.shared.delivery)
    }

    /// Sends a message or payload to `topic`, waiting for room in its queue: anything
    /// [`TryIntoMessage`], i.e. every [`IntoMessage`](crate::IntoMessage) and `Json(&value)`.
    ///
    /// Shorthand for `router().send(topic, msg, None, None)`.
    ///
    /// Cancel safety: dropped before it finished, the message is withdrawn and never
    /// delivered (unless a handler already had it, in which case it is delivered as usual).
    pub async fn send(
        &self,
        topic: impl AsRef<str>,
        message: impl TryIntoMessage,
    ) -> Result<MessageId, CoreError> {
        let topic = topic.as_ref();
        let message = routed(&self.shared.delivery, topic, message)?;
        let (entry, message) = self.shared.delivery.admit(topic, message, true)?;
        self.shared
            .delivery
            .accept(entry, message, false, None)
            .await
    }

    /// Sends `value` encoded as JSON as a standard message, waiting for room: the sending side
    /// of a `Json<T>` handler parameter. A value that does not serialize is refused with
    /// [`CoreError::Encode`] before anything is written. The same as
    /// `send(topic, Json(value))`.
    ///
    /// ```
    /// use event_base_core::{Ack, EMessage, EventBus, HandlerSpec, Json, handler_fn};
    /// # async fn demo(bus: EventBus) -> Result<(), event_base_core::CoreError> {
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Order { id: u32 }
    /// bus.send_json("orders", &Order { id: 7 }).await?;
    /// bus.send("orders", Json(&Order { id: 8 })).await?; // the same
    /// # Ok(()) }
    /// ```
    ///
    /// Cancel safety: as [`send`](Self::send).
    pub async fn send_json<T: Serialize + ?Sized>(
        &self,
        topic: impl AsRef<str>,
        value: &T,
    ) -> Result<MessageId, CoreError> {
        self.send(topic, Json(value)).await
    }

    /// Sends many messages with one WAL commit (see [`TopicRouter::send_batch`]).
    ///
    /// Cancel safety: dropped before the commit is durable, the whole batch is withdrawn;
    /// dropped after, every message is still delivered (the queueing goes on in a task of
    /// its own).
    pub async fn send_batch(
        &self,
        topic: impl AsRef<str>,
        messages: Vec<EMessage>,
    ) -> Result<Vec<MessageId>, CoreError> {
        self.shared
            .delivery
            .send_batch(topic.as_ref(), messages)
            .await
    }

    /// Sends with [`SendOptions`] (fail at once on a full queue, or after a timeout); the
    /// positional form is [`TopicRouter::send`].
    ///
    /// Cancel safety: as [`send`](Self::send).
    pub async fn send_with(
        &self,
        topic: impl AsRef<str>,
        message: EMessage,
        options: SendOptions,
    ) -> Result<MessageId, CoreError> {
        let (entry, message) = self.shared.delivery.admit(topic.as_ref(), message, true)?;
        self.shared
            .delivery
            .accept(entry, message, options.try_send, options.timeout)
            .await
    }

    /// The handlers of `topic` that other processes run and a send from this bus reaches,
    /// as of the queue backend's last refresh of its registry (a shared backend, such as
    /// Redis; always empty with an in-process one). For a topic this bus has handlers of,
    /// the handlers it sends a copy to besides its own; for another, every handler the
    /// registry lists (a send to it is refused with [`CoreError::NoHandler`] only when the
    /// registry, looked up again, lists none). Sorted.
    pub fn handlers_elsewhere(&self, topic: &str) -> Vec<String> {
        self.shared.delivery.handlers_elsewhere(topic)
    }

    /// The processes sharing this bus's queue backend, this one included, as the backend's
    /// records of them say now (one read of the backend, not cached): for an operator's node
    /// list, such as the gRPC server's dashboard. `None` with a backend that keeps no record
    /// of processes (the in-process ones); the Redis backend lists every node in its set of
    /// nodes, silent ones too until they are evicted (see
    /// [`RemoteRoutes::nodes`](crate::backend::RemoteRoutes::nodes)).
    pub async fn nodes(&self) -> Result<Option<Vec<NodeRecord>>, CoreError> {
        match &self.shared.delivery.remote {
            Some(remote) => Ok(remote.provider.nodes().await?),
            None => Ok(None),
        }
    }

    /// Waits until every accepted message has reached a final state (complete or dead
    /// letter), including retries and delayed messages. Fails with [`CoreError::IdleTimeout`]
    /// (saying how many are still in flight) after `timeout`, and with
    /// [`CoreError::NoRuntime`] outside a tokio runtime. A `timeout` past
    /// [`MAX_WAIT`](crate::constant::MAX_WAIT) (30 years) is clamped to it: no limit, in
    /// practice.
    ///
    /// With a queue backend shared by several processes (Redis) it waits for two things:
    /// nothing held by this process ([`in_flight`](Self::in_flight): its sends in progress,
    /// its in-process queues, the entries it claimed and has not settled), and nothing left
    /// in the shared queues of the subscriptions this process has sent to, in any node
    /// (unclaimed, delayed, or claimed and unsettled), as far as the backend can tell
    /// ([`RemoteRoutes::outstanding`](crate::backend::RemoteRoutes::outstanding)). So after
    /// `send` ×N it returns once every handler on every node is done with them; those queues
    /// are read as a whole, so it also waits for what other processes sent to them. The
    /// shared half is polled (Redis has nothing to wait on), at most every 100 ms.
    ///
    /// Cancel safety: it only waits; dropping it changes nothing.
    pub async fn wait_idle(&self, timeout: Duration) -> Result<(), CoreError> {
        self.shared.wait_idle(timeout).await
    }

    /// What this process holds and has not finished: accepted messages of its in-process
    /// queues not yet in a final state, sends in progress, and entries it claimed from a
    /// shared queue (Redis) and has not settled. A copy a shared queue holds counts in the
    /// process that claims it, not in the sender's.
    pub fn in_flight(&self) -> u64 {
        self.shared.delivery.in_flight.get()
    }

    /// Every dead letter the WAL holds. Cancel safety: it only reads.
    pub async fn dead_letters(&self) -> Result<Vec<DeadLetterMessage>, CoreError> {
        Ok(self.shared.delivery.wal.dead_letters().await?)
    }

    /// Sends a dead letter again, with `attempts` reset, and removes it from the dead letters.
    ///
    /// Cancel safety: the dead letter is only gone once the message is queued. Dropped before
    /// (waiting for room in a full queue, say), or refused, the replay puts the dead letter
    /// back as it was; nothing stays in flight.
    ///
    /// With a shared backend (Redis), a dead letter addressed to a worker of a node
    /// (`to_worker: "<node id>/<worker>"`) goes to that worker of that node again, from any
    /// process; when that node does not run the handler now (stopped, evicted) the replay is
    /// refused with [`CoreError::UnknownWorker`] and the dead letter stays. A dead letter of
    /// a topic only other processes handle goes to the handlers there whose copy died (the
    /// registry's), from a process that runs none of them ([`CoreError::NoHandler`] if no
    /// process runs them now).
    pub async fn replay_dead_letter(&self, id: &str) -> Result<MessageId, CoreError> {
        let dead = self
            .shared
            .delivery
            .wal
            .dead_letters()
            .await?
            .into_iter()
            .find(|d| d.message.id == id)
            .ok_or_else(|| CoreError::NotFound(id.to_owned()))?;
        // Appending the same id replaces the dead letter with a live record; a refused or
        // dropped replay puts the dead letter back.
        self.shared.delivery.accept_replay(&dead).await
    }

    /// Replays every dead letter; returns the ids sent again.
    ///
    /// Cancel safety: dropped part-way, the letters already replayed stay replayed, the one
    /// being replayed is put back as a dead letter, and the rest are untouched.
    pub async fn replay_dead_letters(&self) -> Result<Vec<MessageId>, CoreError> {
        let mut ids = Vec::new();
        for dead in self.shared.delivery.wal.dead_letters().await? {
            ids.push(self.replay_dead_letter(&dead.message.id).await?);
        }
        Ok(ids)
    }

    /// [`replay_dead_letters`](Self::replay_dead_letters) at most `max_per_second` letters a
    /// second: letter `i` (from 0) is replayed no earlier than `i / max_per_second` seconds
    /// after the call, so a large backlog does not flood its handlers.
    ///
    /// `max_per_second` must be a finite number of at least one letter per
    /// [`MAX_WAIT`](crate::constant::MAX_WAIT) (30 years), about `1.06e-9`; anything else
    /// (`NaN`, infinite, zero, negative, `1e-300`) is refused with
    /// [`CoreError::InvalidParameter`] before any letter is replayed. A rate so high that
    /// its gap is under a nanosecond does not pace at all.
    ///
    /// Cancel safety: as [`replay_dead_letters`](Self::replay_dead_letters).
    pub async fn replay_dead_letters_paced(
        &self,
        max_per_second: f64,
    ) -> Result<Vec<MessageId>, CoreError> {
        let pace = crate::clock::Pace::per_second("max_per_second", max_per_second)?;
        let letters = self.shared.delivery.wal.dead_letters().await?;
        if letters.len() > 1 && tokio::runtime::Handle::try_current().is_err() {
            return Err(CoreError::NoRuntime);
        }
        let start = tokio::time::Instant::now();
        let mut ids = Vec::with_capacity(letters.len());
        for (i, dead) in letters.iter().enumerate() {
            if i > 0 {
                tokio::time::sleep_until(pace.due(start, i)).await;
            }
            ids.push(self.replay_dead_letter(&dead.message.id).await?);
        }
        Ok(ids)
    }

    /// Removes one dead letter for good (not replayed); returns it. Fails with
    /// [`CoreError::NotFound`] if there is no dead letter with that id. Cancel safety: it is
    /// one step; dropped, the dead letter is either gone or still there.
    pub async fn delete_dead_letter(&self, id: &str) -> Result<DeadLetterMessage, CoreError> {
        self.shared
            .delivery
            .wal
            .take_dead_letter(id)
            .await?
            .ok_or_else(|| CoreError::NotFound(id.to_owned()))
    }

    /// Removes every dead letter; returns how many. Cancel safety: dropped part-way, the ones
    /// removed so far are gone, the rest are kept.
    pub async fn purge_dead_letters(&self) -> Result<usize, CoreError> {
        Ok(self.shared.delivery.wal.purge_dead_letters().await?)
    }

    /// Names of the workers of `topic`.
    pub fn workers(&self, topic: &str) -> Vec<String> {
        self.shared.announcer.registry.names_for(topic)
    }

    /// This bus's node name (see [`node_name`](crate::node_name)).
    pub fn node_name(&self) -> &str {
        &self.shared.announcer.node.name
    }

    /// This bus's node type.
    pub fn node_type(&self) -> crate::NodeType {
        self.shared.announcer.node.kind
    }

    /// The worker registry.
    pub fn registry(&self) -> &WorkerRegistry {
        &self.shared.announcer.registry
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
        &self.shared.delivery.audit
    }

    /// The WAL.
    pub fn wal(&self) -> &Arc<dyn Wal> {
        &self.shared.delivery.wal
    }

    /// The WAL's counters.
    pub fn wal_stats(&self) -> WalStats {
        self.shared.delivery.wal.stats()
    }

    /// Whether the system still accepts sends.
    pub fn is_accepting(&self) -> bool {
        self.shared.delivery.is_accepting()
    }

    /// Resolves once the system refuses sends: a shutdown of the whole bus began (by
    /// [`shutdown`](Self::shutdown), a `_system.shutdown` message or a signal), its last
    /// handle was dropped, or its runtime ended. At once if that already happened. A
    /// `Graceful` shutdown of one worker does not count: the bus keeps accepting.
    ///
    /// For whoever must react to the start of a shutdown rather than its end: a health
    /// check that turns `NOT_SERVING`, a load balancer hook.
    ///
    /// ```
    /// # async fn demo(bus: event_base_core::EventBus) -> Result<(), event_base_core::CoreError> {
    /// let started = tokio::spawn({
    ///     let bus = bus.clone();
    ///     async move { bus.shutdown_started().await }
    /// });
    /// bus.shutdown(event_base_core::ShutdownStrategy::Force).await?;
    /// let _ = started.await; // resolved: the shutdown began
    /// assert!(!bus.is_accepting());
    /// # Ok(()) }
    /// ```
    ///
    /// Cancel safety: it only waits.
    pub async fn shutdown_started(&self) {
        self.shared.delivery.stopped_accepting().await
    }

    /// Stops the system (or, with `Graceful`, one worker) with `strategy`; see
    /// [`ShutdownStrategy`] for what each does with queued and in-flight messages. Unfinished
    /// messages stay in the WAL for the next start.
    ///
    /// One shutdown runs at a time: a concurrent caller waits for the running one, and once
    /// the bus has stopped every call returns that shutdown's report (whatever its own
    /// strategy). Cancel safety: dropped part-way, the shutdown stops where it was (sends stay
    /// refused once it began); the workers it was waiting for stay with the bus, and the next
    /// call carries on and stops them. Fails with [`CoreError::NoRuntime`] outside a tokio
    /// runtime.
    pub async fn shutdown(&self, strategy: ShutdownStrategy) -> Result<ShutdownReport, CoreError> {
        crate::bus::stop::coordinator::shutdown(&self.tasks, strategy).await
    }

    /// Ends the bus for good: shuts it down with `Drain` (30 s), unless a shutdown already ran,
    /// waits until every one of its tasks has ended, and lets go of this handle. Once the last
    /// handle of a bus is gone its WAL is released (a `PersistentWal` unlocks its directory);
    /// `TopicRouter`s do not keep it. Returns the shutdown's report.
    ///
    /// ```no_run
    /// # async fn demo(bus: event_base_core::EventBus) -> Result<(), event_base_core::CoreError> {
    /// let report = bus.close().await?;
    /// assert!(report.drained);
    /// # Ok(()) }
    /// ```
    ///
    /// Cancel safety: as [`shutdown`](Self::shutdown); the handle is dropped either way.
    pub async fn close(self) -> Result<ShutdownReport, CoreError> {
        self.shutdown(ShutdownStrategy::Drain {
            timeout: Duration::from_secs(30),
        })
        .await
    }

    /// Waits for SIGINT (Ctrl-C) or SIGTERM, then shuts down with `strategy`.
    ///
    /// The signal handlers are installed when this is called, before the returned future is
    /// first polled, so a signal that arrives in between is not missed. A second signal while
    /// the shutdown runs switches to [`ShutdownStrategy::Force`]. Cancel safety:
    /// dropped before a signal came, nothing happens (the bus runs on); after, as
    /// [`shutdown`](Self::shutdown). Needs the `signal`
    /// feature (on by default).
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
    #[cfg(feature = "signal")]
    #[cfg_attr(docsrs, doc(cfg(feature = "signal")))]
    pub fn run_until_signal(
        &self,
        strategy: ShutdownStrategy,
    ) -> Result<
        impl std::future::Future<Output = Result<ShutdownReport, CoreError>> + Send + 'static,
        CoreError,
    > {
        let signal = crate::bus::stop::signal::ShutdownSignal::install()?;
        let bus = self.clone();
        Ok(async move {
            let mut signal = signal;
            let which = signal.recv().await;
            tracing::info!(target: crate::constant::target::SHUTDOWN, signal = which, "signal received; shutting down");
            // A second signal while that shutdown runs forces, as servers and CLIs do: the
            // first one is dropped where it is (shutdown is cancel-safe), and Force stops what
            // it left.
            let finished = {
                let first = bus.shutdown(strategy);
                tokio::pin!(first);
                tokio::select! {
                    report = &mut first => Some(report),
                    again = signal.recv() => {
                        tracing::warn!(target: crate::constant::target::SHUTDOWN, signal = again, "second signal during shutdown; forcing");
                        None
                    }
                }
            };
            match finished {
                Some(report) => report,
                None => bus.shutdown(ShutdownStrategy::Force).await,
            }
        })
    }

    /// Starts `n` more workers for the handler called `handler` (scale up); returns their
    /// names. Cancel safety: dropped part-way, the workers started so far run (their
    /// announcement may be missing).
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
                .announcer
                .announce_worker(crate::worker::registry::DiscoveryEvent::Joined, &state)
                .await;
            names.push(state.name.clone());
        }
        Ok(names)
    }

    /// Stops one worker once it has finished its current message (scale down); the same as
    /// `shutdown(ShutdownStrategy::Graceful { .. })`, with its cancel safety.
    pub async fn remove_worker(&self, name: &str) -> Result<ShutdownReport, CoreError> {
        self.shutdown(ShutdownStrategy::Graceful {
            worker_name: name.to_owned(),
            poll_interval: Duration::from_secs(1),
        })
        .await
    }
}
