//! Final states: a delivery that ended in `Ack` completes its WAL record; one that ended as a
//! dead letter is recorded `Failed` and announced on `_system.dead_letter`. Either way the
//! message stops counting as in flight (a broadcast group once its last copy has finished).

use std::time::SystemTime;

use crate::bus::shared::BusShared;
use crate::constant::DEAD_LETTER;
use crate::delivery::job::Job;
use crate::delivery::topic_table::TopicEntry;
use crate::message::ack::DeadReason;
use crate::message::dead_letter::DeadLetterMessage;

impl BusShared {
    /// A delivery finished with `Ack`.
    pub(crate) fn finish_ok(&self, entry: &TopicEntry, job: &Job) {
        match &job.group {
            None => {
                self.complete(&job.message.id);
                self.final_state(entry);
            }
            Some(group) => {
                if group.finish_one() {
                    if !group.failed() {
                        self.complete(&job.message.id);
                    }
                    self.final_state(entry);
                }
            }
        }
    }

    /// A message reached its final state (complete or dead).
    #[inline]
    fn final_state(&self, entry: &TopicEntry) {
        entry.counters.finished();
        self.in_flight.done();
    }

    fn complete(&self, id: &str) {
        if let Err(e) = self.wal.complete(id) {
            tracing::error!(target: crate::constant::target::DELIVERY, %id, error = %e, "could not mark message complete; it may be delivered again after a restart");
        }
    }

    /// A delivery ended as a dead letter.
    pub(crate) async fn dead_letter(&self, entry: &TopicEntry, job: &Job, reason: DeadReason) {
        let message = &job.message;
        entry.counters.dead();
        tracing::warn!(target: crate::constant::target::DELIVERY, id = %message.id, topic = %message.topic, attempts = message.attempts, %reason, "message dead-lettered");
        if let Err(e) = self.wal.fail(message, &reason) {
            tracing::error!(target: crate::constant::target::DELIVERY, id = %message.id, error = %e, "could not record dead letter in the WAL");
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
            None => self.final_state(entry),
            Some(group) => {
                group.mark_failed();
                if group.finish_one() {
                    self.final_state(entry);
                }
            }
        }
    }
}
