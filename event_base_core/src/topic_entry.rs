//! One topic of a running system: its queue, its workers' channels and its counters.

use std::sync::Arc;

use crate::job::{Job, Target};
use crate::message::MessageTopic;
use crate::metrics::TopicCounters;
use crate::queue::{EConsumer, EProducer};

/// A worker's private inbox (for `to_worker`, broadcast copies and their retries).
#[derive(Debug)]
pub(crate) struct WorkerSlot {
    pub(crate) name: String,
    pub(crate) inbox: flume::Sender<Job>,
}

pub(crate) struct TopicEntry {
    pub(crate) topic: MessageTopic,
    pub(crate) producer: Arc<dyn EProducer>,
    pub(crate) consumer: Arc<dyn EConsumer>,
    /// Shared by the topic's workers: an idle worker takes the next job (competing consumers).
    pub(crate) work_tx: flume::Sender<Job>,
    pub(crate) work_rx: flume::Receiver<Job>,
    pub(crate) workers: Vec<WorkerSlot>,
    pub(crate) counters: TopicCounters,
}

impl TopicEntry {
    pub(crate) fn worker_index(&self, name: &str) -> Option<usize> {
        self.workers.iter().position(|w| w.name == name)
    }

    fn sender(&self, target: Target) -> Option<&flume::Sender<Job>> {
        match target {
            Target::Any => Some(&self.work_tx),
            Target::Worker(i) => self.workers.get(i).map(|w| &w.inbox),
        }
    }

    /// Hands a job to the workers, waiting while their channel is full.
    pub(crate) async fn push(&self, job: Job, target: Target) {
        let Some(tx) = self.sender(target) else {
            return;
        };
        if let Err(flume::TrySendError::Full(job)) = tx.try_send(job) {
            // Only fails when the workers are gone (shutdown); the WAL keeps the message.
            let _ = tx.send_async(job).await;
        }
    }

    /// Hands a job to the workers without ever blocking the caller: if their channel is full,
    /// a task waits for room. Used by the scheduler, which must never stall on one topic.
    pub(crate) fn push_detached(&self, job: Job, target: Target) {
        let Some(tx) = self.sender(target) else {
            return;
        };
        if let Err(flume::TrySendError::Full(job)) = tx.try_send(job) {
            let tx = tx.clone();
            tokio::spawn(async move {
                let _ = tx.send_async(job).await;
            });
        }
    }
}
