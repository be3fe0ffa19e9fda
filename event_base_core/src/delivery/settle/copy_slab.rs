//! [`CopySlab`]: the state words of the fanned-out messages of one topic log, addressed by
//! index, so that a copy's start and end are one atomic operation on a word its job carries
//! the index of, not a lookup by id in the fan-out table (`fan_out.rs`).
//!
//! A message appended once for every handler of its topic (`delivery/log/`) takes an index
//! here ([`open`](CopySlab::open)); the log's slot keeps it, a claim hands it to the worker
//! in the claim's receipt, and the job carries it through retries and a dead worker's
//! hand-over. A word holds the copies still out (low 32 bits), whether some copy began
//! (the first one alone marks the WAL record `Processing`) and whether some copy died (then
//! the last one collects the failures, kept aside). The last copy's end frees the index.
//!
//! Indices come from chunks made on first use, so a topic pays for the fan-outs it has open
//! at its busiest, not for its bound. With every index taken, `open` says so and the
//! message goes through the fan-out table instead.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::delivery::settle::fan_out::{CopyEnded, Failure};

/// Words a chunk.
const CHUNK: usize = 256;
/// Chunks a slab, at most: its most open fan-outs are `CHUNK * CHUNKS`.
const CHUNKS: usize = 64;

/// Some copy began.
const BEGUN: u64 = 1 << 32;
/// Some copy died.
const FAILED: u64 = 1 << 33;
/// The copies still out.
const REMAINING: u64 = u32::MAX as u64;

/// The state words of one topic log's fanned-out messages (see the module docs).
pub(crate) struct CopySlab {
    chunks: Box<[OnceLock<Box<[AtomicU64]>>]>,
    /// The next index never used.
    fresh: AtomicU32,
    /// Indices freed, for reuse.
    free: Mutex<Vec<u32>>,
    /// The failures of copies that died, by index, until their message's last copy ends.
    failures: Mutex<Vec<(u32, Failure)>>,
}

impl std::fmt::Debug for CopySlab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopySlab")
            .field("fresh", &self.fresh.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Default for CopySlab {
    fn default() -> Self {
        CopySlab {
            chunks: (0..CHUNKS).map(|_| OnceLock::new()).collect(),
            fresh: AtomicU32::new(0),
            free: Mutex::new(Vec::new()),
            failures: Mutex::new(Vec::new()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Pushes and pops only: a panic elsewhere cannot leave the lists half-changed.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl CopySlab {
    fn word(&self, i: u32) -> &AtomicU64 {
        let i = i as usize;
        let chunk =
            self.chunks[i / CHUNK].get_or_init(|| (0..CHUNK).map(|_| AtomicU64::new(0)).collect());
        &chunk[i % CHUNK]
    }

    /// An index for a message with `copies` copies about to go out; `None` when every
    /// index is taken.
    pub(crate) fn open(&self, copies: u32) -> Option<u32> {
        let i = match lock(&self.free).pop() {
            Some(i) => i,
            None => self
                .fresh
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    ((n as usize) < CHUNK * CHUNKS).then_some(n + 1)
                })
                .ok()?,
        };
        self.word(i).store(u64::from(copies), Ordering::Release);
        Some(i)
    }

    /// The message at `i` did not go out after all (its append was refused): the index is
    /// free again.
    pub(crate) fn close(&self, i: u32) {
        self.word(i).store(0, Ordering::Release);
        lock(&self.free).push(i);
    }

    /// A copy of the message at `i` begins; `true` for the first (which alone marks the
    /// record `Processing` in the WAL).
    pub(crate) fn begin(&self, i: u32) -> bool {
        self.word(i).fetch_or(BEGUN, Ordering::AcqRel) & BEGUN == 0
    }

    /// One copy of the message at `i` ended (`failure`: as a dead letter); the last one
    /// frees the index and carries every failure.
    pub(crate) fn copy_ended(&self, i: u32, failure: Option<Failure>) -> CopyEnded {
        let word = self.word(i);
        if let Some(f) = failure {
            // Recorded before the count goes down: the last copy, which reads the list
            // after its own count, then finds it.
            lock(&self.failures).push((i, f));
            word.fetch_or(FAILED, Ordering::AcqRel);
        }
        let before = word.fetch_sub(1, Ordering::AcqRel);
        if before & REMAINING > 1 {
            return CopyEnded::Waiting;
        }
        let failures = if before & FAILED != 0 {
            let mut all = lock(&self.failures);
            let mut mine = Vec::new();
            let mut k = 0;
            while k < all.len() {
                if all[k].0 == i {
                    mine.push(all.swap_remove(k).1);
                } else {
                    k += 1;
                }
            }
            mine
        } else {
            Vec::new()
        };
        self.close(i);
        CopyEnded::Last(failures)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::delivery::settle::fan_out::failure;

    #[test]
    fn the_last_copy_ends_the_message_with_every_failure_and_frees_its_index() {
        let s = CopySlab::default();
        let i = s.open(3).unwrap();
        assert!(s.begin(i), "the first copy begins the record");
        assert!(!s.begin(i), "the others do not");
        assert!(matches!(s.copy_ended(i, None), CopyEnded::Waiting));
        assert!(matches!(
            s.copy_ended(i, Some(failure("notify"))),
            CopyEnded::Waiting
        ));
        match s.copy_ended(i, None) {
            CopyEnded::Last(f) => {
                assert_eq!(f.len(), 1);
                assert_eq!(&*f[0].handler, "notify");
            }
            other => panic!("expected the last copy, got {other:?}"),
        }
        // Freed: the next message reuses it, with a clean word.
        let j = s.open(2).unwrap();
        assert_eq!(i, j);
        assert!(s.begin(j));
        assert!(matches!(s.copy_ended(j, None), CopyEnded::Waiting));
        assert!(matches!(s.copy_ended(j, None), CopyEnded::Last(f) if f.is_empty()));
    }

    #[test]
    fn failures_of_other_messages_stay_with_them() {
        let s = CopySlab::default();
        let a = s.open(2).unwrap();
        let b = s.open(2).unwrap();
        assert!(matches!(
            s.copy_ended(a, Some(failure("x"))),
            CopyEnded::Waiting
        ));
        assert!(matches!(
            s.copy_ended(b, Some(failure("y"))),
            CopyEnded::Waiting
        ));
        match s.copy_ended(b, None) {
            CopyEnded::Last(f) => {
                assert_eq!(f.iter().map(|f| &*f.handler).collect::<Vec<_>>(), ["y"])
            }
            other => panic!("{other:?}"),
        }
        match s.copy_ended(a, None) {
            CopyEnded::Last(f) => {
                assert_eq!(f.iter().map(|f| &*f.handler).collect::<Vec<_>>(), ["x"])
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn with_every_index_taken_open_says_so() {
        let s = CopySlab::default();
        let all: Vec<u32> = (0..CHUNK * CHUNKS).map(|_| s.open(1).unwrap()).collect();
        assert!(s.open(1).is_none());
        s.close(all[7]);
        assert_eq!(s.open(1), Some(all[7]));
    }

    #[test]
    fn concurrent_ends_give_exactly_one_last() {
        let s = Arc::new(CopySlab::default());
        for _ in 0..200 {
            let i = s.open(4).unwrap();
            let lasts: usize = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..4)
                    .map(|k| {
                        let s = &s;
                        scope.spawn(move || {
                            let f = (k == 2).then(|| failure("two"));
                            match s.copy_ended(i, f) {
                                CopyEnded::Last(f) => {
                                    assert_eq!(f.len(), 1, "the failure reaches the last copy");
                                    1
                                }
                                _ => 0,
                            }
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).sum()
            });
            assert_eq!(lasts, 1);
        }
    }

    mod model {
        use proptest::prelude::*;

        use super::*;

        /// One step: open a message with some copies, or begin or end a copy (with or without
        /// a failure) of the `pick`-th message still open, whichever that is by then.
        #[derive(Debug, Clone)]
        enum Op {
            Open {
                copies: u32,
            },
            Begin {
                pick: usize,
            },
            End {
                pick: usize,
                failed: bool,
            },
            /// The append was refused: the message never goes out.
            Refused,
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                (1u32..5).prop_map(|copies| Op::Open { copies }),
                any::<usize>().prop_map(|pick| Op::Begin { pick }),
                (any::<usize>(), any::<bool>()).prop_map(|(pick, failed)| Op::End { pick, failed }),
                Just(Op::Refused),
            ]
        }

        /// What the model keeps of a message still open.
        struct Open {
            index: u32,
            /// Which message this is, named in its failures' handler.
            name: String,
            left: u32,
            begun: bool,
            failures: Vec<String>,
        }

        proptest! {
            /// Against a model of every open message: the first `begin` of a message alone
            /// says so, whichever copies end first; exactly its last copy says `Last`, carrying
            /// exactly that message's failures; no two open messages share an index; and a
            /// freed or refused index is reused with a clean word.
            #[test]
            fn each_message_ends_once_with_its_own_failures(
                ops in proptest::collection::vec(op(), 1..300),
            ) {
                let slab = CopySlab::default();
                let mut open: Vec<Open> = Vec::new();
                let mut named = 0usize;
                for op in ops {
                    match op {
                        Op::Open { copies } => {
                            let index = slab.open(copies).expect("far below the slab's bound");
                            prop_assert!(open.iter().all(|o| o.index != index), "index {index} is open twice");
                            named += 1;
                            open.push(Open { index, name: format!("m{named}"), left: copies, begun: false, failures: Vec::new() });
                        }
                        Op::Refused => {
                            let index = slab.open(2).expect("far below the slab's bound");
                            prop_assert!(open.iter().all(|o| o.index != index));
                            slab.close(index);
                        }
                        Op::Begin { pick } if !open.is_empty() => {
                            let k = pick % open.len();
                            let m = &mut open[k];
                            prop_assert_eq!(slab.begin(m.index), !m.begun);
                            m.begun = true;
                        }
                        Op::End { pick, failed } if !open.is_empty() => {
                            let k = pick % open.len();
                            let m = &mut open[k];
                            let failure = failed.then(|| crate::delivery::settle::fan_out::failure(&m.name));
                            if failed {
                                m.failures.push(m.name.clone());
                            }
                            m.left -= 1;
                            match slab.copy_ended(m.index, failure) {
                                CopyEnded::Waiting => prop_assert!(m.left > 0, "the last copy said Waiting"),
                                CopyEnded::Last(f) => {
                                    prop_assert_eq!(m.left, 0, "a copy before the last said Last");
                                    let got: Vec<String> = f.iter().map(|f| f.handler.to_string()).collect();
                                    prop_assert_eq!(&got, &m.failures);
                                    open.swap_remove(k);
                                }
                                CopyEnded::Alone(_) => prop_assert!(false, "a slab's copy is never alone"),
                            }
                        }
                        Op::Begin { .. } | Op::End { .. } => {}
                    }
                }
            }
        }
    }
}
