//! The state one running system shares between its router, workers, scheduler and handles.
//!
//! The topic table is built once by the builder and never changes while the system runs, so
//! the send path reads it without a lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use uuid::Uuid;

use crate::ack::DeadReason;
use crate::constant::{DEAD_LETTER, SYSTEM_PREFIX};
use crate::dead_letter::DeadLetterMessage;
use crate::error::CoreError;
use crate::in_flight::InFlight;
use crate::job::Job;
use crate::message::{EMessage, MessageTopic};
use crate::metrics::TopicCounters;
use crate::queue::TrySendError;
use crate::scheduler::{instant_for, Scheduled, SchedulerHandle};
use crate::topic_entry::TopicEntry;
use crate::wal::Wal;
use crate::worker_registry::WorkerRegistry;

pub(crate) struct SystemShared {
    pub(crate) wal: Arc<dyn Wal>,
    pub(crate) topics: HashMap<MessageTopic, Arc<TopicEntry>>,
    pub(crate) registry: WorkerRegistry,
    pub(crate) scheduler: SchedulerHandle,
    pub(crate) in_flight: InFlight,
    pub(crate) accepting: AtomicBool,
    pub(crate) batch_size: usize,
}

impl SystemShared {
    pub(crate) fn topic(&self, name: &str) -> Option<&Arc<TopicEntry>> {
        self.topics.get(name)
    }

    /// The public send path: refuses reserved topics and sends after shutdown began.
    pub(crate) async fn send(
        &self,
        topic: &str,
        message: EMessage,
        try_send: bool,
        timeout: Option<Duration>,
    ) -> Result<Uuid, CoreError> {
        if topic.starts_with(SYSTEM_PREFIX) {
            return Err(CoreError::ReservedTopic(topic.to_owned()));
        }
        self.send_internal(topic, message, try_send, timeout).await
    }

    /// WAL append, then enqueue. A refused message leaves no record behind.
    pub(crate) async fn send_internal(
        &self,
        topic: &str,
        mut message: EMessage,
        try_send: bool,
        timeout: Option<Duration>,
    ) -> Result<Uuid, CoreError> {
        if !self.accepting.load(Ordering::Acquire) {
            return Err(CoreError::SystemShutdown);
        }
        let entry = self.topics.get(topic).ok_or_else(|| CoreError::NoHandler {
            topic: topic.to_owned(),
        })?;
        if message.topic.0 != topic {
            message.topic = entry.topic.clone();
        }
        if let Some(worker) = &message.to_worker {
            if entry.worker_index(worker).is_none() {
                return Err(CoreError::UnknownWorker {
                    topic: topic.to_owned(),
                    worker: worker.clone(),
                });
            }
        }
        if message.attempts == 0 {
            message.attempts = 1;
        }
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let message = Arc::new(message);
        let id = message.id;

        let commit = self.wal.append(&message)?;
        self.in_flight.add();
        let durable = match deadline {
            None => commit.wait().await,
            Some(d) => match tokio::time::timeout_at(d, commit.wait()).await {
                Ok(r) => r,
                Err(_) => return self.refuse(id, timeout_error(topic, timeout)),
            },
        };
        if let Err(e) = durable {
            return self.refuse(id, e.into());
        }

        if let Some(at) = message.deliver_at {
            if at > SystemTime::now() {
                TopicCounters::add(&entry.counters.sent);
                self.scheduler.schedule(
                    instant_for(at),
                    Scheduled::Message {
                        entry: entry.clone(),
                        message,
                    },
                );
                return Ok(id);
            }
        }

        match entry.producer.try_send(message) {
            Ok(()) => {}
            Err(TrySendError::Full(message)) => {
                if try_send {
                    return self.refuse(
                        id,
                        CoreError::QueueFull {
                            topic: topic.to_owned(),
                        },
                    );
                }
                let sent = match deadline {
                    None => entry.producer.send(message).await,
                    Some(d) => {
                        match tokio::time::timeout_at(d, entry.producer.send(message)).await {
                            Ok(r) => r,
                            Err(_) => return self.refuse(id, timeout_error(topic, timeout)),
                        }
                    }
                };
                if let Err(e) = sent {
                    return self.refuse(id, e.into());
                }
            }
            Err(TrySendError::Failed(e)) => return self.refuse(id, e.into()),
        }
        TopicCounters::add(&entry.counters.sent);
        Ok(id)
    }

    /// Withdraws a message whose send failed. If a handler already has it, the send did
    /// succeed after all, and the caller must be told so.
    fn refuse(&self, id: Uuid, error: CoreError) -> Result<Uuid, CoreError> {
        match self.wal.cancel(&id) {
            Ok(true) => {
                self.in_flight.done();
                Err(error)
            }
            Ok(false) => Ok(id),
            Err(e) => {
                tracing::error!(%id, error = %e, "could not withdraw a refused message from the WAL; it may still be delivered");
                Err(error)
            }
        }
    }

    /// A delivery finished with `Ack`.
    pub(crate) fn finish_ok(&self, job: &Job) {
        match &job.group {
            None => {
                self.complete(&job.message.id);
                self.in_flight.done();
            }
            Some(group) => {
                if group.finish_one() {
                    if !group.failed() {
                        self.complete(&job.message.id);
                    }
                    self.in_flight.done();
                }
            }
        }
    }

    fn complete(&self, id: &Uuid) {
        if let Err(e) = self.wal.complete(id) {
            tracing::error!(%id, error = %e, "could not mark message complete; it may be delivered again after a restart");
        }
    }

    /// A delivery ended as a dead letter.
    pub(crate) async fn dead_letter(&self, entry: &TopicEntry, job: &Job, reason: DeadReason) {
        let message = &job.message;
        TopicCounters::add(&entry.counters.dead);
        tracing::warn!(id = %message.id, topic = %message.topic, attempts = message.attempts, %reason, "message dead-lettered");
        if let Err(e) = self.wal.fail(message, &reason) {
            tracing::error!(id = %message.id, error = %e, "could not record dead letter in the WAL");
        }
        // Announce before the message counts as final, so `wait_idle` also covers the
        // announcement.
        if !message.topic.is_system() {
            let dead = DeadLetterMessage {
                message: (**message).clone(),
                reason,
                attempts: message.attempts,
                died_at: SystemTime::now(),
            };
            self.announce(DEAD_LETTER, &dead).await;
        }
        match &job.group {
            None => self.in_flight.done(),
            Some(group) => {
                group.mark_failed();
                if group.finish_one() {
                    self.in_flight.done();
                }
            }
        }
    }

    /// Publishes on a system topic if some handler subscribes to it; never waits for room.
    pub(crate) async fn announce<T: serde::Serialize>(&self, topic: &str, value: &T) {
        if !self.topics.contains_key(topic) {
            return;
        }
        match serde_json::to_vec(value) {
            Ok(bytes) => {
                let msg = EMessage::standard(topic, bytes);
                if let Err(e) = self.send_internal(topic, msg, true, None).await {
                    tracing::warn!(topic, error = %e, "system announcement dropped");
                }
            }
            Err(e) => tracing::error!(topic, error = %e, "could not encode system announcement"),
        }
    }
}

fn timeout_error(topic: &str, timeout: Option<Duration>) -> CoreError {
    CoreError::Timeout {
        operation: format!("send to `{topic}`"),
        after: timeout.unwrap_or_default(),
    }
}
