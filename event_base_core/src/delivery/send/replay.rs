//! Start-up replay: every record the WAL holds unfinished is delivered again. With a shared
//! backend (`QueueFactory::routes`), a record whose topic only other processes handle goes
//! to the handlers the registry lists and is completed once the backend confirmed its
//! copies; only a topic no node handles is dead-lettered (`DeadReason::NoHandler`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::SystemTime;

use crate::backend::WalRecord;
use crate::delivery::hub::DeliveryHub;
use crate::delivery::remote::elsewhere::queue_all_elsewhere;
use crate::delivery::send::accept::targets;
use crate::delivery::send::scheduler::Scheduled;
use crate::error::CoreError;
use crate::message::ack::DeadReason;
use crate::message::emessage::EMessage;
use crate::observe::topic_counters::TopicCounters;

/// Most records read back from the WAL at once by the start-up replay.
const REPLAY_WINDOW: usize = 1024;

impl DeliveryHub {
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
        // Topics with no handler here, sent to the handlers elsewhere after this window's
        // local ones (with a shared backend); dead letters if no node handles them.
        let mut elsewhere = Vec::new();
        let mut looked_up = HashSet::new();
        for record in records {
            let message = record.message;
            let Some(route) = self.topic(message.topic.as_str()).cloned() else {
                if self.remote.is_some() && !message.topic.is_system() {
                    elsewhere.push(message);
                } else {
                    no_handler(self, &message)?;
                }
                continue;
            };
            // Every handler gets its copy again, those that had finished theirs before the
            // stop too: the WAL keeps one record per message (at-least-once). So do the
            // handlers only other processes run (their copy may not have been written).
            // (System topics reach other nodes by their announcements, not by routes.)
            let remote = self
                .remote
                .as_ref()
                .filter(|_| message.to_worker.is_none() && !route.topic.is_system());
            if let Some(remote) = remote {
                if looked_up.insert(route.topic.clone()) {
                    remote.look_up_local(&route).await?;
                }
                if route.elsewhere.any() {
                    queue_all_elsewhere(route.elsewhere.subs(), vec![message.clone()]).await?;
                }
            }
            let targets = targets(&route, &message);
            self.arrived(&route, targets, &message, TopicCounters::replayed);
            count += 1;
            for entry in targets {
                match message.deliver_at {
                    Some(at) if at > now && !entry.producer.keeps_delayed() => {
                        self.scheduler.schedule_wall(
                            at,
                            Scheduled::Message {
                                entry: entry.clone(),
                                message: message.clone(),
                            },
                        )
                    }
                    _ => entry.producer.send(message.clone()).await?,
                }
            }
            if route.claim_counted {
                self.copies_queued(targets, &message);
            }
        }
        let (sent, unrouted) = self.send_recorded_elsewhere(elsewhere).await?;
        for message in unrouted {
            no_handler(self, &message)?;
        }
        Ok(count + sent)
    }
}

/// A replayed message whose topic no handler has, here or (with a shared backend) in the
/// registry: dead-lettered.
fn no_handler(shared: &DeliveryHub, message: &Arc<EMessage>) -> Result<(), CoreError> {
    tracing::warn!(target: crate::constant::target::DELIVERY, id = %message.id, topic = %message.topic, "replayed message has no handler; dead-lettered");
    shared.wal.fail(message, &DeadReason::NoHandler, &[])?;
    Ok(())
}
