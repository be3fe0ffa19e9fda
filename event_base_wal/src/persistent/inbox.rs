//! [`Inbox`]: the queue from the senders to the writer thread, which lets state changes in
//! without waking the writer.
//!
//! Under [`SyncPolicy::Always`](crate::SyncPolicy::Always) a message costs three records:
//! its `Append` (a sender waits for its sync) and its `Processing` and `Complete` (nobody
//! waits; losing one in a crash costs a redelivery, never a loss). Over a channel every one
//! of them woke the writer when it was idle, and the state changes, which arrive while the
//! writer syncs someone's append, went to the disk as a `write` of their own before the next
//! append. Here a record nobody waits on is *quiet*: it is queued in order with everything
//! else, but wakes the writer only if it sleeps with no timer at all; a writer that sleeps
//! with its idle-sync timer (it has something to write or sync) is woken only by an *urgent*
//! request (a record someone waits on, a flush, a query, closing), and the quiet ones ride
//! along in its next write, or go at the timer (`idle_sync`).
//!
//! One queue keeps the order of every request: a state change is never written before the
//! append it follows, whichever way each came in.
//!
//! A writer that just answered a sender may *spin* for a bounded time before it sleeps
//! (`wait`'s `spin`): the sender it answered usually appends again within tens of
//! microseconds, and while the writer spins it counts as awake, so that append is queued
//! without a futex wake, and the writer takes it without a futex wait (two syscalls and a
//! thread wake-up a message for a lone sender). The spin watches a flag set by an urgent
//! send, not the lock, so the senders do not contend with it; it ends at its deadline
//! whatever happens, and the writer then sleeps as without it (an idle WAL spins at most
//! once, after its last answer).
//!
//! What it may import: the standard library.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How the writer sleeps, so a sender knows whether to wake it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sleep {
    /// Not sleeping: it takes the queue when it next looks.
    Awake,
    /// Spinning before it sleeps: awake for the senders (no wake-up), watching `ready`.
    Spinning,
    /// Until an urgent request or a deadline: a quiet one does not wake it.
    Timed,
    /// Until any request: nothing else would ever wake it.
    Untimed,
}

struct Queue<T> {
    items: Vec<T>,
    /// Urgent requests among `items`.
    urgent: usize,
    sleep: Sleep,
    /// The senders are done: the writer takes what is left and stops.
    closed: bool,
    /// The writer has stopped: nothing more is taken.
    stopped: bool,
    /// Wake-ups the senders made (for the tests).
    #[cfg(test)]
    wakes: u64,
}

/// A queue of `T` from many senders to one writer (see the module docs).
pub(crate) struct Inbox<T> {
    queue: Mutex<Queue<T>>,
    wake: Condvar,
    /// Set (under the lock) when an urgent request is queued or the inbox closes; what a
    /// spinning writer watches without taking the lock. A hint only: the writer decides
    /// under the lock.
    ready: AtomicBool,
}

/// What a wait ended on.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Woke {
    /// Requests were taken (urgent ones among them, or some at all when `any`).
    Taken,
    /// The deadline passed; whatever was queued was taken.
    Timeout,
    /// Closed and nothing left.
    Closed,
}

impl<T> Inbox<T> {
    /// An empty, open inbox.
    pub(crate) fn new() -> Inbox<T> {
        Inbox {
            queue: Mutex::new(Queue {
                items: Vec::new(),
                urgent: 0,
                sleep: Sleep::Awake,
                closed: false,
                stopped: false,
                #[cfg(test)]
                wakes: 0,
            }),
            wake: Condvar::new(),
            ready: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue<T>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `item`; wakes the writer if it sleeps and `urgent` (or it sleeps with no
    /// timer). Gives the item back if the writer has stopped.
    pub(crate) fn send(&self, item: T, urgent: bool) -> Result<(), T> {
        let mut q = self.lock();
        if q.stopped || q.closed {
            return Err(item);
        }
        q.items.push(item);
        q.urgent += usize::from(urgent);
        if urgent {
            self.ready.store(true, Ordering::Release);
        }
        let wake = match q.sleep {
            Sleep::Awake | Sleep::Spinning => false,
            Sleep::Timed => urgent,
            Sleep::Untimed => true,
        };
        if wake {
            q.sleep = Sleep::Awake;
            #[cfg(test)]
            {
                q.wakes += 1;
            }
            drop(q);
            self.wake.notify_one();
        }
        Ok(())
    }

    /// The senders are done: the writer takes what is left, then [`wait`](Self::wait)
    /// answers `Closed`.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.ready.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// The writer takes nothing more: later sends fail, and what is queued is handed back
    /// (for the writer to answer its waiters; dropped, they hear that their record was not
    /// written).
    pub(crate) fn stop(&self) -> Vec<T> {
        let mut q = self.lock();
        q.stopped = true;
        q.urgent = 0;
        std::mem::take(&mut q.items)
    }

    /// Moves every queued item into `into`, without waiting; returns how many.
    pub(crate) fn take(&self, into: &mut Vec<T>) -> usize {
        let mut q = self.lock();
        self.taken(&mut q);
        let n = q.items.len();
        into.append(&mut q.items);
        n
    }

    /// The urgent requests queued are being taken: neither the count nor the hint holds
    /// any longer (a closed inbox keeps its hint, so a spin never outlasts closing).
    fn taken(&self, q: &mut Queue<T>) {
        q.urgent = 0;
        if !q.closed {
            self.ready.store(false, Ordering::Relaxed);
        }
    }

    /// Spins, without the lock, until an urgent request or closing sets the hint or `until`
    /// passes. Yields now and then, so that on a busy machine the sender it waits for gets
    /// the CPU.
    fn spin(&self, until: Instant) {
        let mut round = 0u32;
        while !self.ready.load(Ordering::Acquire) {
            round = round.wrapping_add(1);
            if round.is_multiple_of(16) {
                if Instant::now() >= until {
                    return;
                }
                std::thread::yield_now();
            } else {
                for _ in 0..16 {
                    std::hint::spin_loop();
                }
            }
        }
    }

    /// The writer's wait for its next batch: returns at once if an urgent request (or
    /// anything, with `idle` `None`) is queued or the inbox closed. Otherwise, with quiet
    /// requests queued or `unsynced` data, it sleeps with a timer of `idle` (quiet requests
    /// do not wake it) and answers `Timeout` when it rings; with nothing at all it sleeps
    /// until any request comes. Before the first sleep it spins for up to `spin` (zero: not
    /// at all) watching for an urgent request, counted as awake meanwhile (see the module
    /// docs). Moves every queued item into `into`.
    pub(crate) fn wait(
        &self,
        into: &mut Vec<T>,
        idle: Option<Duration>,
        unsynced: bool,
        spin: Duration,
    ) -> Woke {
        let mut q = self.lock();
        let mut deadline = None;
        let mut spun = spin.is_zero();
        loop {
            let ready = q.urgent > 0 || (idle.is_none() && !q.items.is_empty());
            if ready || q.closed {
                q.sleep = Sleep::Awake;
                self.taken(&mut q);
                if q.items.is_empty() && q.closed {
                    return Woke::Closed;
                }
                into.append(&mut q.items);
                return Woke::Taken;
            }
            if !spun {
                spun = true;
                q.sleep = Sleep::Spinning;
                drop(q);
                self.spin(Instant::now() + spin);
                q = self.lock();
                q.sleep = Sleep::Awake;
                continue;
            }
            if deadline.is_none() && (unsynced || !q.items.is_empty()) {
                deadline = idle.map(|idle| Instant::now() + idle);
            }
            match deadline {
                None => {
                    q.sleep = Sleep::Untimed;
                    q = self.wake.wait(q).unwrap_or_else(PoisonError::into_inner);
                }
                Some(at) => {
                    let now = Instant::now();
                    if now >= at {
                        q.sleep = Sleep::Awake;
                        self.taken(&mut q);
                        into.append(&mut q.items);
                        return Woke::Timeout;
                    }
                    q.sleep = Sleep::Timed;
                    q = self
                        .wake
                        .wait_timeout(q, at - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        }
    }

    /// Waits until an urgent request is queued, the inbox closes, or `deadline` passes;
    /// then moves every queued item into `into`. Returns whether it took any.
    pub(crate) fn wait_until(&self, into: &mut Vec<T>, deadline: Instant) -> bool {
        let mut q = self.lock();
        loop {
            let now = Instant::now();
            if q.urgent > 0 || q.closed || now >= deadline {
                q.sleep = Sleep::Awake;
                self.taken(&mut q);
                let n = q.items.len();
                into.append(&mut q.items);
                return n > 0;
            }
            q.sleep = Sleep::Timed;
            q = self
                .wake
                .wait_timeout(q, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn order_is_kept_across_quiet_and_urgent_items() {
        let inbox = Inbox::new();
        for n in 0..10 {
            inbox.send(n, n % 3 == 0).expect("open");
        }
        let mut got = Vec::new();
        assert_eq!(
            inbox.wait(&mut got, None, false, Duration::ZERO),
            Woke::Taken
        );
        assert_eq!(got, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn a_quiet_item_does_not_end_a_timed_wait_but_an_urgent_one_does() {
        let inbox = Arc::new(Inbox::new());
        let sender = {
            let inbox = inbox.clone();
            std::thread::spawn(move || {
                // Wait until the writer sleeps with its timer, so the quiet item finds it
                // asleep (a wake-up here would end the wait with only the quiet one).
                while inbox.lock().sleep != Sleep::Timed {
                    std::thread::yield_now();
                }
                inbox.send("quiet", false).expect("open");
                // Asleep again (or still) before the urgent one, so each wake-up is counted.
                let until = Instant::now() + Duration::from_secs(10);
                while inbox.lock().sleep != Sleep::Timed && Instant::now() < until {
                    std::thread::yield_now();
                }
                inbox.send("urgent", true).expect("open");
            })
        };
        let mut got = Vec::new();
        let idle = Some(Duration::from_secs(60));
        assert_eq!(
            inbox.wait(&mut got, idle, true, Duration::ZERO),
            Woke::Taken
        );
        sender.join().expect("sender");
        assert_eq!(got, vec!["quiet", "urgent"]);
        assert_eq!(inbox.lock().wakes, 1, "woken by the urgent one only");
    }

    #[test]
    fn a_quiet_item_wakes_a_writer_with_no_timer() {
        let inbox = Arc::new(Inbox::new());
        let sender = {
            let inbox = inbox.clone();
            std::thread::spawn(move || {
                while inbox.lock().sleep != Sleep::Untimed {
                    std::thread::yield_now();
                }
                inbox.send(1, false).expect("open");
                // Woken, the writer goes back to sleep with its timer for company.
                let until = Instant::now() + Duration::from_secs(10);
                let mut timed = false;
                while !timed && Instant::now() < until {
                    timed = inbox.lock().sleep == Sleep::Timed;
                    std::thread::yield_now();
                }
                inbox.send(2, true).expect("open");
                timed
            })
        };
        let mut got = Vec::new();
        let idle = Some(Duration::from_secs(60));
        assert_eq!(
            inbox.wait(&mut got, idle, false, Duration::ZERO),
            Woke::Taken
        );
        assert!(
            sender.join().expect("sender"),
            "the quiet item woke the writer, which then slept on its timer"
        );
        assert_eq!(got, vec![1, 2]);
    }

    #[test]
    fn an_urgent_item_sent_while_the_writer_spins_is_taken_without_a_wake_up() {
        let inbox = Arc::new(Inbox::new());
        let sender = {
            let inbox = inbox.clone();
            std::thread::spawn(move || {
                while inbox.lock().sleep != Sleep::Spinning {
                    std::thread::yield_now();
                }
                inbox.send("quiet", false).expect("open");
                inbox.send("urgent", true).expect("open");
            })
        };
        let mut got = Vec::new();
        // A spin far longer than the test: it must end on the urgent item, not its deadline.
        let spin = Duration::from_secs(3600);
        let idle = Some(Duration::from_secs(3600));
        assert_eq!(inbox.wait(&mut got, idle, true, spin), Woke::Taken);
        sender.join().expect("sender");
        assert_eq!(got, vec!["quiet", "urgent"]);
        assert_eq!(inbox.lock().wakes, 0, "a spinning writer is not woken");
        assert!(!inbox.ready.load(Ordering::Relaxed), "the hint is cleared");
    }

    #[test]
    fn the_spin_is_bounded_and_ends_in_a_sleep_that_quiet_items_do_not_end() {
        let inbox = Arc::new(Inbox::new());
        let sender = {
            let inbox = inbox.clone();
            std::thread::spawn(move || {
                // Spinning or already asleep on the timer: a quiet item ends neither.
                while inbox.lock().sleep == Sleep::Awake {
                    std::thread::yield_now();
                }
                inbox.send("quiet", false).expect("open");
                // The spin runs out and the writer sleeps on its timer: the spin is bounded,
                // and a writer with nothing urgent to do does not keep spinning.
                while inbox.lock().sleep != Sleep::Timed {
                    std::thread::yield_now();
                }
                inbox.send("urgent", true).expect("open");
            })
        };
        let mut got = Vec::new();
        let spin = Duration::from_millis(1);
        let idle = Some(Duration::from_secs(3600));
        assert_eq!(inbox.wait(&mut got, idle, true, spin), Woke::Taken);
        sender.join().expect("sender");
        assert_eq!(got, vec!["quiet", "urgent"]);
        assert_eq!(inbox.lock().wakes, 1, "asleep after the spin: woken once");
    }

    #[test]
    fn closing_ends_a_spin() {
        let inbox = Arc::new(Inbox::<u8>::new());
        let closer = {
            let inbox = inbox.clone();
            std::thread::spawn(move || {
                while inbox.lock().sleep != Sleep::Spinning {
                    std::thread::yield_now();
                }
                inbox.close();
            })
        };
        let mut got = Vec::new();
        let spin = Duration::from_secs(3600);
        assert_eq!(inbox.wait(&mut got, None, false, spin), Woke::Closed);
        closer.join().expect("closer");
    }

    #[test]
    fn a_deadline_takes_the_quiet_items() {
        let inbox = Inbox::new();
        inbox.send(7, false).expect("open");
        let mut got = Vec::new();
        assert_eq!(
            inbox.wait(&mut got, Some(Duration::ZERO), false, Duration::ZERO),
            Woke::Timeout
        );
        assert_eq!(got, vec![7]);
    }

    #[test]
    fn closing_hands_over_what_is_left_then_ends() {
        let inbox = Inbox::new();
        inbox.send(1, false).expect("open");
        inbox.close();
        assert!(inbox.send(2, true).is_err(), "closed: refused");
        let mut got = Vec::new();
        assert_eq!(
            inbox.wait(&mut got, None, false, Duration::ZERO),
            Woke::Taken
        );
        assert_eq!(got, vec![1]);
        assert_eq!(
            inbox.wait(&mut got, None, false, Duration::ZERO),
            Woke::Closed
        );
        inbox.stop();
        assert!(inbox.send(3, true).is_err(), "stopped: refused");
    }
}
