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
//! The pool has a *ready* side and [`SIDES`] *returned* sides, each a stack under a lock of
//! its own on cache lines of its own: workers put finished messages on a returned side (the
//! one their index picks), sends take them from the ready side, and a send that finds the
//! ready side empty swaps it with a returned side that has some (one lock of that side for
//! all the messages it held), looking at the sides in turn from the one after the side it
//! took last, so that each is emptied as often as the others (a side never looked at would
//! fill up and free what its workers give back). So a send and a worker seldom take the same lock, the line a
//! send takes stays on the sending core, and workers finishing at the same moment do not
//! find each other's lock taken (a busy lock frees the message instead: with one returned
//! side for four workers, that lost a few allocations in a hundred).
//!
//! Sends and completions come in bursts: a sender woken after its queue had room sends as
//! many as the workers finished meanwhile, up to a queue's bound (thousands). A pool smaller
//! than a burst hands most of it to the allocator again (with 1,024 kept, the memory path
//! reused an allocation for 19–39 % of its sends with the dedup window off). Each side keeps
//! up to [`KEPT`] messages: at most `(SIDES + 1) × KEPT` allocations of about 400 bytes with
//! their id and topic, some 4.5 MiB a bus, which it keeps while idle once a burst has filled
//! it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::delivery::cache_padded::CachePadded;
use crate::message::emessage::EMessage;
use crate::message::payload::MessagePayload;

/// How many finished messages' allocations each side of a bus's pool keeps at most.
pub(crate) const KEPT: usize = 2304;

/// How many returned sides a bus's pool has: workers put finished messages on the one their
/// index picks.
pub(crate) const SIDES: usize = 4;

/// The side sends take from.
#[derive(Debug, Default)]
struct Ready {
    /// Allocations at hand.
    kept: Vec<Arc<EMessage>>,
    /// The returned side swapped in last: the next swap looks at the one after it first.
    last: usize,
}

/// Finished messages' allocations, for the next sends (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct MessagePool {
    /// What sends take from; refilled by swapping with `returned` when empty.
    ready: CachePadded<Mutex<Ready>>,
    /// What workers put back, a side per worker index (modulo [`SIDES`]).
    returned: [CachePadded<Mutex<Vec<Arc<EMessage>>>>; SIDES],
    /// The side the next worker made is given ([`side`](Self::side)).
    next_side: AtomicUsize,
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
        let ready = &mut *ready;
        if let Some(kept) = ready.kept.pop() {
            return Some(kept);
        }
        // Empty: take all that workers gave back on one side at once, leaving them the
        // empty stack.
        for turn in 1..=SIDES {
            let side = (ready.last + turn) % SIDES;
            let Ok(mut returned) = self.returned[side].try_lock() else {
                continue;
            };
            if returned.is_empty() {
                continue;
            }
            std::mem::swap(&mut ready.kept, &mut *returned);
            drop(returned);
            ready.last = side;
            return ready.kept.pop();
        }
        None
    }

    /// The returned side for a new worker to give its finished messages back to: each in
    /// turn, so the workers of one topic, or of topics with one worker each, are spread.
    pub(crate) fn side(&self) -> usize {
        self.next_side.fetch_add(1, Ordering::Relaxed) % SIDES
    }

    /// Keeps the allocation of a finished `message` for a later send, if nothing else refers
    /// to it and returned side `side` (see [`side`](Self::side)), or failing that another
    /// side, has room; otherwise it is dropped as usual.
    #[inline]
    pub(crate) fn recycle(&self, mut message: Arc<EMessage>, side: usize) {
        let Some(finished) = Arc::get_mut(&mut message) else {
            return;
        };
        finished.payload = MessagePayload::default();
        // Its own side first; a side that is full (its workers finished more than their
        // share while no send came) or busy passes it on to the next.
        for turn in 0..SIDES {
            let Ok(mut returned) = self.returned[(side + turn) % SIDES].try_lock() else {
                continue;
            };
            if returned.len() < KEPT {
                returned.push(message);
                return;
            }
        }
    }

    /// How many allocations the pool holds now.
    #[cfg(test)]
    fn len(&self) -> usize {
        let side = |s: &Mutex<Vec<Arc<EMessage>>>| s.lock().map_or(0, |k| k.len());
        self.ready.lock().map_or(0, |r| r.kept.len())
            + self.returned.iter().map(|s| side(s)).sum::<usize>()
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
        pool.recycle(first, 0);
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
        pool.recycle(shared, 0);
        assert_eq!(pool.len(), 0, "another reference exists");
        let weak = Arc::downgrade(&other);
        pool.recycle(other, 0);
        assert_eq!(pool.len(), 0, "a weak reference exists");
        assert!(weak.upgrade().is_none(), "dropped as usual");
    }

    #[test]
    fn the_pool_keeps_at_most_its_bound() {
        let pool = MessagePool::default();
        let payload = Bytes::from_static(b"x");
        // One side's workers give back more than it keeps: the rest go to the other sides,
        // up to the bound of them all.
        for _ in 0..SIDES * KEPT + 10 {
            pool.recycle(Arc::new(message(&payload)), 0);
        }
        assert_eq!(pool.len(), SIDES * KEPT);
        for side in 0..SIDES {
            assert_eq!(pool.returned[side].lock().map_or(0, |r| r.len()), KEPT);
        }
        // And hands out what it holds before allocating anew.
        for _ in 0..SIDES * KEPT {
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
                pool.recycle(m, 0);
                at
            })
            .collect();
        // The first send finds the ready side empty and takes the returned stack whole.
        let first = pool.wrap(message(&payload));
        assert!(given.contains(&Arc::as_ptr(&first)));
        assert_eq!(pool.ready.lock().map_or(0, |r| r.kept.len()), 2);
        assert_eq!(pool.returned[0].lock().map_or(9, |r| r.len()), 0);
        // Meanwhile the workers fill the returned side again, up to its own bound; one more
        // goes to the next side.
        for _ in 0..KEPT + 1 {
            pool.recycle(Arc::new(message(&payload)), 0);
        }
        assert_eq!(
            pool.returned[0].lock().map_or(0, |r| r.len()),
            KEPT,
            "each side holds its own bound at most"
        );
        assert_eq!(pool.returned[1].lock().map_or(0, |r| r.len()), 1);
        assert_eq!(pool.len(), KEPT + 3);
        // The next two sends use what the ready side holds, then the swap again.
        for _ in 0..2 {
            let m = pool.wrap(message(&payload));
            assert!(given.contains(&Arc::as_ptr(&m)));
        }
        drop(pool.wrap(message(&payload)));
        assert_eq!(pool.len(), KEPT);
    }

    #[test]
    fn workers_give_back_on_sides_of_their_own_and_a_send_takes_from_any() {
        let pool = MessagePool::default();
        let sides: Vec<usize> = (0..SIDES * 2).map(|_| pool.side()).collect();
        for s in 0..SIDES {
            assert_eq!(
                sides.iter().filter(|&&x| x == s).count(),
                2,
                "each side in turn"
            );
        }
        let payload = Bytes::from_static(b"x");
        // A worker holding one side's lock does not keep another side's worker out.
        {
            let _busy = pool.returned[1].lock();
            pool.recycle(Arc::new(message(&payload)), 2);
            pool.recycle(Arc::new(message(&payload)), 3 + SIDES);
        }
        assert_eq!(pool.returned[2].lock().map_or(0, |r| r.len()), 1);
        assert_eq!(pool.returned[3].lock().map_or(0, |r| r.len()), 1);
        // Sends take both before allocating anew, whichever side holds them.
        drop(pool.wrap(message(&payload)));
        drop(pool.wrap(message(&payload)));
        assert_eq!(pool.len(), 0);
    }

    #[test]
    fn sends_empty_the_returned_sides_in_turn() {
        let pool = MessagePool::default();
        let payload = Bytes::from_static(b"x");
        for side in 0..SIDES {
            pool.recycle(Arc::new(message(&payload)), side);
        }
        // One side's workers keep giving back; the sends still come to the others.
        for _ in 0..SIDES {
            drop(pool.wrap(message(&payload)));
            pool.recycle(Arc::new(message(&payload)), 0);
        }
        for side in 1..SIDES {
            assert_eq!(
                pool.returned[side].lock().map_or(9, |r| r.len()),
                0,
                "side {side} was passed over"
            );
        }
    }

    #[test]
    fn a_busy_side_is_passed_over_not_waited_for() {
        let pool = MessagePool::default();
        let payload = Bytes::from_static(b"x");
        pool.recycle(Arc::new(message(&payload)), 0);
        {
            let _busy = pool.returned[0].lock();
            // A send finding the returned side busy allocates anew.
            drop(pool.wrap(message(&payload)));
            // A worker finding its side busy gives the message to the next side.
            pool.recycle(Arc::new(message(&payload)), 0);
        }
        assert_eq!(pool.len(), 2);
        assert_eq!(pool.returned[1].lock().map_or(0, |r| r.len()), 1);
        // With every side busy, it is freed as usual.
        {
            let _busy: Vec<_> = pool.returned.iter().map(|s| s.lock()).collect();
            pool.recycle(Arc::new(message(&payload)), 0);
        }
        assert_eq!(pool.len(), 2);
    }
}
