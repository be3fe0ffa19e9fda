//! The audit ring: the newest records of a bus, in the order they reached it, each with its
//! place in the bus's audit stream (`seq`). Workers' stages hand their records in, in batches;
//! the readers (`AuditLog`, the publisher) read them out.
//!
//! A recorder: imports only `message/` and the audit types.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::sync::Notify;

use crate::message::id::MessageId;
use crate::observe::audit_record::{AuditEvent, AuditOutcome, AuditRecord};

/// The names every record of one worker shares.
#[derive(Debug)]
pub(crate) struct AuditNames {
    pub(crate) topic: Arc<str>,
    pub(crate) worker: Arc<str>,
    pub(crate) node: Arc<str>,
}

/// One delivery as the ring keeps it: its start, its finish, or both (one or two
/// [`AuditRecord`]s once read). A delivery whose start and finish reached the ring together
/// is one entry, not two: the ring is written on every delivery, so that halves its work.
#[derive(Debug)]
pub(crate) struct RingRecord {
    /// The `seq` of its first record (the second, if any, has the next); given by the ring
    /// when the record reaches it.
    pub(crate) seq: u64,
    pub(crate) id: MessageId,
    pub(crate) names: Arc<AuditNames>,
    pub(crate) attempt: u32,
    /// When the delivery started.
    pub(crate) at: SystemTime,
    /// Whether it holds the start.
    pub(crate) started: bool,
    /// How the delivery ended and after how long, if it has.
    pub(crate) finished: Option<(AuditOutcome, Duration)>,
}

impl RingRecord {
    /// How many audit records it stands for (1 or 2).
    fn count(&self) -> usize {
        usize::from(self.started) + usize::from(self.finished.is_some())
    }

    /// Drops the start of an entry holding both, so it stands for its finish alone.
    fn drop_start(&mut self) {
        if self.started && self.finished.is_some() {
            self.started = false;
            self.seq += 1;
        }
    }

    fn record(&self, seq: u64, event: AuditEvent, at: SystemTime) -> AuditRecord {
        AuditRecord {
            seq,
            message_id: self.id.to_string(),
            topic: self.names.topic.clone(),
            worker: self.names.worker.clone(),
            node: self.names.node.clone(),
            attempt: self.attempt,
            event,
            at,
        }
    }

    /// The audit records it stands for, in order.
    pub(crate) fn to_records(&self) -> impl Iterator<Item = AuditRecord> + '_ {
        let start = self
            .started
            .then(|| self.record(self.seq, AuditEvent::Started, self.at));
        let finish = self.finished.as_ref().map(|(outcome, duration)| {
            let event = AuditEvent::Finished {
                outcome: outcome.clone(),
                duration: *duration,
            };
            let seq = self.seq + u64::from(self.started);
            self.record(seq, event, self.at + *duration)
        });
        start.into_iter().chain(finish)
    }
}

/// What the ring holds, under its lock.
#[derive(Debug)]
pub(crate) struct RingInner {
    pub(crate) records: VecDeque<RingRecord>,
    /// Audit records the entries stand for (at most the ring's capacity).
    held: usize,
    next_seq: u64,
}

/// The bounded ring of one bus.
#[derive(Debug)]
pub(crate) struct AuditRing {
    capacity: usize,
    inner: Mutex<RingInner>,
    /// Wakes the publisher when records arrive, if there is one (`notify`).
    pub(crate) fresh: Notify,
    notify: bool,
}

impl AuditRing {
    /// A ring keeping the newest `capacity` records; `notify` when a publisher waits on it.
    pub(crate) fn new(capacity: usize, notify: bool) -> AuditRing {
        AuditRing {
            capacity: capacity.max(1),
            inner: Mutex::new(RingInner {
                records: VecDeque::new(),
                held: 0,
                next_seq: 1,
            }),
            fresh: Notify::new(),
            notify,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, RingInner> {
        // A poisoned ring only means a panic elsewhere while holding it; its records are
        // still whole.
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Appends one delivery's start, finish or both under `inner` (the caller holds the
    /// lock), giving it its `seq`, dropping the oldest records when full. The record moves
    /// in whole, as its worker's stage built it.
    pub(crate) fn push(&self, inner: &mut RingInner, mut record: RingRecord) {
        record.seq = inner.next_seq;
        let n = record.count();
        if n == 0 {
            return;
        }
        inner.next_seq += n as u64;
        if n > self.capacity {
            record.drop_start(); // a ring of one keeps the finish
        }
        let n = record.count();
        while inner.held + n > self.capacity {
            let Some(front) = inner.records.front_mut() else {
                break;
            };
            if front.count() == 2 && inner.held + n - 1 <= self.capacity {
                front.drop_start();
                inner.held -= 1;
            } else {
                inner.held -= front.count();
                inner.records.pop_front();
            }
        }
        inner.held += n;
        inner.records.push_back(record);
    }

    /// Appends a stage's batch of entries under `inner`, in order, as [`push`](Self::push) of
    /// each would, and empties `batch`. When the batch fits the ring (the usual case), the
    /// entries evicted to make room are dropped where they lie and each new one moves once,
    /// instead of each being moved out, and in, through `push`'s argument.
    pub(crate) fn push_all(&self, inner: &mut RingInner, batch: &mut Vec<RingRecord>) {
        let mut seq = inner.next_seq;
        let mut incoming = 0;
        for record in batch.iter_mut() {
            let n = record.count();
            if n == 0 {
                // Never staged; `push` keeps its rule for it.
                return self.push_each(inner, batch);
            }
            record.seq = seq;
            seq += n as u64;
            incoming += n;
        }
        if incoming > self.capacity {
            // The batch alone overflows the ring: `push` decides, entry by entry.
            for record in batch.iter_mut() {
                record.seq = 0;
            }
            return self.push_each(inner, batch);
        }
        inner.next_seq = seq;
        // The oldest entries that must go, as `push` would take them: whole, or the start of
        // one holding both when one record is all that is missing.
        let mut whole = 0;
        while inner.held + incoming > self.capacity {
            let Some(front) = inner.records.get_mut(whole) else {
                break;
            };
            if front.count() == 2 && inner.held + incoming - 1 <= self.capacity {
                front.drop_start();
                inner.held -= 1;
            } else {
                inner.held -= front.count();
                whole += 1;
            }
        }
        inner.records.drain(..whole);
        inner.held += incoming;
        inner.records.extend(batch.drain(..));
    }

    fn push_each(&self, inner: &mut RingInner, batch: &mut Vec<RingRecord>) {
        for record in batch.drain(..) {
            self.push(inner, record);
        }
    }

    /// The newest `n` records the ring holds, in ring order.
    pub(crate) fn newest(inner: &RingInner, n: usize) -> Vec<AuditRecord> {
        let mut out: Vec<AuditRecord> = Vec::with_capacity(n.min(inner.held));
        let mut taken = 0;
        let mut first = inner.records.len();
        for r in inner.records.iter().rev() {
            if taken >= n {
                break;
            }
            taken += r.count();
            first -= 1;
        }
        out.extend(
            inner
                .records
                .range(first..)
                .flat_map(RingRecord::to_records),
        );
        let excess = out.len().saturating_sub(n);
        out.drain(..excess);
        out
    }

    /// Whether a publisher waits for records.
    pub(crate) fn is_published(&self) -> bool {
        self.notify
    }

    /// Tells the publisher, if any, that records arrived.
    pub(crate) fn arrived(&self) {
        if self.notify {
            self.fresh.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Arc<AuditNames> {
        Arc::new(AuditNames {
            topic: Arc::from("t"),
            worker: Arc::from("w"),
            node: Arc::from("n"),
        })
    }

    fn both(ring: &AuditRing, inner: &mut RingInner, id: &str) {
        let done = Some((AuditOutcome::Acked, Duration::from_millis(1)));
        let at = SystemTime::UNIX_EPOCH;
        let record = RingRecord {
            seq: 0,
            id: MessageId::from(id),
            names: names(),
            attempt: 1,
            at,
            started: true,
            finished: done,
        };
        ring.push(inner, record);
    }

    #[test]
    fn a_start_and_finish_stored_together_read_as_two_records_in_seq_order() {
        let ring = AuditRing::new(10, false);
        let mut inner = ring.lock();
        both(&ring, &mut inner, "a");
        both(&ring, &mut inner, "b");
        let all = AuditRing::newest(&inner, 10);
        let seqs: Vec<u64> = all.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [1, 2, 3, 4]);
        assert_eq!(all[0].event, AuditEvent::Started);
        assert!(matches!(all[1].event, AuditEvent::Finished { .. }));
        assert_eq!(all[1].at, SystemTime::UNIX_EPOCH + Duration::from_millis(1));
        assert_eq!(all[2].message_id, "b");
    }

    #[test]
    fn a_full_ring_keeps_exactly_its_capacity_of_the_newest_records() {
        let ring = AuditRing::new(3, false);
        let mut inner = ring.lock();
        for id in ["a", "b", "c"] {
            both(&ring, &mut inner, id);
        }
        // Six records went in; the newest three are c's two and b's finish.
        let kept = AuditRing::newest(&inner, 100);
        let seqs: Vec<u64> = kept.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [4, 5, 6]);
        assert_eq!(kept[0].message_id, "b");
        assert!(matches!(kept[0].event, AuditEvent::Finished { .. }));
        assert_eq!(AuditRing::newest(&inner, 2).len(), 2);
        assert_eq!(AuditRing::newest(&inner, 2)[0].seq, 5);
    }

    /// A stage's batch: starts with finishes, a start alone and a finish alone.
    fn batch(ids: &[&str]) -> Vec<RingRecord> {
        ids.iter()
            .enumerate()
            .map(|(i, id)| RingRecord {
                seq: 0,
                id: MessageId::from(*id),
                names: names(),
                attempt: 1,
                at: SystemTime::UNIX_EPOCH,
                started: i % 3 != 2,
                finished: (i % 3 != 1).then_some((AuditOutcome::Acked, Duration::ZERO)),
            })
            .collect()
    }

    fn seqs_and_ids(inner: &RingInner) -> Vec<(u64, String, AuditEvent)> {
        AuditRing::newest(inner, usize::MAX)
            .into_iter()
            .map(|r| (r.seq, r.message_id, r.event))
            .collect()
    }

    #[test]
    fn a_batch_lands_as_its_entries_pushed_one_by_one_would() {
        let ids = ["a", "b", "c", "d", "e", "f", "g"];
        for capacity in 1..=16 {
            for before in 0..5 {
                let (one, all) = (
                    AuditRing::new(capacity, false),
                    AuditRing::new(capacity, false),
                );
                let (mut one_inner, mut all_inner) = (one.lock(), all.lock());
                for id in &ids[..before] {
                    both(&one, &mut one_inner, id);
                    both(&all, &mut all_inner, id);
                }
                for record in batch(&ids) {
                    one.push(&mut one_inner, record);
                }
                let mut staged = batch(&ids);
                all.push_all(&mut all_inner, &mut staged);
                assert!(staged.is_empty());
                assert_eq!(
                    seqs_and_ids(&all_inner),
                    seqs_and_ids(&one_inner),
                    "capacity {capacity}, {before} before"
                );
                assert_eq!(all_inner.held, one_inner.held);
                assert_eq!(all_inner.next_seq, one_inner.next_seq);
            }
        }
    }

    #[test]
    fn a_ring_of_one_keeps_the_last_finish() {
        let ring = AuditRing::new(1, false);
        let mut inner = ring.lock();
        both(&ring, &mut inner, "a");
        let kept = AuditRing::newest(&inner, 5);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].seq, 2);
        assert!(matches!(kept[0].event, AuditEvent::Finished { .. }));
    }
}
