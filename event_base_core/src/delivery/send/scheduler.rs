//! The one timer of a system: delayed deliveries (`deliver_at`) and retries with a delay.
//!
//! A single task keeps a min-heap ordered by due time and sleeps until the earliest entry; new
//! entries arrive on a channel and wake it. There is no task or timer per message, and an idle
//! scheduler waits on its channel without polling. Firing an entry never blocks the scheduler:
//! when a topic's channel is full, a short-lived task waits for room instead.
//!
//! Delayed messages not yet due are also kept by id ([`Waiting`]), so that
//! `EventBus::cancel` can take one back: a cancelled entry is dropped when it comes due.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::backend::queue::TrySendError;
use crate::delivery::in_flight::InFlight;
use crate::delivery::send::wall_clock::WallClock;
use crate::delivery::subscription::job::{ClaimTicket, Job, Target};
use crate::delivery::subscription::topic_table::TopicEntry;
use crate::message::emessage::EMessage;

/// What to do when an entry is due.
pub(crate) enum Scheduled {
    /// A delayed message not yet routed: it goes to its topic's queue.
    Message {
        entry: Arc<TopicEntry>,
        message: Arc<EMessage>,
    },
    /// A delayed message claimed early from a queue that needs acknowledgement (another
    /// node's clock ran ahead): it goes back to its topic's queue, and the entry it was
    /// claimed from is acked once it is there. Until then the entry stays pending, so a crash
    /// meanwhile loses nothing.
    Claimed {
        entry: Arc<TopicEntry>,
        message: Arc<EMessage>,
        claim: Arc<ClaimTicket>,
    },
    /// A retry of one delivery: it goes straight to the workers.
    Job {
        entry: Arc<TopicEntry>,
        job: Job,
        target: Target,
    },
    /// A delayed message kept in [`Waiting`] until it is due: fired only if no cancel took
    /// it back meanwhile. Made by [`SchedulerHandle::schedule`] out of a `Message`.
    Cancellable {
        message: Box<Scheduled>,
        id: Arc<str>,
        waiting: Waiting,
    },
}

/// The ids of the delayed messages the scheduler holds and has not fired, each with the
/// number of its entries (one per handler of its topic): what `EventBus::cancel` looks up.
#[derive(Clone, Default)]
pub(crate) struct Waiting(Arc<Mutex<HashMap<Arc<str>, u32>>>);

impl Waiting {
    fn add(&self, id: &Arc<str>) {
        if let Ok(mut map) = self.0.lock() {
            *map.entry(id.clone()).or_insert(0) += 1;
        }
    }

    /// Whether one entry of `id` may fire (it was not cancelled); counts it out.
    fn take_one(&self, id: &str) -> bool {
        let Ok(mut map) = self.0.lock() else {
            return true;
        };
        match map.get_mut(id) {
            Some(n) if *n > 1 => {
                *n -= 1;
                true
            }
            Some(_) => {
                map.remove(id);
                true
            }
            None => false,
        }
    }

    /// Takes every waiting entry of `id` back; `false` if none waits (unknown, fired).
    fn withdraw(&self, id: &str) -> bool {
        self.0.lock().is_ok_and(|mut map| map.remove(id).is_some())
    }
}

impl Scheduled {
    fn fire(self) {
        match self {
            Scheduled::Cancellable {
                message,
                id,
                waiting,
            } => {
                if waiting.take_one(&id) {
                    message.fire();
                } else {
                    tracing::debug!(target: crate::constant::target::DELIVERY, id = %id, "delayed message cancelled; not delivered");
                }
            }
            Scheduled::Message { entry, message } => {
                if let Err(TrySendError::Full(message)) = entry.producer.try_send(message) {
                    tokio::spawn(async move {
                        if let Err(e) = entry.producer.send(message).await {
                            tracing::warn!(target: crate::constant::target::DELIVERY, error = %e, "delayed message not enqueued; it stays in the WAL for replay");
                        }
                    });
                }
            }
            Scheduled::Claimed {
                entry,
                message,
                claim,
            } => match entry.producer.try_send(message) {
                Ok(()) => claim.ack(),
                Err(TrySendError::Full(message)) => {
                    tokio::spawn(async move {
                        match entry.producer.send(message).await {
                            Ok(()) => claim.ack(),
                            Err(e) => {
                                tracing::warn!(target: crate::constant::target::DELIVERY, error = %e, "delayed message not enqueued; its entry is given back to the queue");
                            }
                        }
                    });
                }
                Err(TrySendError::Failed(e)) => {
                    tracing::warn!(target: crate::constant::target::DELIVERY, error = %e, "delayed message not enqueued; its entry is given back to the queue");
                }
            },
            Scheduled::Job { entry, job, target } => entry.push_detached(job, target),
        }
    }
}

struct Entry {
    at: Instant,
    seq: u64,
    what: Scheduled,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.seq == other.seq
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    // Reversed: BinaryHeap is a max-heap, the earliest entry must come out first.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .at
            .cmp(&self.at)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// Where entries are sent.
#[derive(Clone)]
pub(crate) struct SchedulerHandle {
    tx: flume::Sender<(Instant, Scheduled)>,
    in_flight: Arc<InFlight>,
    next_due: NextDue,
    wall: Arc<WallClock>,
    waiting: Waiting,
}

/// When the scheduler's earliest entry is due, shared with whoever needs to know (Drain).
#[derive(Clone, Debug)]
pub(crate) struct NextDue {
    base: Instant,
    /// Microseconds after `base`; `u64::MAX` when nothing is scheduled.
    micros: Arc<std::sync::atomic::AtomicU64>,
    /// Entries in the heap when `micros` was written. Until it equals the number of timers
    /// handed to the scheduler, some entry is still on its way and `micros` may be too late.
    in_heap: Arc<std::sync::atomic::AtomicU64>,
}

impl NextDue {
    fn new() -> Self {
        NextDue {
            base: Instant::now(),
            micros: Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX)),
            in_heap: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        }
    }

    fn set(&self, at: Option<Instant>, in_heap: usize) {
        // `u64::MAX` means "nothing": a time further than that (half a million years) is
        // one microsecond short of it.
        let v = at.map_or(u64::MAX, |at| {
            let micros = at.saturating_duration_since(self.base).as_micros();
            u64::try_from(micros).unwrap_or(u64::MAX).min(u64::MAX - 1)
        });
        self.micros.store(v, std::sync::atomic::Ordering::Release);
        self.in_heap
            .store(in_heap as u64, std::sync::atomic::Ordering::Release);
    }

    /// Whether, with `timers` entries handed to the scheduler, all of them are due after
    /// `deadline`. `false` while some entry has not reached the heap yet.
    pub(crate) fn all_after(&self, timers: u64, deadline: Instant) -> bool {
        if self.in_heap.load(std::sync::atomic::Ordering::Acquire) != timers {
            return false;
        }
        let v = self.micros.load(std::sync::atomic::Ordering::Acquire);
        v == u64::MAX
            || self
                .base
                .checked_add(Duration::from_micros(v))
                .is_none_or(|at| at > deadline)
    }
}

impl SchedulerHandle {
    pub(crate) fn new(in_flight: Arc<InFlight>) -> (SchedulerHandle, SchedulerReceiver) {
        let (tx, rx) = flume::unbounded();
        (
            SchedulerHandle {
                tx,
                in_flight,
                next_due: NextDue::new(),
                wall: Arc::new(WallClock::new()),
                waiting: Waiting::default(),
            },
            rx,
        )
    }

    pub(crate) fn next_due(&self) -> NextDue {
        self.next_due.clone()
    }

    pub(crate) fn schedule(&self, at: Instant, what: Scheduled) {
        let what = match what {
            Scheduled::Message { entry, message } => {
                let id: Arc<str> = Arc::from(message.id.as_str());
                self.waiting.add(&id);
                Scheduled::Cancellable {
                    message: Box::new(Scheduled::Message { entry, message }),
                    id,
                    waiting: self.waiting.clone(),
                }
            }
            other => other,
        };
        self.in_flight.timer_added();
        if let Err(flume::SendError((_, what))) = self.tx.send((at, what)) {
            // The scheduler is gone (shutdown); the WAL keeps the message for replay.
            self.in_flight.timer_fired();
            if let Scheduled::Cancellable { id, waiting, .. } = &what {
                waiting.take_one(id);
            }
            drop(what);
        }
    }

    /// Schedules `what` for the wall-clock time `at` (a message's `deliver_at`). All such times
    /// are converted against one anchor, so entries go out in the order of their `at`.
    pub(crate) fn schedule_wall(&self, at: SystemTime, what: Scheduled) {
        self.schedule(self.wall.instant_for(at), what)
    }

    /// Takes back every entry of the delayed message `id` that has not fired: `false` if
    /// there is none (no such message, or it is already due and gone to its queue).
    pub(crate) fn withdraw(&self, id: &str) -> bool {
        self.waiting.withdraw(id)
    }

    pub(crate) fn schedule_after(&self, delay: Duration, what: Scheduled) {
        self.schedule(crate::clock::instant_after(Instant::now(), delay), what)
    }
}

/// The scheduler task's end of the channel its handle sends on.
pub(crate) type SchedulerReceiver = flume::Receiver<(Instant, Scheduled)>;

/// The scheduler task.
pub(crate) async fn run_scheduler(
    rx: SchedulerReceiver,
    in_flight: Arc<InFlight>,
    next_due: NextDue,
) {
    let mut heap: BinaryHeap<Entry> = BinaryHeap::new();
    let mut seq = 0u64;
    let sleep = tokio::time::sleep(Duration::from_secs(3600));
    tokio::pin!(sleep);
    loop {
        let now = Instant::now();
        while heap.peek().is_some_and(|e| e.at <= now) {
            if let Some(e) = heap.pop() {
                e.what.fire();
                in_flight.timer_fired();
            }
        }
        if let Some(next) = heap.peek() {
            sleep.as_mut().reset(next.at);
        }
        next_due.set(heap.peek().map(|e| e.at), heap.len());
        in_flight.poke();
        tokio::select! {
            biased;
            received = rx.recv_async() => match received {
                Ok((at, what)) => {
                    seq += 1;
                    heap.push(Entry { at, seq, what });
                    // Take everything already waiting before sleeping again.
                    while let Ok((at, what)) = rx.try_recv() {
                        seq += 1;
                        heap.push(Entry { at, seq, what });
                    }
                }
                Err(_) => return,
            },
            _ = &mut sleep, if !heap.is_empty() => {}
        }
    }
}
