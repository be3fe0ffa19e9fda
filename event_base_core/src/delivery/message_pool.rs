//! [`MessagePool`]: the allocations of finished messages, kept to carry the next sends.
//!
//! An accepted message lives in one `Arc<EMessage>` that the WAL and the queues share. The
//! worker that finishes it usually holds the last reference. Freed there, that allocation
//! (made by the sending thread) takes the allocator's slow path on both threads: the worker
//! frees memory another thread allocated, and the sender, whose own free lists never get it
//! back, allocates from the shared arena every time. Instead, the worker puts the `Arc` here
//! and the next send moves its message into it; the message it held is dropped then, on the
//! sending thread, where its id and topic strings were allocated.
//!
//! Nobody can see an allocation reused: only an `Arc` with no other reference (strong or
//! weak) goes in, and only this pool holds it until a send takes it. Its payload is released
//! when it goes in, so a kept allocation keeps no payload's memory alive. The pool is
//! bounded ([`KEPT`] messages of about 400 bytes with their id and topic: some 400 KiB a bus
//! at most), and neither side ever waits for it: when its lock is busy, or it is empty or
//! full, a message is allocated or freed as it would be without it. The bound is that large
//! because sends and completions come in bursts (a sender woken after a full queue had room
//! sends as many as the workers finished meanwhile, hundreds on a loaded machine).

use std::sync::{Arc, Mutex};

use crate::message::emessage::EMessage;
use crate::message::payload::MessagePayload;

/// How many finished messages' allocations a bus keeps at most.
pub(crate) const KEPT: usize = 1024;

/// Finished messages' allocations, for the next sends (see the module docs).
#[derive(Debug)]
pub(crate) struct MessagePool {
    kept: Mutex<Vec<Arc<EMessage>>>,
}

impl Default for MessagePool {
    fn default() -> Self {
        MessagePool {
            kept: Mutex::new(Vec::with_capacity(KEPT)),
        }
    }
}

impl MessagePool {
    /// `message` in an `Arc`: a kept allocation if there is one at hand, a new one otherwise.
    #[inline]
    pub(crate) fn wrap(&self, message: EMessage) -> Arc<EMessage> {
        if let Some(mut kept) = self.take() {
            if let Some(slot) = Arc::get_mut(&mut kept) {
                // The finished message it held is dropped here, on the sending thread.
                *slot = message;
                return kept;
            }
        }
        Arc::new(message)
    }

    fn take(&self) -> Option<Arc<EMessage>> {
        self.kept.try_lock().ok()?.pop()
    }

    /// Keeps the allocation of a finished `message` for a later send, if nothing else refers
    /// to it and the pool has room; otherwise it is dropped as usual.
    #[inline]
    pub(crate) fn recycle(&self, mut message: Arc<EMessage>) {
        let Some(finished) = Arc::get_mut(&mut message) else {
            return;
        };
        finished.payload = MessagePayload::default();
        if let Ok(mut kept) = self.kept.try_lock() {
            if kept.len() < KEPT {
                kept.push(message);
            }
        }
    }

    /// How many allocations the pool holds now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.kept.lock().map_or(0, |k| k.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn message(payload: &Bytes) -> EMessage {
        EMessage::standard("orders", payload.clone())
    }

    #[test]
    fn a_finished_message_carries_the_next_one_and_lets_go_of_its_payload() {
        let pool = MessagePool::default();
        let payload = Bytes::from(vec![7u8; 64]);
        let first = pool.wrap(message(&payload));
        let at = Arc::as_ptr(&first);
        let first_id = first.id.clone();
        pool.recycle(first);
        assert_eq!(pool.len(), 1);
        // The kept allocation no longer holds the payload.
        assert!(
            payload.is_unique(),
            "the recycled message let go of its payload"
        );
        let second = pool.wrap(message(&payload));
        assert_eq!(Arc::as_ptr(&second), at, "the same allocation");
        assert_ne!(second.id, first_id, "holding the new message");
        assert_eq!(second.payload.0, payload);
        assert_eq!(pool.len(), 0);
    }

    #[test]
    fn a_message_still_shared_is_not_kept() {
        let pool = MessagePool::default();
        let payload = Bytes::from_static(b"x");
        let shared = pool.wrap(message(&payload));
        let other = shared.clone();
        pool.recycle(shared);
        assert_eq!(pool.len(), 0, "another reference exists");
        let weak = Arc::downgrade(&other);
        pool.recycle(other);
        assert_eq!(pool.len(), 0, "a weak reference exists");
        assert!(weak.upgrade().is_none(), "dropped as usual");
    }

    #[test]
    fn the_pool_keeps_at_most_its_bound() {
        let pool = MessagePool::default();
        let payload = Bytes::from_static(b"x");
        for _ in 0..KEPT + 10 {
            pool.recycle(Arc::new(message(&payload)));
        }
        assert_eq!(pool.len(), KEPT);
        // And hands out what it holds before allocating anew.
        for _ in 0..KEPT {
            drop(pool.wrap(message(&payload)));
        }
        assert_eq!(pool.len(), 0);
    }
}
