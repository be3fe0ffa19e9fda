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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::delivery::job::Job;

/// Makes a bounded job channel.
pub(crate) fn job_channel(capacity: usize) -> (JobSender, JobReceiver) {
    let (tx, rx) = flume::bounded(capacity);
    let queued = Arc::new(AtomicUsize::new(0));
    (
        JobSender {
            tx,
            queued: queued.clone(),
        },
        JobReceiver { rx, queued },
    )
}

/// The sending side.
#[derive(Debug, Clone)]
pub(crate) struct JobSender {
    tx: flume::Sender<Job>,
    queued: Arc<AtomicUsize>,
}

impl JobSender {
    /// Sends without waiting; hands the job back if the channel is full or closed.
    pub(crate) fn try_send(&self, job: Job) -> Result<(), Job> {
        self.queued.fetch_add(1, Ordering::AcqRel);
        match self.tx.try_send(job) {
            Ok(()) => Ok(()),
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
            Ok(()) => Ok(()),
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
    async fn a_job_sent_while_waiting_arrives() {
        let (tx, rx) = job_channel(4);
        let waiter = tokio::spawn(async move { rx.recv().await.is_some() });
        tokio::task::yield_now().await;
        assert!(tx.try_send(job()).is_ok());
        assert!(waiter.await.expect("joined"));
    }
}
