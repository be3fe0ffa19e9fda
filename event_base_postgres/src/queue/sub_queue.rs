//! [`SubQueue`]: one subscription as this process's producer and consumer of it see it:
//! its name in the table and its lane's (what only this process claims), whether every
//! message goes to the lanes (a cluster-wide system topic), this process's count of its
//! rows (the bound), the wake-up its consumers wait on, and whether its producers are all
//! gone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use event_base_core::backend::is_cluster_system_topic;
use tokio::sync::{watch, Notify};

use crate::queue::shared::{Shared, Wake};
use crate::queue::sql;

/// Sends between two reads of a subscription's count from the table.
const COUNT_EVERY: usize = 1_024;

/// One subscription (see the module docs).
pub(crate) struct SubQueue {
    pub(crate) shared: Arc<Shared>,
    pub(crate) topic: String,
    pub(crate) handler: String,
    /// `<topic>` U+001F `<handler>`: the rows' `subscription`.
    pub(crate) name: Arc<str>,
    /// `<name>` U+001F `<this process's id>`: the rows only this process claims.
    pub(crate) lane: Arc<str>,
    /// Every message goes to the lane of each process consuming the subscription (a
    /// cluster-wide system topic: `event_base_core::backend::CLUSTER_SYSTEM_TOPICS`).
    pub(crate) fan_out: bool,
    /// Rung when rows may have become claimable (a notification, an ack here).
    pub(crate) wake: Arc<Wake>,
    /// This process's count of the subscription's rows: +1 a send, -1 an ack, dead letter
    /// or cancel here, read again from the table every [`COUNT_EVERY`] sends and while full.
    len: AtomicUsize,
    since_count: AtomicUsize,
    /// Rung when the count went down.
    room: Notify,
    producers: AtomicUsize,
    closed: watch::Sender<bool>,
}

impl SubQueue {
    pub(crate) fn new(shared: Arc<Shared>, topic: &str, handler: &str) -> Arc<SubQueue> {
        let name: Arc<str> = sql::subscription(topic, handler).into();
        let wake = shared.wakes.register(&name);
        let lane = sql::lane(&name, &shared.owner).into();
        Arc::new(SubQueue {
            lane,
            fan_out: is_cluster_system_topic(topic),
            shared,
            topic: topic.to_owned(),
            handler: handler.to_owned(),
            name,
            wake,
            len: AtomicUsize::new(0),
            since_count: AtomicUsize::new(0),
            room: Notify::new(),
            producers: AtomicUsize::new(0),
            closed: watch::Sender::new(false),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Counts one more row if the bound allows.
    pub(crate) fn reserve(&self) -> bool {
        self.len
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.shared.settings.bound).then_some(n + 1)
            })
            .is_ok()
    }

    /// Counts `n` rows fewer (settled or withdrawn here).
    pub(crate) fn settled(&self, n: usize) {
        let _ = self
            .len
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |l| {
                Some(l.saturating_sub(n))
            });
        self.room.notify_waiters();
    }

    /// Whether it is time to read the count from the table (every [`COUNT_EVERY`] sends).
    /// Exactly one send in every [`COUNT_EVERY`] is told so.
    pub(crate) fn count_due(&self) -> bool {
        let before = self
            .since_count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(if n + 1 >= COUNT_EVERY { 0 } else { n + 1 })
            })
            .unwrap_or(0);
        before + 1 >= COUNT_EVERY
    }

    /// Reads the count from the table (rows other processes acked are then no longer
    /// counted).
    pub(crate) async fn recount(&self) {
        let Ok(conn) = self.shared.claims.conn().await else {
            return;
        };
        let name: &str = &self.name;
        conn.ran(1);
        if let Ok(row) = conn.client.query_one(&conn.st.count, &[&name]).await {
            let n: i64 = row.get(0);
            self.len
                .store(usize::try_from(n).unwrap_or(usize::MAX), Ordering::Release);
            self.room.notify_waiters();
        }
    }

    /// Waits until the count may have gone down, at most `at_most`.
    pub(crate) async fn room(&self, at_most: Duration) {
        let _ = tokio::time::timeout(at_most, self.room.notified()).await;
    }

    pub(crate) fn producer_made(&self) {
        self.producers.fetch_add(1, Ordering::AcqRel);
    }

    /// A producer was dropped: the last one closes the subscription here.
    pub(crate) fn producer_dropped(&self) {
        if self.producers.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.closed.send_replace(true);
            self.wake.bell.notify_waiters();
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }
}
