//! The handlers of a route that only other processes run ([`Elsewhere`]), each one a
//! [`RemoteSub`]: what a [`Route`](crate::delivery::subscription::topic_table::Route) carries besides its
//! local subscriptions when the queue backend is shared (`QueueFactory::routes`). Kept apart
//! from the table that fills them in (`remote_table.rs`) so the topic table can hold them
//! without importing it. The functions here queue copies for them: for a send
//! ([`queue_elsewhere`]), a batch ([`queue_all_elsewhere`]) and an outbox's release
//! ([`copy_released`]). [`prepare_elsewhere`] and [`within`] are the parts of admitting and
//! sending such a message that a send to a topic handled elsewhere and a send addressed to a
//! worker of a node share.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::backend::queue::{EProducer, TrySendError};
use crate::delivery::in_flight::InFlight;
use crate::error::CoreError;
use crate::message::emessage::EMessage;
use crate::message::topic::MessageTopic;

/// Checks a message bound for other processes as any message, stamps its topic and first
/// attempt, and gives it the sending handler's context (trace, causation).
pub(crate) fn prepare_elsewhere(
    topic: String,
    mut message: EMessage,
) -> Result<Arc<EMessage>, CoreError> {
    message.topic = MessageTopic::from(topic);
    crate::delivery::send::stamp::stamp(&mut message)?;
    Ok(Arc::new(message))
}

/// Runs a send to other processes, bounded by the sender's timeout when it has one (a
/// timeout needs a tokio runtime: `NoRuntime` without one).
pub(crate) async fn within<T>(
    topic: &MessageTopic,
    timeout: Option<Duration>,
    work: impl Future<Output = Result<T, CoreError>>,
) -> Result<T, CoreError> {
    match timeout {
        None => work.await,
        Some(_) if tokio::runtime::Handle::try_current().is_err() => Err(CoreError::NoRuntime),
        // Checked: a timeout the clock cannot reach is none (`clock.rs`).
        Some(t) => {
            match crate::clock::deadline_after(tokio::time::Instant::now(), t) {
                None => work.await,
                Some(deadline) => tokio::time::timeout_at(deadline, work).await.map_err(|_| {
                    CoreError::Timeout {
                        operation: format!("send to `{topic}`"),
                        after: t,
                    }
                })?,
            }
        }
    }
}

/// One handler of a topic that another process runs: its subscription's sending side.
#[derive(Clone)]
pub(crate) struct RemoteSub {
    pub(crate) handler: Arc<str>,
    pub(crate) producer: Arc<dyn EProducer>,
}

/// The handlers of a route that only other processes run (none until a refresh lists
/// some).
#[derive(Default)]
pub(crate) struct Elsewhere {
    /// Whether `subs` is not empty: the one thing a local send reads of this.
    any: AtomicBool,
    subs: ArcSwap<Vec<RemoteSub>>,
}

impl Elsewhere {
    /// Whether some handler elsewhere gets a copy of every message.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    /// The handlers elsewhere, as of the last refresh.
    pub(crate) fn subs(&self) -> Arc<Vec<RemoteSub>> {
        self.subs.load_full()
    }

    pub(crate) fn set(&self, subs: Vec<RemoteSub>) {
        let any = !subs.is_empty();
        self.subs.store(Arc::new(subs));
        self.any.store(any, Ordering::Release);
    }
}

/// Queues a copy of `message` for each of `subs`, in order: a full queue is waited for,
/// or, with `try_send`, answers `QueueFull` (copies queued before it stay queued, as with
/// the local copies of a refused send).
pub(crate) async fn queue_elsewhere(
    subs: &[RemoteSub],
    message: &Arc<EMessage>,
    try_send: bool,
) -> Result<(), CoreError> {
    for sub in subs {
        match sub.producer.try_send(message.clone()) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) if try_send => {
                return Err(CoreError::QueueFull {
                    topic: message.topic.0.clone(),
                })
            }
            Err(TrySendError::Full(m)) => sub.producer.send(m).await?,
            Err(TrySendError::Failed(e)) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Queues a copy of each message for each of `subs`: everything that fits is pushed at once
/// (one pipeline on Redis), then what did not fit is sent in order, waiting for room, by a
/// task of its own (a dropped caller does not leave accepted copies unqueued).
pub(crate) async fn queue_all_elsewhere(
    subs: Arc<Vec<RemoteSub>>,
    messages: Vec<Arc<EMessage>>,
) -> Result<(), CoreError> {
    let waiting = push_all_elsewhere(&subs, messages)?;
    if waiting.is_empty() {
        return Ok(());
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime.spawn(send_waiting(waiting)).await.map_err(|e| {
            CoreError::Internal(format!(
                "the task queueing copies for other processes failed: {e}"
            ))
        })?,
        Err(_) => send_waiting(waiting).await,
    }
}

/// The first half of [`queue_all_elsewhere`]: pushes every copy that fits now, and returns
/// those that wait for room, in order (behind a full queue, a handler's later copies wait
/// their turn too).
pub(crate) fn push_all_elsewhere(
    subs: &[RemoteSub],
    messages: Vec<Arc<EMessage>>,
) -> Result<Vec<(RemoteSub, Arc<EMessage>)>, CoreError> {
    let mut waiting = Vec::new();
    let mut blocked = vec![false; subs.len()];
    for message in messages {
        for (i, sub) in subs.iter().enumerate() {
            if blocked[i] {
                waiting.push((sub.clone(), message.clone()));
                continue;
            }
            match sub.producer.try_send(message.clone()) {
                Ok(()) => {}
                Err(TrySendError::Full(m)) => {
                    blocked[i] = true;
                    waiting.push((sub.clone(), m));
                }
                Err(TrySendError::Failed(e)) => return Err(e.into()),
            }
        }
    }
    Ok(waiting)
}

/// The second half of [`queue_all_elsewhere`]: sends the copies that waited, in order,
/// waiting for room.
pub(crate) async fn send_waiting(
    waiting: Vec<(RemoteSub, Arc<EMessage>)>,
) -> Result<(), CoreError> {
    for (sub, message) in waiting {
        sub.producer.send(message).await?;
    }
    Ok(())
}

/// Queues a copy of a message an outbox released for each of `subs` without waiting (the
/// releasing worker must not block): a full queue gets a task that waits for room, counted
/// in `in_flight` until it is done (so `wait_idle` and `Drain` wait for it). The message's
/// record stays in this bus's WAL until its local handlers finish it, and a replay sends
/// these copies again.
pub(crate) fn copy_released(
    subs: &[RemoteSub],
    message: &Arc<EMessage>,
    in_flight: &Arc<InFlight>,
) {
    for sub in subs {
        match sub.producer.try_send(message.clone()) {
            Ok(()) => {}
            Err(TrySendError::Full(message)) => match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    let sub = sub.clone();
                    let in_flight = in_flight.clone();
                    in_flight.add();
                    runtime.spawn(async move {
                        if let Err(e) = sub.producer.send(message).await {
                            tracing::warn!(target: crate::constant::target::DELIVERY, handler = %sub.handler, error = %e, "could not queue a released message for a handler another process runs");
                        }
                        in_flight.done();
                    });
                }
                Err(_) => {
                    tracing::warn!(target: crate::constant::target::DELIVERY, id = %message.id, handler = %sub.handler, "no runtime to wait for room in the queue of a handler another process runs; its copy is not sent")
                }
            },
            Err(TrySendError::Failed(e)) => {
                tracing::warn!(target: crate::constant::target::DELIVERY, handler = %sub.handler, error = %e, "could not queue a released message for a handler another process runs")
            }
        }
    }
}
