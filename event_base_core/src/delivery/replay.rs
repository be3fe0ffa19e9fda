//! Start-up replay: every record the WAL holds unfinished is delivered again.

use std::time::SystemTime;

use crate::backend::WalRecord;
use crate::bus::shared::BusShared;
use crate::delivery::accept::targets;
use crate::delivery::scheduler::{instant_for, Scheduled};
use crate::error::CoreError;
use crate::message::ack::DeadReason;
use crate::observe::topic_counters::TopicCounters;

/// Most records read back from the WAL at once by the start-up replay.
const REPLAY_WINDOW: usize = 1024;

impl BusShared {
    /// Delivers again every record the WAL holds as `Pending` or `Processing`.
    pub(crate) async fn replay(&self) -> Result<usize, CoreError> {
        let now = SystemTime::now();
        let mut count = 0;
        // A window at a time, so a backlog kept on disk is read back as the queues take it
        // (sending waits for room), never all at once.
        let mut from = Some(0);
        while let Some(at) = from {
            let window = self.wal.pending_window(at, REPLAY_WINDOW).await?;
            from = window.next;
            count += self.replay_records(window.records, now).await?;
        }
        if count > 0 {
            tracing::info!(target: crate::constant::target::DELIVERY, count, "replayed unfinished messages from the WAL");
        }
        Ok(count)
    }

    /// Delivers one window of replayed records, oldest first; returns how many were routed.
    async fn replay_records(
        &self,
        mut records: Vec<WalRecord>,
        now: SystemTime,
    ) -> Result<usize, CoreError> {
        records.sort_by_key(|r| r.message.metadata.created_at);
        let mut count = 0;
        for record in records {
            let message = record.message;
            let Some(route) = self.topic(message.topic.as_str()).cloned() else {
                tracing::warn!(target: crate::constant::target::DELIVERY, id = %message.id, topic = %message.topic, "replayed message has no handler; dead-lettered");
                self.wal.fail(&message, &DeadReason::NoHandler, &[])?;
                continue;
            };
            // Every handler gets its copy again, those that had finished theirs before the
            // stop too: the WAL keeps one record per message (at-least-once).
            let targets = targets(&route, &message);
            self.arrived(&route, targets, &message, TopicCounters::replayed);
            count += 1;
            for entry in targets {
                match message.deliver_at {
                    Some(at) if at > now && !entry.producer.keeps_delayed() => {
                        self.scheduler.schedule(
                            instant_for(at),
                            Scheduled::Message {
                                entry: entry.clone(),
                                message: message.clone(),
                            },
                        )
                    }
                    _ => entry.producer.send(message.clone()).await?,
                }
            }
        }
        Ok(count)
    }
}
