//! [`EventBus::cancel`]: a delayed message taken back before its time.
//!
//! Two steps, in this order: the scheduler drops the message's timers (so it does not go to
//! its queue when due), then the WAL withdraws its record ([`Wal::cancel`]), and waits until
//! that is durable, so that a restart before the due time does not replay it. The record
//! leaves the WAL the way a refused send's does: neither completed nor a dead letter.
//!
//! [`Wal::cancel`]: crate::backend::Wal::cancel

use crate::bus::event_bus::EventBus;
use crate::error::CoreError;

impl EventBus {
    /// Takes back the delayed message `id` (sent with a `deliver_at` or `with_delay`) before
    /// it is due: `Ok(true)` if it was waiting, and then it is never delivered, not after a
    /// restart either (its WAL record is withdrawn, durably, before this returns; it is not
    /// a dead letter). `Ok(false)` if no delayed message of this id waits in this bus: an
    /// unknown id, a message already due (queued or delivered), or one cancelled already.
    ///
    /// A message that is not delayed is not cancelled (`false`): it is queued, and a handler
    /// may have it. With a queue backend that keeps delayed messages itself (Redis), the
    /// message waits in the backend: it is taken back there, from every subscription of its
    /// topic (`EProducer::cancel_delayed`), so any node may cancel what any node sent, as
    /// long as it knows the topic's routes (it handles the topic, or has sent to it).
    ///
    /// ```
    /// use event_base_core::{handler_fn, Ack, EMessage, EventBus, HandlerSpec};
    /// use std::time::Duration;
    /// # async fn demo() -> Result<(), event_base_core::CoreError> {
    /// let bus = EventBus::builder()
    ///     .handler(HandlerSpec::new("remind", "remind", handler_fn(|_m: EMessage| async { Ack::Ack })))
    ///     .build()
    ///     .await?;
    /// let later = EMessage::standard("remind", b"call back".to_vec()).with_delay(Duration::from_secs(3600));
    /// let id = bus.send("remind", later).await?;
    /// assert!(bus.cancel(&id).await?);   // taken back
    /// assert!(!bus.cancel(&id).await?);  // nothing left to take back
    /// # Ok(()) }
    /// ```
    ///
    /// Cancel safety: once the first step ran the message is not delivered by this bus;
    /// dropped before the WAL's withdrawal is durable, a restart may still deliver it.
    pub async fn cancel(&self, id: &str) -> Result<bool, CoreError> {
        if !self.shared.delivery.scheduler.withdraw(id) {
            return self.cancel_kept_by_queues(id).await;
        }
        match self.shared.delivery.wal.cancel(id)? {
            Some(commit) => {
                // The message counted as in flight since its send; it is final now, and
                // no copy of it will end.
                self.shared.delivery.in_flight.done();
                self.shared.delivery.fan_outs.forget(id);
                commit.wait().await?;
                Ok(true)
            }
            None => {
                // Its record is not pending (a handler has it, or it is gone): it was
                // delivered or is being delivered after all.
                tracing::warn!(target: crate::constant::target::DELIVERY, id = %id, "cancel: the delayed message's WAL record is no longer pending; not cancelled");
                Ok(false)
            }
        }
    }

    /// A delayed message that waits in the queue backend (one that keeps delayed messages:
    /// Redis), not in this bus's scheduler: taken back from every subscription's queue
    /// that keeps them, this process's handlers' and those only other processes run.
    /// `true` if any held it. Such a queue is the log of its messages (with Redis, the WAL
    /// is a view of its streams), so nothing else is left to withdraw.
    async fn cancel_kept_by_queues(&self, id: &str) -> Result<bool, CoreError> {
        let mut producers = Vec::new();
        for (_, route) in self.shared.delivery.topics.iter() {
            producers.extend(route.subs.iter().map(|s| s.producer.clone()));
            producers.extend(route.elsewhere.subs().iter().map(|s| s.producer.clone()));
        }
        if let Some(remote) = &self.shared.delivery.remote {
            producers.extend(remote.producers());
        }
        let mut cancelled = false;
        for producer in producers.iter().filter(|p| p.keeps_delayed()) {
            cancelled |= producer.cancel_delayed(id).await?;
        }
        Ok(cancelled)
    }
}
