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
//! when it goes in, so a kept allocation keeps no payload's memory alive. Neither side ever
//! waits for the pool: when a lock is busy, or the pool is empty or full, a message is
//! allocated or freed as it would be without it.
//!
//! The pool has two sides, each a stack under a lock of its own on cache lines of its own:
//! workers put finished messages on the *returned* side, sends take them from the *ready*
//! side, and a send that finds the ready side empty swaps the two stacks (one lock of the
//! returned side for all the messages it held). So a send and a worker seldom take the same
//! lock, and the line a send takes stays on the sending core.
//!
//! Sends and completions come in bursts: a sender woken after its queue had room sends as
//! many as the workers finished meanwhile, up to a queue's bound (thousands). A pool smaller
//! than a burst hands most of it to the allocator again (with 1,024 kept, the memory path
//! reused an allocation for 19–39 % of its sends with the dedup window off). Each side keeps
//! up to [`KEPT`] messages: at most `2 × KEPT` allocations of about 400 bytes with their id
//! and topic, some 3 MiB a bus, which it keeps while idle once a burst has filled it.

use std::sync::{Arc, Mutex};

use crate::bus::cache_padded::CachePadded;
use crate::message::emessage::EMessage;
use crate::message::payload::MessagePayload;

/// How many finished messages' allocations each side of a bus's pool keeps at most.
pub(crate) const KEPT: usize = 4096;

/// Finished messages' allocations, for the next sends (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct MessagePool {
    /// What sends take from; refilled by swapping with `returned` when empty.
    ready: CachePadded<Mutex<Vec<Arc<EMessage>>>>,
    /// What workers put back.
    returned: CachePadded<Mutex<Vec<Arc<EMessage>>>>,
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
        let mut ready = self.ready.try_lock().ok()?;
        if let Some(kept) = ready.pop() {
            return Some(kept);
        }
        // Empty: take all the workers gave back at once, leaving them the empty stack.
        let mut returned = self.returned.try_lock().ok()?;
        std::mem::swap(&mut *ready, &mut *returned);
        drop(returned);
        ready.pop()
    }

    /// Keeps the allocation of a finished `message` for a later send, if nothing else refers
    /// to it and the pool has room; otherwise it is dropped as usual.
    #[inline]
    pub(crate) fn recycle(&self, mut message: Arc<EMessage>) {
        let Some(finished) = Arc::get_mut(&mut message) else {
            return;
        };
        finished.payload = MessagePayload::default();
        if let Ok(mut returned) = self.returned.try_lock() {
            if returned.len() < KEPT {
                returned.push(message);
            }
        }
    }

    /// How many allocations the pool holds now.
    #[cfg(test)]
    fn len(&self) -> usize {
        let side = |s: &Mutex<Vec<Arc<EMessage>>>| s.lock().map_or(0, |k| k.len());
        side(&self.ready) + side(&self.returned)
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

    #[test]
    fn a_send_takes_all_that_was_given_back_at_once_and_workers_go_on_giving() {
        let pool = MessagePool::default();
        let payload = Bytes::from_static(b"x");
        let given: Vec<*const EMessage> = (0..3)
            .map(|_| {
                let m = Arc::new(message(&payload));
                let at = Arc::as_ptr(&m);
                pool.recycle(m);
                at
            })
            .collect();
        // The first send finds the ready side empty and takes the returned stack whole.
        let first = pool.wrap(message(&payload));
        assert!(given.contains(&Arc::as_ptr(&first)));
        assert_eq!(pool.ready.lock().map_or(0, |r| r.len()), 2);
        assert_eq!(pool.returned.lock().map_or(9, |r| r.len()), 0);
        // Meanwhile the workers fill the returned side again, up to its own bound.
        for _ in 0..KEPT + 1 {
            pool.recycle(Arc::new(message(&payload)));
        }
        assert_eq!(
            pool.len(),
            KEPT + 2,
            "each side holds its own bound at most"
        );
        // The next two sends use what the ready side holds, then the swap again.
        for _ in 0..2 {
            let m = pool.wrap(message(&payload));
            assert!(given.contains(&Arc::as_ptr(&m)));
        }
        drop(pool.wrap(message(&payload)));
        assert_eq!(pool.len(), KEPT - 1);
    }

    #[test]
    fn a_busy_side_is_passed_over_not_waited_for() {
        let pool = MessagePool::default();
        let payload = Bytes::from_static(b"x");
        pool.recycle(Arc::new(message(&payload)));
        {
            let _busy = pool.returned.lock();
            // A send finding the returned side busy allocates anew.
            drop(pool.wrap(message(&payload)));
            // A worker finding it busy frees the message as usual.
            pool.recycle(Arc::new(message(&payload)));
        }
        assert_eq!(pool.len(), 1);
    }
}
