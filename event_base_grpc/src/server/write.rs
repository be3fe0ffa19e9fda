//! The admin RPCs: publish, replay, scaling, pause and resume, shutdown (purge is in
//! `dlq.rs`).

use std::time::Duration;

use event_base_core::{DeadLetterMessage, SendOptions};
use tokio::time::Instant;
use tonic::Status;

use crate::convert;
use crate::dlq::{self, Edit, Filter};
use crate::pb;
use crate::server::api::{AdminApi, AnswerStream};
use crate::status::{core, status_for};

/// A bulk replay in progress.
struct BulkReplay {
    api: AdminApi,
    targets: Vec<DeadLetterMessage>,
    next: usize,
    progress: pb::ReplayDeadLettersResponse,
    gap: Option<Duration>,
    start: Instant,
    finished: bool,
}

impl BulkReplay {
    /// The next progress message: one letter replayed, or the last (`done`).
    async fn step(mut self) -> Option<(Result<pb::ReplayDeadLettersResponse, Status>, BulkReplay)> {
        if self.finished || self.api.stop.is_cancelled() {
            return None;
        }
        let Some(dead) = self.targets.get(self.next) else {
            self.finished = true;
            let mut last = self.progress.clone();
            last.done = true;
            last.failure = None;
            last.replayed_id = String::new();
            return Some((Ok(last), self));
        };
        if let Some(gap) = self.gap {
            // Letter i starts no earlier than start + i * gap: the rate holds over the run.
            let Some(due) = u32::try_from(self.next)
                .ok()
                .and_then(|i| gap.checked_mul(i))
                .and_then(|wait| self.start.checked_add(wait))
            else {
                self.finished = true;
                return Some((
                    Err(Status::out_of_range(
                        "the replay's rate puts the next letter past any time this server can \
                         wait for; ask for a higher `max_per_second` or a smaller `limit`",
                    )),
                    self,
                ));
            };
            tokio::select! {
                () = tokio::time::sleep_until(due) => {}
                () = self.api.stop.cancelled() => return None,
            }
        }
        self.next += 1;
        let step = self.api.replay_step(dead, &mut self.progress).await;
        Some((Ok(step), self))
    }
}

/// The time between two letters of a replay at `per_second` (finite and positive): refused
/// when it is more than [`MAX_WIRE_DURATION`](crate::MAX_WIRE_DURATION) (a rate so low that
/// `1 / rate` seconds would overflow a duration).
fn replay_gap(per_second: f64) -> Result<Duration, Status> {
    let too_slow = || {
        Status::invalid_argument(format!(
            "`max_per_second` is {per_second}, too low: one letter per {} s at the least; \
             give a higher rate, or 0 for no limit",
            crate::MAX_WIRE_DURATION.as_secs()
        ))
    };
    let gap = Duration::try_from_secs_f64(1.0 / per_second).map_err(|_| too_slow())?;
    convert::within_wire_limit(gap, "max_per_second").map_err(|_| too_slow())
}

/// Most workers one AddWorkers call starts.
const MAX_ADD_WORKERS: u32 = 1024;

fn need_topic(topic: &str) -> Result<(), Status> {
    if topic.is_empty() {
        Err(Status::invalid_argument(
            "`topic` is empty; name the topic to send to (see ListTopics)",
        ))
    } else {
        Ok(())
    }
}

/// Both names of a subscription are given.
fn need_subscription(topic: &str, handler: &str) -> Result<(), Status> {
    if topic.is_empty() || handler.is_empty() {
        return Err(Status::invalid_argument(format!(
            "`{}` is empty; name the topic and its handler (ListTopics lists each topic's \
             subscriptions)",
            if topic.is_empty() { "topic" } else { "handler" }
        )));
    }
    Ok(())
}

impl AdminApi {
    pub(crate) async fn publish_one(
        &self,
        req: pb::PublishRequest,
    ) -> Result<pb::PublishResponse, Status> {
        need_topic(&req.topic)?;
        let message = req.message.ok_or_else(|| {
            Status::invalid_argument("`message` is not set; give at least its payload")
        })?;
        let msg = convert::outgoing(&req.topic, &message)?;
        let mut options = SendOptions::new();
        if req.try_send {
            options = options.try_send();
        }
        if let Some(t) = &req.timeout {
            options = options.timeout(convert::std_duration(t, "timeout")?);
        }
        let id = self
            .bus
            .send_with(&req.topic, msg, options)
            .await
            .map_err(core)?;
        Ok(pb::PublishResponse {
            message_id: id.as_str().to_owned(),
        })
    }

    pub(crate) async fn publish_many(
        &self,
        req: pb::PublishBatchRequest,
    ) -> Result<pb::PublishBatchResponse, Status> {
        need_topic(&req.topic)?;
        if req.messages.is_empty() {
            return Err(Status::invalid_argument(
                "`messages` is empty; give at least one message",
            ));
        }
        let messages = req
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                convert::outgoing(&req.topic, m).map_err(|s| {
                    Status::invalid_argument(format!("messages[{i}]: {}", s.message()))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let ids = self
            .bus
            .send_batch(&req.topic, messages)
            .await
            .map_err(core)?;
        Ok(pb::PublishBatchResponse {
            message_ids: ids.iter().map(|id| id.as_str().to_owned()).collect(),
        })
    }

    pub(crate) async fn replay_single(
        &self,
        req: pb::ReplayDeadLetterRequest,
    ) -> Result<pb::ReplayDeadLetterResponse, Status> {
        use pb::replay_dead_letter_request::Schedule;
        if req.id.is_empty() {
            return Err(Status::invalid_argument(
                "`id` is empty; give the id of a dead letter (see ListDeadLetters)",
            ));
        }
        if req.topic.as_deref() == Some("") {
            return Err(Status::invalid_argument(
                "`topic` is set but empty; leave it unset to replay to the dead letter's own topic",
            ));
        }
        let (at, delay) = match &req.schedule {
            Some(Schedule::DeliverAt(t)) => (Some(t), None),
            Some(Schedule::Delay(d)) => (None, Some(d)),
            None => (None, None),
        };
        let edit = Edit {
            payload: req.payload,
            topic: req.topic,
            deliver_at: convert::deliver_at(at, delay)?,
        };
        let edited = !edit.is_empty();
        let id = dlq::replay_one(&self.bus, &req.id, edit).await?;
        Ok(pb::ReplayDeadLetterResponse {
            message_id: id.as_str().to_owned(),
            edited,
        })
    }

    pub(crate) async fn replay_bulk(
        &self,
        req: pb::ReplayDeadLettersRequest,
    ) -> Result<AnswerStream<pb::ReplayDeadLettersResponse>, Status> {
        let filter = Filter::from_pb(req.filter.as_ref())?;
        dlq::check_scope(&filter, req.all, "ReplayDeadLetters")?;
        if !req.max_per_second.is_finite() || req.max_per_second < 0.0 {
            return Err(Status::invalid_argument(
                "`max_per_second` must be 0 (no limit) or a positive number",
            ));
        }
        let mut targets = dlq::matching(&self.bus, filter).await?;
        if req.limit > 0 {
            targets.truncate(req.limit as usize);
        }
        let gap = if req.max_per_second > 0.0 {
            Some(replay_gap(req.max_per_second)?)
        } else {
            None
        };
        let state = BulkReplay {
            api: self.clone(),
            progress: pb::ReplayDeadLettersResponse {
                matched: targets.len() as u64,
                dry_run: req.dry_run,
                ..Default::default()
            },
            targets: if req.dry_run { Vec::new() } else { targets },
            next: 0,
            gap,
            start: Instant::now(),
            finished: false,
        };
        // Driven by the caller's reads: each step replays one letter. When the caller hangs
        // up, tonic drops the stream and the replay stops between letters (a replay is
        // cancel-safe: dropped mid-way, its letter stays a dead letter).
        Ok(Box::pin(futures_util::stream::unfold(
            state,
            BulkReplay::step,
        )))
    }

    /// Replays one dead letter and counts it; returns the step's progress message.
    async fn replay_step(
        &self,
        dead: &DeadLetterMessage,
        progress: &mut pb::ReplayDeadLettersResponse,
    ) -> pb::ReplayDeadLettersResponse {
        progress.failure = None;
        progress.replayed_id = String::new();
        match self.bus.replay_dead_letter(&dead.message.id).await {
            Ok(id) => {
                progress.replayed += 1;
                progress.replayed_id = id.as_str().to_owned();
            }
            Err(e) => {
                progress.failed += 1;
                let status = status_for(&e);
                progress.failure = Some(pb::ReplayFailure {
                    id: dead.message.id.clone(),
                    code: code_name(status.code()).to_owned(),
                    message: status.message().to_owned(),
                });
            }
        }
        progress.clone()
    }

    pub(crate) async fn scale_up(
        &self,
        req: &pb::AddWorkersRequest,
    ) -> Result<pb::AddWorkersResponse, Status> {
        if req.handler.is_empty() {
            return Err(Status::invalid_argument(
                "`handler` is empty; name the handler to scale (its workers are `<handler>-<n>`)",
            ));
        }
        if req.count == 0 || req.count > MAX_ADD_WORKERS {
            return Err(Status::invalid_argument(format!(
                "`count` is {}; give 1 to {MAX_ADD_WORKERS}",
                req.count
            )));
        }
        let names = self
            .bus
            .add_workers(&req.handler, req.count as usize)
            .await
            .map_err(core)?;
        Ok(pb::AddWorkersResponse { names })
    }

    pub(crate) async fn scale_down(
        &self,
        req: &pb::RemoveWorkerRequest,
    ) -> Result<pb::RemoveWorkerResponse, Status> {
        if req.name.is_empty() {
            return Err(Status::invalid_argument(
                "`name` is empty; name the worker to stop (see ListWorkers)",
            ));
        }
        if self.bus.registry().get(&req.name).is_none() {
            return Err(Status::not_found(format!(
                "no worker named `{}`; see ListWorkers for the names",
                req.name
            )));
        }
        let report = self.bus.remove_worker(&req.name).await.map_err(core)?;
        Ok(pb::RemoveWorkerResponse {
            report: Some(convert::shutdown_report(&report)),
        })
    }

    /// Pauses handler `handler` of `topic`: the subscription after it, and whether it was
    /// paused already. Also the dashboard's Pause button.
    pub(crate) fn pause(
        &self,
        topic: &str,
        handler: &str,
    ) -> Result<pb::PauseSubscriptionResponse, Status> {
        need_subscription(topic, handler)?;
        let already = self.bus.is_paused(topic, handler).map_err(core)?;
        self.bus.pause(topic, handler).map_err(core)?;
        Ok(pb::PauseSubscriptionResponse {
            subscription: Some(self.subscription(topic, handler)?),
            already,
        })
    }

    /// Resumes handler `handler` of `topic`: the subscription after it, whether it was
    /// running already, and its lag just before (what waited: the workers may have taken
    /// some of it by the time the subscription is read). Also the dashboard's Resume button.
    pub(crate) fn resume(
        &self,
        topic: &str,
        handler: &str,
    ) -> Result<pb::ResumeSubscriptionResponse, Status> {
        need_subscription(topic, handler)?;
        let already = !self.bus.is_paused(topic, handler).map_err(core)?;
        let waited = self.bus.lag(topic, handler).map_err(core)?;
        self.bus.resume(topic, handler).map_err(core)?;
        Ok(pb::ResumeSubscriptionResponse {
            subscription: Some(self.subscription(topic, handler)?),
            already,
            waited,
        })
    }

    /// Handler `handler` of `topic` as it is now.
    fn subscription(&self, topic: &str, handler: &str) -> Result<pb::Subscription, Status> {
        self.bus
            .metrics()
            .subscription(topic, handler)
            .map(convert::subscription)
            .ok_or_else(|| {
                Status::not_found(format!(
                    "topic `{topic}` has no handler `{handler}` here; ListTopics lists each \
                     topic's subscriptions"
                ))
            })
    }

    pub(crate) async fn stop_bus(
        &self,
        req: &pb::ShutdownRequest,
    ) -> Result<pb::ShutdownResponse, Status> {
        let strategy = convert::shutdown_strategy(req.strategy.as_ref())?;
        if let event_base_core::ShutdownStrategy::Graceful { worker_name, .. } = &strategy {
            if self.bus.registry().get(worker_name).is_none() {
                return Err(Status::not_found(format!(
                    "no worker named `{worker_name}`; see ListWorkers for the names"
                )));
            }
        }
        tracing::info!(strategy = strategy.name(), reason = %req.reason, "shutdown requested over gRPC");
        let whole_bus = !matches!(strategy, event_base_core::ShutdownStrategy::Graceful { .. });
        // In a task of its own: a call cut short (the server's request timeout, the caller
        // hanging up) must not drop a shutdown half-way; it goes on, and is announced.
        let (bus, feed) = (self.bus.clone(), self.feed.clone());
        let report = tokio::spawn(async move {
            let report = bus.shutdown(strategy).await?;
            if whole_bus {
                feed.lifecycle(pb::LifecycleStage::ShutdownFinished, Some(&report));
            }
            Ok::<_, event_base_core::CoreError>(report)
        })
        .await
        .map_err(|e| Status::internal(format!("the shutdown task failed: {e}")))?
        .map_err(core)?;
        Ok(pb::ShutdownResponse {
            report: Some(convert::shutdown_report(&report)),
        })
    }
}

/// The canonical name of a code (`NOT_FOUND`), as gRPC writes it.
pub(crate) fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code as C;
    match code {
        C::Ok => "OK",
        C::Cancelled => "CANCELLED",
        C::Unknown => "UNKNOWN",
        C::InvalidArgument => "INVALID_ARGUMENT",
        C::DeadlineExceeded => "DEADLINE_EXCEEDED",
        C::NotFound => "NOT_FOUND",
        C::AlreadyExists => "ALREADY_EXISTS",
        C::PermissionDenied => "PERMISSION_DENIED",
        C::ResourceExhausted => "RESOURCE_EXHAUSTED",
        C::FailedPrecondition => "FAILED_PRECONDITION",
        C::Aborted => "ABORTED",
        C::OutOfRange => "OUT_OF_RANGE",
        C::Unimplemented => "UNIMPLEMENTED",
        C::Internal => "INTERNAL",
        C::Unavailable => "UNAVAILABLE",
        C::DataLoss => "DATA_LOSS",
        C::Unauthenticated => "UNAUTHENTICATED",
    }
}
