//! [`TopicLog`]: one topic's in-process log. A message is appended once, whatever the number
//! of the topic's handlers; each handler (a subscription) reads it with a cursor of its own.
//!
//! A slot holds the message and the set of subscriptions it is for (a bit each: every
//! subscription for a plain send, one for a copy addressed to one handler, such as a retry
//! or a due delayed message). A subscription's cursor passes the slots that are not for it.
//! The log keeps a slot until every cursor has passed it; its bound counts those slots, so the
//! slowest cursor holds the senders back (backpressure), as a full queue did.
//!
//! One short lock guards the slots and the cursors: an append is one push, a claim takes a
//! run of slots at once. The bells (one `Notify` per subscription) are rung outside it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::backend::queue::{Claimed, Receipt};
use crate::delivery::settle::copy_slab::CopySlab;
use crate::message::emessage::EMessage;

/// The most subscriptions one log serves (a bit each in a slot's set); a topic with more
/// handlers keeps a queue per handler.
pub(crate) const MAX_SUBSCRIPTIONS: usize = 64;

/// The most messages a worker claims from a log at once (a run; fewer when the backlog is
/// short: its share, see [`TopicLog::claim`]; fewer with a small bound, see
/// `bus/assemble.rs`'s `claim_run`).
pub(crate) const CLAIM_RUN: usize = 32;

/// A set of a log's subscriptions, a bit each.
pub(crate) type SubSet = u64;

/// A message in the log, and the subscriptions it is for.
struct Slot {
    message: Arc<EMessage>,
    /// Its index in the log's [`CopySlab`] plus one (0: none), handed to each claim in
    /// `Receipt::hi`.
    copies: u32,
    subs: SubSet,
}

/// What the lock guards.
struct Cursors {
    /// The slots not yet passed by every cursor; `slots[0]` has sequence `head`.
    slots: VecDeque<Slot>,
    head: u64,
    /// The next sequence each subscription reads.
    next: Box<[u64]>,
    /// Messages each subscription has still to claim.
    pending: Box<[usize]>,
    /// Every writer has gone: nothing more will be appended.
    closed: bool,
}

impl Cursors {
    fn tail(&self) -> u64 {
        self.head + self.slots.len() as u64
    }

    /// Drops the slots every cursor has passed; whether any went. A subscription with nothing
    /// left to claim has passed every slot, wherever its cursor last stopped: a handler whose
    /// workers sleep holds nothing back.
    fn trim(&mut self) -> bool {
        let tail = self.tail();
        let lowest = self
            .next
            .iter()
            .zip(self.pending.iter())
            .filter(|(_, pending)| **pending > 0)
            .map(|(next, _)| *next)
            .min()
            .unwrap_or(tail);
        let mut trimmed = false;
        while self.head < lowest && self.slots.pop_front().is_some() {
            self.head += 1;
            trimmed = true;
        }
        trimmed
    }
}

/// Why an append did not take a message: the log is full (the message is handed back), or
/// closed.
#[derive(Debug)]
pub(crate) enum AppendError {
    Full(Arc<EMessage>),
    Closed(Arc<EMessage>),
}

/// One topic's log: appended to by senders, read by one cursor per subscription.
pub(crate) struct TopicLog {
    cursors: Mutex<Cursors>,
    /// Slots the log may hold; `None`: no bound.
    bound: Option<usize>,
    /// One per subscription, rung (`notify_one`) for each message appended for it, and for
    /// every waiter (`notify_waiters`) when the log closes.
    bells: Box<[Arc<Notify>]>,
    /// Senders waiting for room, and how many there are (a claim that frees slots wakes
    /// them only when there are any).
    room: Notify,
    waiting_room: AtomicUsize,
    /// Writers alive ([`LogWriter`]); the log closes when the last one goes.
    writers: AtomicUsize,
    /// The state words of the messages appended for every subscription (a log of several).
    copies: Option<Arc<CopySlab>>,
}

impl std::fmt::Debug for TopicLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicLog")
            .field("subscriptions", &self.bells.len())
            .field("bound", &self.bound)
            .finish_non_exhaustive()
    }
}

impl TopicLog {
    /// A log for `subscriptions` handlers (at most [`MAX_SUBSCRIPTIONS`]) holding at most
    /// `bound` slots.
    pub(crate) fn new(subscriptions: usize, bound: Option<usize>) -> Arc<TopicLog> {
        debug_assert!((1..=MAX_SUBSCRIPTIONS).contains(&subscriptions));
        Arc::new(TopicLog {
            cursors: Mutex::new(Cursors {
                slots: VecDeque::with_capacity(bound.unwrap_or(1024).min(4096)),
                head: 0,
                next: vec![0; subscriptions].into_boxed_slice(),
                pending: vec![0; subscriptions].into_boxed_slice(),
                closed: false,
            }),
            bound: bound.map(|b| b.max(1)),
            bells: (0..subscriptions)
                .map(|_| Arc::new(Notify::new()))
                .collect(),
            room: Notify::new(),
            waiting_room: AtomicUsize::new(0),
            writers: AtomicUsize::new(0),
            copies: (subscriptions > 1).then(|| Arc::new(CopySlab::default())),
        })
    }

    /// The state words of the messages appended for every subscription, if the log has
    /// several.
    pub(crate) fn copies(&self) -> Option<&Arc<CopySlab>> {
        self.copies.as_ref()
    }

    /// Every subscription of the log.
    pub(crate) fn all(&self) -> SubSet {
        match self.bells.len() {
            MAX_SUBSCRIPTIONS => SubSet::MAX,
            n => (1 << n) - 1,
        }
    }

    /// The bell of subscription `sub`.
    pub(crate) fn bell(&self, sub: usize) -> &Arc<Notify> {
        &self.bells[sub]
    }

    fn lock(&self) -> MutexGuard<'_, Cursors> {
        // Every change under the lock is whole before it can panic (pushes and counters):
        // a poisoned lock holds a consistent log.
        self.cursors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `message` for the subscriptions in `subs`, without waiting.
    pub(crate) fn try_append(
        &self,
        message: Arc<EMessage>,
        subs: SubSet,
    ) -> Result<(), AppendError> {
        self.try_append_counted(message, subs, 0)
    }

    /// [`try_append`](Self::try_append), with the message's index in the log's
    /// [`CopySlab`] plus one (`copies`; 0: none), which each claim hands on.
    pub(crate) fn try_append_counted(
        &self,
        message: Arc<EMessage>,
        subs: SubSet,
        copies: u32,
    ) -> Result<(), AppendError> {
        {
            let mut c = self.lock();
            if c.closed {
                return Err(AppendError::Closed(message));
            }
            if self.bound.is_some_and(|b| c.slots.len() >= b) {
                return Err(AppendError::Full(message));
            }
            let seq = c.tail();
            c.slots.push_back(Slot {
                message,
                copies,
                subs,
            });
            let mut rest = subs;
            while rest != 0 {
                let i = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                if c.pending[i] == 0 {
                    // Its cursor had passed everything: it starts at this message.
                    c.next[i] = seq;
                }
                c.pending[i] += 1;
            }
        }
        let mut rest = subs;
        while rest != 0 {
            let i = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            self.bells[i].notify_one();
        }
        Ok(())
    }

    /// Appends `message` for `subs`, waiting while the log is full. Cancel-safe: dropped
    /// while waiting, it appended nothing.
    pub(crate) async fn append(
        &self,
        mut message: Arc<EMessage>,
        subs: SubSet,
    ) -> Result<(), Arc<EMessage>> {
        /// Counts a waiting sender for as long as it waits (dropped with the future too).
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        match self.try_append(message, subs) {
            Ok(()) => return Ok(()),
            Err(AppendError::Closed(m)) => return Err(m),
            Err(AppendError::Full(m)) => message = m,
        }
        // Counted before the look below (which takes the lock), so a claim that frees room
        // after it sees the count and rings.
        self.waiting_room.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&self.waiting_room);
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            // Listening before the look, so room made in between is not missed.
            room.as_mut().enable();
            match self.try_append(message, subs) {
                Ok(()) => return Ok(()),
                Err(AppendError::Closed(m)) => return Err(m),
                Err(AppendError::Full(m)) => message = m,
            }
            room.await;
        }
    }

    /// Moves up to `max` of subscription `sub`'s messages into `out`, in log order, without
    /// waiting, but no more than a `share`-th of what it has pending (rounded up): a run for
    /// one of `share` competing workers, which leaves the rest to its siblings. `Err(())`:
    /// none left and the log is closed.
    pub(crate) fn claim(
        &self,
        sub: usize,
        max: usize,
        share: usize,
        out: &mut Vec<Claimed>,
    ) -> Result<usize, ()> {
        let bit: SubSet = 1 << sub;
        let mut c = self.lock();
        let tail = c.tail();
        let mut seq = c.next[sub];
        let mut n = 0;
        if c.pending[sub] == 0 && c.closed {
            return Err(());
        }
        let max = max.min(c.pending[sub].div_ceil(share.max(1)));
        while seq < tail && n < max && c.pending[sub] > n {
            let slot = &c.slots[(seq - c.head) as usize];
            if slot.subs & bit != 0 {
                out.push(Claimed {
                    message: slot.message.clone(),
                    receipt: Receipt {
                        hi: u64::from(slot.copies),
                        lo: seq,
                    },
                });
                n += 1;
            }
            seq += 1;
        }
        c.pending[sub] -= n;
        if c.pending[sub] == 0 {
            // Nothing more for it: the slots up to the tail are not its.
            seq = tail;
        }
        c.next[sub] = seq;
        let freed = n > 0 && c.trim();
        drop(c);
        if freed && self.waiting_room.load(Ordering::SeqCst) > 0 {
            self.room.notify_waiters();
        }
        Ok(n)
    }

    /// Messages subscription `sub` has still to claim.
    pub(crate) fn pending(&self, sub: usize) -> usize {
        self.lock().pending[sub]
    }

    /// Slots held (not yet passed by every cursor).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.lock().slots.len()
    }

    fn close(&self) {
        self.lock().closed = true;
        for bell in self.bells.iter() {
            bell.notify_waiters();
        }
        self.room.notify_waiters();
    }
}

/// A handle that may append to a log: the log closes (its readers find it closed once they
/// have claimed what it holds) when the last writer is dropped.
#[derive(Debug)]
pub(crate) struct LogWriter {
    log: Arc<TopicLog>,
}

impl LogWriter {
    pub(crate) fn new(log: Arc<TopicLog>) -> LogWriter {
        log.writers.fetch_add(1, Ordering::Relaxed);
        LogWriter { log }
    }

    pub(crate) fn log(&self) -> &TopicLog {
        &self.log
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        if self.log.writers.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.log.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn message(n: u32) -> Arc<EMessage> {
        let mut m = EMessage::standard("orders", n.to_le_bytes().to_vec());
        m.attempts = n;
        Arc::new(m)
    }

    #[derive(Debug, Clone)]
    enum Op {
        Append { subs: SubSet },
        Claim { sub: usize, max: usize },
    }

    fn op(subscriptions: usize) -> impl Strategy<Value = Op> {
        let all: SubSet = (1 << subscriptions) - 1;
        prop_oneof![
            (1..=all).prop_map(|subs| Op::Append { subs }),
            (0..subscriptions, 1usize..5).prop_map(|(sub, max)| Op::Claim { sub, max }),
        ]
    }

    proptest! {
        /// Against a model (every append kept in a vector, a cursor an index into it): each
        /// subscription claims exactly the messages appended for it, in append order; the
        /// log never holds more than its bound, refuses only when full, and holds exactly
        /// the slots from the lowest cursor on.
        #[test]
        fn each_cursor_reads_its_messages_in_order(
            subscriptions in 1usize..5,
            bound in 1usize..8,
            ops in proptest::collection::vec(op(4), 1..200),
        ) {
            let log = TopicLog::new(subscriptions, Some(bound));
            let _writer = LogWriter::new(log.clone());
            let all = log.all();
            let mut appended: Vec<(u32, SubSet)> = Vec::new();
            let mut cursor = vec![0usize; subscriptions];
            // A subscription with nothing left holds nothing back.
            let held = |cursor: &[usize], appended: &[(u32, SubSet)]| {
                let lowest = cursor
                    .iter()
                    .enumerate()
                    .filter(|(i, c)| appended[**c..].iter().any(|(_, s)| s & (1 << i) != 0))
                    .map(|(_, c)| *c)
                    .min()
                    .unwrap_or(appended.len());
                appended.len() - lowest
            };
            for op in ops {
                match op {
                    Op::Append { subs } => {
                        let subs = subs & all;
                        if subs == 0 { continue; }
                        let n = appended.len() as u32 + 1;
                        let was_full = held(&cursor, &appended) == bound;
                        match log.try_append(message(n), subs) {
                            Ok(()) => {
                                prop_assert!(!was_full);
                                // A cursor with nothing left starts at the new message.
                                for (i, c) in cursor.iter_mut().enumerate() {
                                    let idle = !appended[*c..].iter().any(|(_, s)| s & (1 << i) != 0);
                                    if subs & (1 << i) != 0 && idle {
                                        *c = appended.len();
                                    }
                                }
                                appended.push((n, subs));
                            }
                            Err(AppendError::Full(_)) => prop_assert!(was_full),
                            Err(AppendError::Closed(_)) => prop_assert!(false, "closed"),
                        }
                    }
                    Op::Claim { sub, max } => {
                        if sub >= subscriptions { continue; }
                        let mut out = Vec::new();
                        let got = log.claim(sub, max, 1, &mut out).unwrap();
                        prop_assert_eq!(got, out.len());
                        let mine: Vec<u32> = appended[cursor[sub]..]
                            .iter()
                            .filter(|(_, s)| s & (1 << sub) != 0)
                            .map(|(n, _)| *n)
                            .collect();
                        let claimed: Vec<u32> = out.iter().map(|c| c.message.attempts).collect();
                        prop_assert_eq!(&claimed[..], &mine[..got.min(mine.len())]);
                        prop_assert!(got == max || got == mine.len());
                        // The cursor stands after the last message claimed, or at the tail
                        // once nothing is left for it.
                        cursor[sub] = if got == mine.len() {
                            appended.len()
                        } else {
                            // Message n sits at index n - 1: the cursor is its index + 1.
                            claimed[got - 1] as usize
                        };
                    }
                }
                prop_assert_eq!(log.held(), held(&cursor, &appended));
                for (i, c) in cursor.iter().enumerate() {
                    let left = appended[*c..].iter().filter(|(_, s)| s & (1 << i) != 0).count();
                    prop_assert_eq!(log.pending(i), left);
                }
            }
        }
    }

    #[test]
    fn the_log_closes_with_its_last_writer_after_its_messages_are_claimed() {
        let log = TopicLog::new(2, None);
        let writer = LogWriter::new(log.clone());
        let second = LogWriter::new(log.clone());
        log.try_append(message(1), log.all()).unwrap();
        drop(writer);
        assert!(log.try_append(message(2), 1).is_ok(), "one writer is left");
        drop(second);
        assert!(matches!(
            log.try_append(message(3), 1),
            Err(AppendError::Closed(_))
        ));
        let mut out = Vec::new();
        assert_eq!(log.claim(0, 10, 1, &mut out), Ok(2));
        assert_eq!(log.claim(0, 10, 1, &mut out), Err(()));
        assert_eq!(log.claim(1, 10, 1, &mut out), Ok(1));
        assert_eq!(log.claim(1, 10, 1, &mut out), Err(()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_append_gets_the_room_a_claim_makes() {
        let log = TopicLog::new(2, Some(1));
        let _writer = LogWriter::new(log.clone());
        log.try_append(message(1), log.all()).unwrap();
        let waiting = tokio::spawn({
            let log = log.clone();
            async move { log.append(message(2), 0b11).await.is_ok() }
        });
        let mut out = Vec::new();
        // The slot is held until both cursors have passed it.
        assert_eq!(log.claim(0, 1, 1, &mut out), Ok(1));
        assert!(matches!(
            log.try_append(message(3), 0b11),
            Err(AppendError::Full(_))
        ));
        assert_eq!(log.claim(1, 1, 1, &mut out), Ok(1));
        assert!(waiting.await.unwrap());
        assert_eq!(log.pending(0), 1);
        assert_eq!(log.pending(1), 1);
    }

    #[test]
    fn many_threads_each_subscription_gets_every_message_once_in_order() {
        const SENDS: u32 = 20_000;
        let log = TopicLog::new(3, Some(64));
        let writer = LogWriter::new(log.clone());
        let readers: Vec<_> = (0..3)
            .map(|sub| {
                let log = log.clone();
                std::thread::spawn(move || {
                    let mut seen = Vec::new();
                    let mut out = Vec::new();
                    loop {
                        out.clear();
                        match log.claim(sub, 8, 1, &mut out) {
                            Ok(_) => seen.extend(out.iter().map(|c| c.message.attempts)),
                            Err(()) => return seen,
                        }
                        std::thread::yield_now();
                    }
                })
            })
            .collect();
        for n in 1..=SENDS {
            let mut m = message(n);
            loop {
                match log.try_append(m, log.all()) {
                    Ok(()) => break,
                    Err(AppendError::Full(back)) => {
                        m = back;
                        std::thread::yield_now();
                    }
                    Err(AppendError::Closed(_)) => unreachable!(),
                }
            }
        }
        drop(writer);
        for r in readers {
            let seen = r.join().unwrap();
            assert_eq!(seen, (1..=SENDS).collect::<Vec<_>>());
        }
    }
}
