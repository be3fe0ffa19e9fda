//! [`ConsumerRouter`]: takes a topic's messages from its queue and hands them to workers.
//!
//! One router task per topic claims up to `batch_size` messages at once (default 64), routes
//! each, then acknowledges the batch to the queue in one call (skipped for in-memory queues,
//! whose consumers need no acknowledgement). Routing:
//!
//! - a message addressed to a worker (`to_worker`) goes to that worker's inbox; a name the topic
//!   does not know makes it a dead letter with [`DeadReason::UnknownWorker`], never a drop;
//! - `Broadcast` puts a copy in every worker's inbox;
//! - `Standard` goes to the topic's shared work channel, where the next idle worker takes it;
//!   `Repeated(n)` puts it there `n` times;
//! - a message whose `deliver_at` is still ahead goes to the scheduler.
//!
//! When every worker is busy the shared channel fills up and the router waits on it (a plain
//! `await`, no spinning) until a worker takes the next job. Workers never send into the channel
//! the router waits on; retries come back through the scheduler, so the router cannot deadlock
//! on its own output. A message on the wrong topic is refused with a dead letter rather than
//! handed to a handler that would misread it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::ack::DeadReason;
use crate::error::QueueError;
use crate::job::{DeliveryGroup, Job, Target};
use crate::message::{DeliveryMode, EMessage, MessageTopic};
use crate::queue::Claimed;
use crate::scheduler::{instant_for, Scheduled};
use crate::system::SystemShared;
use crate::topic_entry::TopicEntry;

/// The dispatcher of one topic.
pub struct ConsumerRouter {
    shared: Arc<SystemShared>,
    entry: Arc<TopicEntry>,
    batch_size: usize,
}

impl ConsumerRouter {
    pub(crate) fn new(shared: Arc<SystemShared>, entry: Arc<TopicEntry>) -> Self {
        let batch_size = shared.batch_size.max(1);
        ConsumerRouter {
            shared,
            entry,
            batch_size,
        }
    }

    /// The topic it serves.
    pub fn topic(&self) -> &MessageTopic {
        &self.entry.topic
    }

    /// Messages claimed at once.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Runs until the queue closes or the system stops.
    pub(crate) async fn run(self) {
        let consumer = self.entry.consumer.clone();
        let acks = consumer.requires_ack();
        let mut batch: Vec<Claimed> = Vec::with_capacity(self.batch_size);
        let mut backoff = Duration::from_millis(50);
        loop {
            match consumer.claim_batch(self.batch_size, &mut batch).await {
                Ok(_) => backoff = Duration::from_millis(50),
                Err(QueueError::Closed(_)) => return,
                Err(e) => {
                    tracing::error!(topic = %self.entry.topic, error = %e, ?backoff, "claim failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            }
            if acks {
                for claimed in &batch {
                    self.dispatch(claimed.message.clone()).await;
                }
                if let Err(e) = consumer.ack(&batch).await {
                    tracing::warn!(topic = %self.entry.topic, error = %e, "ack failed; entries will be claimed again (the WAL de-duplicates nothing: handlers may see them twice)");
                }
                batch.clear();
            } else {
                for claimed in batch.drain(..) {
                    self.dispatch(claimed.message).await;
                }
            }
        }
    }

    /// Routes one message to the right worker channel.
    async fn dispatch(&self, message: Arc<EMessage>) {
        let entry = &*self.entry;
        if message.topic != entry.topic {
            let job = Job {
                message,
                group: None,
            };
            let reason = DeadReason::Other(format!(
                "message for topic `{}` reached the queue of `{}`",
                job.message.topic, entry.topic
            ));
            self.shared.dead_letter(entry, &job, reason).await;
            return;
        }
        if let Some(at) = message.deliver_at {
            if at > SystemTime::now() {
                self.shared.scheduler.schedule(
                    instant_for(at),
                    Scheduled::Message {
                        entry: self.entry.clone(),
                        message,
                    },
                );
                return;
            }
        }
        if let Some(name) = &message.to_worker {
            let Some(i) = entry.worker_index(name) else {
                let reason = DeadReason::UnknownWorker(name.clone());
                let job = Job {
                    message,
                    group: None,
                };
                self.shared.dead_letter(entry, &job, reason).await;
                return;
            };
            // Addressed: Standard and Broadcast mean once (the worker is the whole audience),
            // Repeated(n) means n times, all by that worker.
            match message.delivery_mode {
                DeliveryMode::Repeated(0) => self.shared.finish_ok(&Job {
                    message,
                    group: None,
                }),
                DeliveryMode::Repeated(n) => {
                    let group = DeliveryGroup::new(n);
                    for _ in 0..n {
                        let job = Job {
                            message: message.clone(),
                            group: Some(group.clone()),
                        };
                        entry.push(job, Target::Worker(i)).await;
                    }
                }
                DeliveryMode::Standard | DeliveryMode::Broadcast => {
                    let job = Job {
                        message,
                        group: None,
                    };
                    entry.push(job, Target::Worker(i)).await
                }
            }
            return;
        }
        match message.delivery_mode {
            DeliveryMode::Standard => {
                entry
                    .push(
                        Job {
                            message,
                            group: None,
                        },
                        Target::Any,
                    )
                    .await
            }
            DeliveryMode::Broadcast => {
                let n = entry.workers.len() as u32;
                let group = DeliveryGroup::new(n);
                for i in 0..entry.workers.len() {
                    let job = Job {
                        message: message.clone(),
                        group: Some(group.clone()),
                    };
                    entry.push(job, Target::Worker(i)).await;
                }
            }
            DeliveryMode::Repeated(0) => {
                let job = Job {
                    message,
                    group: None,
                };
                self.shared.finish_ok(&job);
            }
            DeliveryMode::Repeated(n) => {
                let group = DeliveryGroup::new(n);
                for _ in 0..n {
                    let job = Job {
                        message: message.clone(),
                        group: Some(group.clone()),
                    };
                    entry.push(job, Target::Any).await;
                }
            }
        }
    }
}
