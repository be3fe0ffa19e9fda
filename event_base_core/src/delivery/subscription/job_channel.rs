//! [`job_channel`]: the channels that carry [`Job`]s to workers (a worker's private inbox and
//! a topic's shared work channel), able to say "empty" without taking the channel's lock.
//!
//! A worker looks into its inbox and its topic's work channel before every message it claims
//! from the queue, and both are nearly always empty: they only carry addressed messages,
//! broadcast copies and retries. A `try_recv` on a flume channel takes its lock even when
//! there is nothing in it, and the work channel's lock is shared by every worker of the
//! topic, so its cache line would travel between cores once per message for nothing. A count
//! of queued jobs, read with a plain load, answers the common case.
//!
//! The count is raised before a job is sent and lowered after one is received, so it is
//! never lower than what the channel holds: a zero means the channel really is empty (a job
//! sent a moment later is seen by the worker's next look or wakes it where it parks).
//!
//! A worker may also park on a bell of its own (a `Notify`) instead of on the channel
//! ([`JobReceiver::ring_on`]): every job sent rings the channel's bells, after the job is in
//! the channel. Parking on a channel with flume registers a hook (an allocation and the
//! channel's lock, twice: to register and to withdraw it) every time; a worker whose queue is
//! often empty (1,000 topics fed in turn, or one message at a time) parks after nearly every
//! message, and its inbox and its topic's work channel are nearly always empty, so one bell
//! for both and for its stop signal costs much less (`docs/benchmarks.md`, "Issue 14, sixth
//! round"). A bell keeps one permit, so a job sent between a worker's last look and its park
//! wakes it at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use tokio::sync::Notify;

use crate::delivery::subscription::job::Job;

/// The bells rung when a job is sent: one per worker that parks on its bell instead of on
/// the channel (the topic's workers, for its work channel; the worker, for its inbox).
type Bells = Arc<RwLock<Vec<Arc<Notify>>>>;

/// Makes a bounded job channel.
pub(crate) fn job_channel(capacity: usize) -> (JobSender, JobReceiver) {
    let (tx, rx) = flume::bounded(capacity);
    let queued = Arc::new(AtomicUsize::new(0));
    let bells = Bells::default();
    (
        JobSender {
            tx,
            queued: queued.clone(),
            bells: bells.clone(),
        },
        JobReceiver { rx, queued, bells },
    )
}

/// Wakes every worker that parks on its bell for this channel (a job was just sent).
#[inline]
fn ring(bells: &Bells) {
    if let Ok(bells) = bells.read() {
        for bell in bells.iter() {
            bell.notify_one();
        }
    }
}

/// The sending side.
#[derive(Debug, Clone)]
pub(crate) struct JobSender {
    tx: flume::Sender<Job>,
    queued: Arc<AtomicUsize>,
    bells: Bells,
}

impl JobSender {
    /// Sends without waiting; hands the job back if the channel is full or closed.
    pub(crate) fn try_send(&self, job: Job) -> Result<(), Job> {
        self.queued.fetch_add(1, Ordering::AcqRel);
        match self.tx.try_send(job) {
            Ok(()) => {
                ring(&self.bells);
                Ok(())
            }
            Err(flume::TrySendError::Full(job) | flume::TrySendError::Disconnected(job)) => {
                self.queued.fetch_sub(1, Ordering::AcqRel);
                Err(job)
            }
        }
    }

    /// Sends, waiting for room. Fails only when every receiver is gone (the job is dropped:
    /// the WAL still holds its message).
    pub(crate) async fn send(&self, job: Job) -> Result<(), ()> {
        self.queued.fetch_add(1, Ordering::AcqRel);
        match self.tx.send_async(job).await {
            Ok(()) => {
                ring(&self.bells);
                Ok(())
            }
            Err(_) => {
                self.queued.fetch_sub(1, Ordering::AcqRel);
                Err(())
            }
        }
    }
}

/// The receiving side.
#[derive(Debug, Clone)]
pub(crate) struct JobReceiver {
    rx: flume::Receiver<Job>,
    queued: Arc<AtomicUsize>,
    bells: Bells,
}

impl JobReceiver {
    /// A job if one is waiting; never waits, and costs one load when the channel is empty.
    #[inline]
    pub(crate) fn try_recv(&self) -> Option<Job> {
        if self.queued.load(Ordering::Acquire) == 0 {
            return None;
        }
        let job = self.rx.try_recv().ok()?;
        self.queued.fetch_sub(1, Ordering::AcqRel);
        Some(job)
    }

    /// From now on, every job sent on this channel rings `bell` (after the job is in the
    /// channel), so a worker may park on its bell instead of on [`recv`](Self::recv). A
    /// shared channel rings every bell rung on it: each worker wakes, looks, and one takes
    /// the job.
    pub(crate) fn ring_on(&self, bell: &Arc<Notify>) {
        if let Ok(mut bells) = self.bells.write() {
            if !bells.iter().any(|b| Arc::ptr_eq(b, bell)) {
                bells.push(bell.clone());
            }
        }
    }

    /// Waits for a job; `None` once every sender is gone.
    pub(crate) async fn recv(&self) -> Option<Job> {
        let job = self.rx.recv_async().await.ok()?;
        self.queued.fetch_sub(1, Ordering::AcqRel);
        Some(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::emessage::EMessage;

    fn job() -> Job {
        Job {
            message: Arc::new(EMessage::standard("t", b"x".to_vec())),
            group: None,
            claim: None,
            copies: None,
        }
    }

    #[tokio::test]
    async fn empty_full_and_closed() {
        let (tx, rx) = job_channel(1);
        assert!(rx.try_recv().is_none());
        assert!(tx.try_send(job()).is_ok());
        assert!(tx.try_send(job()).is_err(), "full");
        assert!(rx.try_recv().is_some());
        assert!(rx.try_recv().is_none());
        tx.send(job()).await.expect("room");
        assert!(rx.recv().await.is_some());
        drop(rx);
        assert!(tx.try_send(job()).is_err(), "closed");
        assert!(tx.send(job()).await.is_err(), "closed");
    }

    #[tokio::test]
    async fn a_job_sent_rings_the_bells_rung_on_the_channel() {
        let (tx, rx) = job_channel(2);
        let (a, b, other) = (
            Arc::new(Notify::new()),
            Arc::new(Notify::new()),
            Arc::new(Notify::new()),
        );
        rx.ring_on(&a);
        rx.clone().ring_on(&b);
        rx.ring_on(&a);
        assert_eq!(
            rx.bells.read().map(|v| v.len()).ok(),
            Some(2),
            "a bell once"
        );
        assert!(tx.try_send(job()).is_ok());
        // Each bell holds its permit: a worker that looked before the job was sent and parks
        // only now still wakes. A bell not rung on this channel stays quiet.
        a.notified().await;
        b.notified().await;
        assert!(poll_once(std::pin::pin!(other.notified())).is_pending());
        assert!(rx.try_recv().is_some());
        tx.send(job()).await.expect("room");
        a.notified().await;
        // A job the channel refuses (full) rings nothing.
        assert!(tx.try_send(job()).is_ok());
        a.notified().await;
        assert!(tx.try_send(job()).is_err(), "full");
        assert!(poll_once(std::pin::pin!(a.notified())).is_pending());
    }

    /// Polls `f` once with a waker that does nothing.
    fn poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        f.poll(&mut cx)
    }

    #[tokio::test]
    async fn a_job_sent_while_waiting_arrives() {
        let (tx, rx) = job_channel(4);
        let waiter = tokio::spawn(async move { rx.recv().await.is_some() });
        tokio::task::yield_now().await;
        assert!(tx.try_send(job()).is_ok());
        assert!(waiter.await.expect("joined"));
    }
}
