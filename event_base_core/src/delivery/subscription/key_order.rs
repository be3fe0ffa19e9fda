//! Order per key within one subscription: [`KeyOrder`].
//!
//! A message with a key ([`EMessage::with_key`]) takes its place in its key's line when it
//! enters the subscription: when it is queued, for queues whose workers claim for themselves
//! (`KeyedProducer` registers it just before the queue takes it), or when the subscription's
//! router claims it, for queues that need acks (the router claims in the queue's order). The
//! front of a line holds the key: only it is handled. A worker that takes a message whose
//! turn has not come parks it in its line and goes on with other work; when the front ends
//! for good (acked, dead-lettered, withdrawn, or taken over by another consumer; a retry
//! keeps its place), the next one becomes the front, and if it was parked it is handed to
//! the subscription's workers again.
//!
//! Messages without a key never come here beyond one look at their (empty) headers. Only
//! `Standard` messages for no worker in particular are ordered ([`ordering_key`]); a
//! broadcast, repeated or addressed message carries its key but is not held by it.
//!
//! Parked messages are not in the queue, so the queue's bound no longer limits them: the
//! lines of a subscription hold at most [`LINE_LIMIT`] messages in all, and a keyed send
//! waits (or, with `try_send`, is refused as by a full queue) while they are full.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::delivery::dedup::id_key::{IdKeys, KeyHasher};
use crate::delivery::subscription::job::Job;
use crate::delivery::subscription::job_channel::JobSender;
use crate::message::emessage::EMessage;

/// Independently locked shards of the lines; a power of two.
const SHARDS: usize = 16;

/// Keyed messages one subscription's lines hold at most (queued, parked or being handled).
pub(crate) const LINE_LIMIT: usize = 65_536;

pub(crate) use crate::backend::queue::ordering_key;

/// A line longer than this keeps an index of its messages' positions; a shorter one (the
/// common case: a key has a message or two waiting) is scanned.
const INDEX_FROM: usize = 16;

/// Emptied lines a shard keeps for reuse, so that a key whose messages come and go does not
/// allocate a line each time.
const SPARE_LINES: usize = 32;

/// One key's messages in a subscription, in the order they entered it.
///
/// Positions are sequence numbers (a message's slot is `seq - base`), and a message that
/// leaves from the middle leaves a hole that the front skips. A short line finds a message
/// by scanning its few slots; a long one (a hot key) through `index`, so entering, parking
/// and leaving cost the same with ten messages in the line as with ten thousand.
#[derive(Default)]
struct Line {
    /// Sequence number of `slots[0]`.
    base: u64,
    /// The front holds the key; `None` is a hole.
    slots: VecDeque<Option<Slot>>,
    /// Messages in the line (slots that are not holes).
    len: usize,
    /// Each message's sequence number by id key, once the line grew past [`INDEX_FROM`].
    index: Option<HashMap<u128, u64, BuildHasherDefault<KeyHasher>>>,
}

struct Slot {
    /// The 128-bit key of the message's id.
    id: u128,
    /// Taken by a worker before its turn.
    parked: Option<Job>,
}

impl Line {
    /// Where message `id` is (0: the front).
    fn position(&self, id: u128) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(&id).map(|seq| (seq - self.base) as usize),
            None => self
                .slots
                .iter()
                .position(|s| s.as_ref().is_some_and(|s| s.id == id)),
        }
    }

    fn push(&mut self, id: u128) {
        let seq = self.base + self.slots.len() as u64;
        self.slots.push_back(Some(Slot { id, parked: None }));
        self.len += 1;
        match &mut self.index {
            Some(index) => {
                index.insert(id, seq);
            }
            None if self.slots.len() > INDEX_FROM => {
                let base = self.base;
                self.index = Some(
                    self.slots
                        .iter()
                        .enumerate()
                        .filter_map(|(i, s)| s.as_ref().map(|s| (s.id, base + i as u64)))
                        .collect(),
                );
            }
            None => {}
        }
    }

    /// Takes message `id` out; its slot becomes a hole, and holes at the front go.
    fn remove(&mut self, id: u128) -> Option<Slot> {
        let at = self.position(id)?;
        if let Some(index) = &mut self.index {
            index.remove(&id);
        }
        let slot = self.slots.get_mut(at)?.take();
        self.len -= 1;
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.base += 1;
        }
        slot
    }

    /// The parked job of the front, if the front is parked.
    fn take_front_parked(&mut self) -> Option<Job> {
        self.slots.front_mut()?.as_mut()?.parked.take()
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every parked job (of a line found empty of messages: none, unless a bug put one),
    /// leaving the line empty for reuse.
    fn drain_parked(&mut self) -> Vec<Job> {
        let jobs = self
            .slots
            .drain(..)
            .flatten()
            .filter_map(|s| s.parked)
            .collect();
        self.base = 0;
        self.len = 0;
        self.index = None;
        jobs
    }
}

/// One shard of a subscription's lines: by the 128-bit key of the ordering key (two keys
/// with one 128-bit key would share a line, ordered together: a chance of about
/// `n² / 2¹²⁹` for `n` keys, and harmless), and the emptied lines kept for reuse.
#[derive(Default)]
struct Shard {
    lines: HashMap<u128, Line, BuildHasherDefault<KeyHasher>>,
    spare: Vec<Line>,
}

/// The key lines of one subscription.
pub(crate) struct KeyOrder {
    shards: Box<[Mutex<Shard>]>,
    /// Makes the 128-bit keys of ordering keys and of message ids.
    ids: IdKeys,
    /// Messages in all lines.
    held: AtomicUsize,
    /// Rung when a message leaves a line (a keyed send waiting for room).
    room: Notify,
    /// Where a parked message goes when its turn comes: the subscription's work channel.
    work: JobSender,
}

impl std::fmt::Debug for KeyOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyOrder")
            .field("held", &self.held.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl KeyOrder {
    /// The lines of a subscription whose workers take work from `work`.
    pub(crate) fn new(work: JobSender) -> Self {
        KeyOrder {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            ids: IdKeys::new(),
            held: AtomicUsize::new(0),
            room: Notify::new(),
            work,
        }
    }

    /// The shard of the line of ordering key `key` (its 128-bit key).
    fn shard(&self, key: u128) -> MutexGuard<'_, Shard> {
        let i = ((key >> 64) as usize) & (SHARDS - 1);
        // A panic while a shard was held left it consistent (every change is one step).
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the lines are full: a keyed send waits for [`room`](Self::room).
    #[inline]
    pub(crate) fn is_full(&self) -> bool {
        self.held.load(Ordering::Acquire) >= LINE_LIMIT
    }

    /// Waits until the lines have room.
    pub(crate) async fn room(&self) {
        crate::delivery::subscription::bell::wait_until(&self.room, || !self.is_full()).await;
    }

    /// Messages in all lines (queued, parked or being handled).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// `message` enters its key's line, at the back, unless it is in it already (a claim of
    /// an entry this subscription claimed before, a replayed dead letter whose first life is
    /// still there): it then keeps its place.
    pub(crate) fn enter(&self, message: &EMessage) {
        let Some(key) = ordering_key(message) else {
            return;
        };
        let key = self.ids.key(key);
        let id = self.ids.key(&message.id);
        let mut guard = self.shard(key);
        let shard = &mut *guard;
        let line = shard
            .lines
            .entry(key)
            .or_insert_with(|| shard.spare.pop().unwrap_or_default());
        if line.position(id).is_some() {
            return;
        }
        line.push(id);
        self.held.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether `job` may be handled now: it is handed back if its message holds its key (or
    /// is not ordered, or not in a line), and parked otherwise, to come back through the
    /// work channel when its turn comes.
    #[inline]
    pub(crate) fn admit(&self, job: Job) -> Option<Job> {
        let Some(key) = ordering_key(&job.message) else {
            return Some(job);
        };
        let key = self.ids.key(key);
        let id = self.ids.key(&job.message.id);
        let mut shard = self.shard(key);
        let Some(line) = shard.lines.get_mut(&key) else {
            return Some(job);
        };
        match line.position(id) {
            Some(0) | None => Some(job),
            Some(at) => match line.slots.get_mut(at) {
                Some(Some(slot)) => {
                    slot.parked = Some(job);
                    None
                }
                _ => Some(job),
            },
        }
    }

    /// `message` is done with for good in this subscription (acked, dead, withdrawn, or
    /// another consumer's now): it leaves its line, and the next message of its key, if
    /// parked, goes to the workers.
    #[inline]
    pub(crate) fn leave(&self, message: &EMessage) {
        let Some(key) = ordering_key(message) else {
            return;
        };
        let key = self.ids.key(key);
        let id = self.ids.key(&message.id);
        let mut next = Vec::new();
        {
            let mut guard = self.shard(key);
            let shard = &mut *guard;
            let Some(line) = shard.lines.get_mut(&key) else {
                return;
            };
            let was_front = line.position(id) == Some(0);
            // A parked copy of it (withdrawn after a worker took it) goes with it.
            if line.remove(id).is_none() {
                return;
            }
            if was_front {
                next.extend(line.take_front_parked());
            }
            if line.is_empty() {
                if let Some(mut line) = shard.lines.remove(&key) {
                    next.append(&mut line.drain_parked());
                    if shard.spare.len() < SPARE_LINES {
                        shard.spare.push(line);
                    }
                }
            }
        }
        // Only a send that found the lines full waits for room (`room` looks again after it
        // registers), so only leaving a full state needs to wake anyone: `notify_waiters`
        // takes a lock that every worker's `leave` would otherwise contend for.
        if self.held.fetch_sub(1, Ordering::AcqRel) >= LINE_LIMIT {
            self.room.notify_waiters();
        }
        for job in next {
            self.hand_on(job);
        }
    }

    /// Hands a job whose turn came to the workers, never blocking the caller.
    fn hand_on(&self, job: Job) {
        if let Err(job) = self.work.try_send(job) {
            let tx = self.work.clone();
            tokio::spawn(async move {
                let _ = tx.send(job).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::subscription::job_channel::job_channel;
    use crate::message::delivery_mode::DeliveryMode;
    use std::sync::Arc;

    fn keyed(id: &str, key: &str) -> Arc<EMessage> {
        Arc::new(
            EMessage::standard("t", b"x".to_vec())
                .with_id(id)
                .with_key(key),
        )
    }

    fn job(m: &Arc<EMessage>) -> Job {
        Job {
            message: m.clone(),
            group: None,
            claim: None,
            copies: None,
        }
    }

    #[tokio::test]
    async fn a_message_taken_before_its_turn_waits_for_the_one_ahead() {
        let (tx, rx) = job_channel(8);
        let keys = KeyOrder::new(tx);
        let (a, b, c) = (keyed("a", "k"), keyed("b", "k"), keyed("c", "other"));
        for m in [&a, &b, &c] {
            keys.enter(m);
        }
        assert_eq!(keys.held(), 3);
        // b is taken first: parked. c has a key of its own: handled at once.
        assert!(keys.admit(job(&b)).is_none());
        assert!(keys.admit(job(&c)).is_some());
        assert!(keys.admit(job(&a)).is_some());
        assert!(rx.try_recv().is_none());
        // a retried keeps the key; a acked hands b on.
        assert!(keys.admit(job(&a)).is_some());
        keys.leave(&a);
        assert_eq!(
            rx.try_recv().map(|j| j.message.id.clone()),
            Some("b".into())
        );
        assert!(keys.admit(job(&b)).is_some(), "b holds the key now");
        keys.leave(&b);
        keys.leave(&c);
        assert_eq!(keys.held(), 0);
    }

    #[tokio::test]
    async fn a_withdrawn_message_lets_the_next_one_through() {
        let (tx, rx) = job_channel(8);
        let keys = KeyOrder::new(tx);
        let (a, b) = (keyed("a", "k"), keyed("b", "k"));
        keys.enter(&a);
        keys.enter(&b);
        assert!(keys.admit(job(&b)).is_none());
        keys.leave(&a);
        assert_eq!(
            rx.try_recv().map(|j| j.message.id.clone()),
            Some("b".into())
        );
        keys.enter(&b);
        assert_eq!(keys.held(), 1, "entered once");
    }

    #[tokio::test]
    async fn full_lines_hold_a_keyed_send_until_one_leaves() {
        let (tx, _rx) = job_channel(8);
        let keys = Arc::new(KeyOrder::new(tx));
        let first = keyed("m0", "k0");
        keys.enter(&first);
        for i in 1..LINE_LIMIT {
            keys.enter(&keyed(&format!("m{i}"), &format!("k{}", i % 100)));
        }
        assert!(keys.is_full());
        let waiting = tokio::spawn({
            let keys = keys.clone();
            async move { keys.room().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "no room while full");
        keys.leave(&first);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("a message leaving full lines wakes the waiting send")
            .unwrap();
    }

    #[tokio::test]
    async fn unordered_messages_pass_untouched() {
        let (tx, _rx) = job_channel(8);
        let keys = KeyOrder::new(tx);
        let plain = Arc::new(EMessage::standard("t", b"x".to_vec()));
        let broadcast = Arc::new(
            EMessage::standard("t", b"x".to_vec())
                .with_key("k")
                .with_mode(DeliveryMode::Broadcast),
        );
        keys.enter(&plain);
        keys.enter(&broadcast);
        assert_eq!(keys.held(), 0);
        assert!(keys.admit(job(&plain)).is_some());
        assert!(keys.admit(job(&broadcast)).is_some());
    }

    /// A model of a subscription's workers over its key lines: messages enter in order (the
    /// queue), workers take them in any interleaving, a running message either retries (it
    /// is admitted again) or ends, and parked ones come back through the work channel. At
    /// every step no key has two messages running and each key's messages start in the order
    /// they entered; at the end everything ran and the lines are empty.
    mod model {
        use super::*;
        use proptest::prelude::*;
        use std::collections::{HashMap, VecDeque};

        #[derive(Debug, Clone)]
        enum Op {
            /// The queue hands its next message to a worker.
            Claim,
            /// A worker that took a message (by choice) asks whether it may run it.
            Admit(usize),
            /// A running message (by choice) fails and is retried.
            Retry(usize),
            /// A running message (by choice) ends.
            End(usize),
            /// A worker takes a job from the work channel.
            Pull,
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                3 => Just(Op::Claim),
                3 => any::<usize>().prop_map(Op::Admit),
                1 => any::<usize>().prop_map(Op::Retry),
                3 => any::<usize>().prop_map(Op::End),
                2 => Just(Op::Pull),
            ]
        }

        struct World {
            keys: KeyOrder,
            rx: crate::delivery::subscription::job_channel::JobReceiver,
            queue: VecDeque<Arc<EMessage>>,
            taken: Vec<Job>,
            running: Vec<Job>,
            started: HashMap<String, Vec<usize>>,
            ended: usize,
        }

        fn index(m: &EMessage) -> usize {
            m.id.parse().unwrap()
        }

        impl World {
            fn step(&mut self, op: Op) -> Result<(), TestCaseError> {
                match op {
                    Op::Claim => {
                        if let Some(m) = self.queue.pop_front() {
                            self.taken.push(job(&m));
                        }
                    }
                    Op::Admit(i) if !self.taken.is_empty() => {
                        let j = self.taken.swap_remove(i % self.taken.len());
                        if let Some(j) = self.keys.admit(j) {
                            let key = j.message.key().unwrap().to_owned();
                            prop_assert!(
                                self.running.iter().all(|r| r.message.key() != Some(&key)),
                                "two of key {} running",
                                key
                            );
                            let first = self.started.entry(key).or_default();
                            let n = index(&j.message);
                            if first.last() != Some(&n) {
                                first.push(n);
                            }
                            self.running.push(j);
                        }
                    }
                    Op::Retry(i) if !self.running.is_empty() => {
                        let j = self.running.swap_remove(i % self.running.len());
                        let back = self.keys.admit(j);
                        prop_assert!(back.is_some(), "a retry keeps its key");
                        self.running.extend(back);
                    }
                    Op::End(i) if !self.running.is_empty() => {
                        let j = self.running.swap_remove(i % self.running.len());
                        self.keys.leave(&j.message);
                        self.ended += 1;
                    }
                    Op::Pull => {
                        if let Some(j) = self.rx.try_recv() {
                            self.taken.push(j);
                        }
                    }
                    _ => {}
                }
                Ok(())
            }
        }

        proptest! {
            #[test]
            fn one_running_per_key_in_entry_order_and_nothing_stuck(
                keys_of in proptest::collection::vec(0u8..3, 1..60),
                ops in proptest::collection::vec(op(), 0..400),
            ) {
                let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
                let _guard = rt.enter();
                let (tx, rx) = job_channel(1024);
                let mut w = World {
                    keys: KeyOrder::new(tx),
                    rx,
                    queue: VecDeque::new(),
                    taken: Vec::new(),
                    running: Vec::new(),
                    started: HashMap::new(),
                    ended: 0,
                };
                for (i, k) in keys_of.iter().enumerate() {
                    let m = keyed(&i.to_string(), &format!("k{k}"));
                    w.keys.enter(&m);
                    w.queue.push_back(m);
                }
                for op in ops {
                    w.step(op)?;
                }
                // Drain: every message runs and ends, in some order the lines allow.
                let mut turns = 0;
                while w.ended < keys_of.len() {
                    turns += 1;
                    prop_assert!(turns < 10_000, "stuck: {} of {} ended", w.ended, keys_of.len());
                    for op in [Op::Claim, Op::Pull, Op::Admit(0), Op::End(0)] {
                        w.step(op)?;
                    }
                }
                prop_assert_eq!(w.keys.held(), 0);
                for (key, order) in &w.started {
                    prop_assert!(order.windows(2).all(|p| p[0] < p[1]), "key {} started {:?}", key, order);
                }
            }
        }
    }
}
