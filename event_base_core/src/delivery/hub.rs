//! [`DeliveryHub`]: what the send, route and settle paths of one running bus share, and
//! nothing else. The bus's record of its parts (`bus/shared.rs`) holds one; so do its
//! routers, workers and senders.
//!
//! The fields live here; the behaviours live where they belong, each an `impl DeliveryHub`
//! of its own: the send path in `send/accept.rs`, announcements on the bus's own topics in
//! `send/announce.rs`, final states in `settle/final_state.rs`, start-up replay in
//! `send/replay.rs`, the routes to other processes in `remote/`. The topic table is built
//! once by the builder and never changes while the bus runs, so the send path reads it
//! without a lock.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::backend::wal::Wal;
use crate::delivery::dedup::dedup_window::DedupWindow;
use crate::delivery::in_flight::InFlight;
use crate::delivery::remote::remote_table::RemoteTable;
use crate::delivery::send::message_pool::MessagePool;
use crate::delivery::send::scheduler::SchedulerHandle;
use crate::delivery::settle::fan_out::FanOuts;
use crate::delivery::subscription::topic_table::{Route, TopicTable};
use crate::observe::audit_log::AuditLog;

/// The state a message's path through one bus shares (see the module docs).
///
/// - `topics`: one [`Route`] per subscribed topic, with a subscription per handler (queue,
///   worker channels, counters).
/// - `fan_outs`: messages of topics with several handlers whose copies are not all final.
/// - `dedup`: ids completed within the dedup window, so a send of one is not delivered again.
/// - `in_flight`: accepted messages not yet final, the basis of `wait_idle` and `Drain`.
/// - `accepting`: cleared when shutdown begins; every send checks it. `stopping` wakes
///   whoever waits for that moment ([`EventBus::shutdown_started`](crate::EventBus::shutdown_started)),
///   and tells the shutdown when the routers that stop claiming then have ended.
pub(crate) struct DeliveryHub {
    pub(crate) wal: Arc<dyn Wal>,
    pub(crate) topics: TopicTable,
    /// Routes to the handlers other processes run, when the queue backend is shared.
    pub(crate) remote: Option<RemoteTable>,
    pub(crate) fan_outs: FanOuts,
    /// Ids completed within the dedup window (idempotent sends).
    pub(crate) dedup: DedupWindow,
    pub(crate) scheduler: SchedulerHandle,
    pub(crate) in_flight: Arc<InFlight>,
    pub(crate) accepting: AtomicBool,
    /// Who waits for `accepting` to be cleared, and who ends then.
    pub(crate) stopping: Stopping,
    /// The most entries a router claims at once from a shared queue.
    pub(crate) batch_size: usize,
    pub(crate) audit: AuditLog,
    /// Finished messages' allocations, for the next sends (`send/message_pool.rs`).
    pub(crate) pool: MessagePool,
    /// Whether a handler of this bus holds its sends in an outbox (`HandlerSpec::outbox`).
    /// Handlers are fixed at build, and an outbox only holds sends to its own bus, so without
    /// one no send needs to look for one.
    pub(crate) outboxes: bool,
}

/// The moment a bus begins to shut down (`accepting` cleared), as the rest of it sees it.
#[derive(Debug, Default)]
pub(crate) struct Stopping {
    /// Notified (all waiters) when `accepting` is cleared.
    pub(crate) began: tokio::sync::Notify,
    /// Subscribed to by each router that stops claiming then (that of a user's handler on a
    /// shared queue), for as long as it runs: `closed()` once all have ended
    /// (`subscription/consumer_router.rs`).
    pub(crate) claimers: tokio::sync::watch::Sender<()>,
}

impl DeliveryHub {
    pub(crate) fn topic(&self, name: &str) -> Option<&Arc<Route>> {
        self.topics.get(name)
    }

    /// Refuses every send from now on and wakes whoever waits for shutdown to begin.
    /// Sequentially consistent, as the send path's check is: a send counts itself in flight,
    /// then checks; a shutdown clears the flag, then reads what is in flight (see
    /// `DeliveryHub::accept`), so one always sees the other.
    pub(crate) fn stop_accepting(&self) {
        self.accepting
            .store(false, std::sync::atomic::Ordering::SeqCst);
        self.stopping.began.notify_waiters();
    }

    /// Waits until the bus refuses sends (at once if it already does).
    pub(crate) async fn stopped_accepting(&self) {
        let notified = self.stopping.began.notified();
        tokio::pin!(notified);
        // Registered before the flag is read, so a clear in between is not missed.
        notified.as_mut().enable();
        if !self.is_accepting() {
            return;
        }
        notified.await;
    }

    /// Whether the bus still accepts sends (shutdown has not begun).
    pub(crate) fn is_accepting(&self) -> bool {
        self.accepting.load(std::sync::atomic::Ordering::Acquire)
    }
}
