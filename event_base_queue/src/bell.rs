//! [`Bell`]: the producer's side of a queue's bell ([`EConsumer::bell`]).
//!
//! [`EConsumer::bell`]: event_base_core::backend::EConsumer::bell

use std::sync::Arc;

use tokio::sync::Notify;

/// Rung after each message a producer sends; rings every waiter when the producer goes, so
/// parked workers and waiting claims look again and find the queue closed. Hold it after
/// the channel's sender in the producer, so the sender is dropped first.
pub(crate) struct Bell(Arc<Notify>);

impl Bell {
    /// A bell, and the `Notify` the consumer listens on.
    pub(crate) fn new() -> (Bell, Arc<Notify>) {
        let notify = Arc::new(Notify::new());
        (Bell(notify.clone()), notify)
    }

    /// A message was sent: wakes one listener (or keeps the ring for the next).
    #[inline]
    pub(crate) fn ring(&self) {
        self.0.notify_one();
    }
}

impl Drop for Bell {
    fn drop(&mut self) {
        self.0.notify_waiters();
    }
}
