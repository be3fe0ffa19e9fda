//! A subscription's two queue ends over its topic's log: [`LogProducer`] appends a copy for
//! that subscription alone (a retry, a due delayed message, a released or replayed one), and
//! [`LogConsumer`] claims with the subscription's cursor. A plain send to the topic appends
//! once for every subscription instead (`Route::log`, `delivery/send/accept.rs`).
//!
//! Both implement the queue contract (`backend/queue.rs`), so the workers, the router and
//! the send path treat a log-backed subscription as they treat any in-memory queue.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::backend::queue::{Claimed, EConsumer, EProducer, TrySendError};
use crate::delivery::log::topic_log::{AppendError, LogWriter, SubSet, TopicLog};
use crate::error::QueueError;
use crate::message::emessage::EMessage;
use crate::message::topic::MessageTopic;

/// Appends copies for one subscription of a log.
pub(crate) struct LogProducer {
    writer: LogWriter,
    sub: usize,
    topic: MessageTopic,
}

impl LogProducer {
    pub(crate) fn new(log: Arc<TopicLog>, sub: usize, topic: MessageTopic) -> Self {
        LogProducer {
            writer: LogWriter::new(log),
            sub,
            topic,
        }
    }

    fn closed(&self) -> QueueError {
        QueueError::Closed(self.topic.0.clone())
    }
}

#[async_trait]
impl EProducer for LogProducer {
    #[inline]
    fn try_send(&self, message: Arc<EMessage>) -> Result<(), TrySendError> {
        match self.writer.log().try_append(message, 1 << self.sub) {
            Ok(()) => Ok(()),
            Err(AppendError::Full(m)) => Err(TrySendError::Full(m)),
            Err(AppendError::Closed(_)) => Err(TrySendError::Failed(self.closed())),
        }
    }

    async fn send(&self, message: Arc<EMessage>) -> Result<(), QueueError> {
        self.writer
            .log()
            .append(message, 1 << self.sub)
            .await
            .map_err(|_| self.closed())
    }

    fn len(&self) -> usize {
        self.writer.log().pending(self.sub)
    }
}

/// Claims one subscription's messages with its cursor.
pub(crate) struct LogConsumer {
    log: Arc<TopicLog>,
    sub: usize,
    topic: MessageTopic,
    /// The subscription's workers (as declared): a claim takes at most its share of the
    /// backlog, so that a run claimed by one worker does not leave its siblings idle.
    workers: usize,
}

impl LogConsumer {
    pub(crate) fn new(log: Arc<TopicLog>, sub: usize, topic: MessageTopic, workers: usize) -> Self {
        LogConsumer {
            log,
            sub,
            topic,
            workers,
        }
    }

    fn take(&self, max: usize, out: &mut Vec<Claimed>) -> Result<usize, QueueError> {
        self.log
            .claim(self.sub, max, self.workers, out)
            .map_err(|()| QueueError::Closed(self.topic.0.clone()))
    }
}

#[async_trait]
impl EConsumer for LogConsumer {
    async fn claim_batch(&self, max: usize, out: &mut Vec<Claimed>) -> Result<usize, QueueError> {
        let bell: &Notify = self.log.bell(self.sub);
        loop {
            let rung = bell.notified();
            tokio::pin!(rung);
            // Listening before the look, so an append in between is not missed.
            rung.as_mut().enable();
            match self.take(max.max(1), out)? {
                0 => rung.await,
                n => return Ok(n),
            }
        }
    }

    #[inline]
    fn try_claim(&self, max: usize, out: &mut Vec<Claimed>) -> Result<usize, QueueError> {
        self.take(max, out)
    }

    fn bell(&self) -> Option<&Notify> {
        Some(self.log.bell(self.sub))
    }

    fn requires_ack(&self) -> bool {
        false
    }

    async fn ack(&self, _claimed: &[Claimed]) -> Result<(), QueueError> {
        Ok(())
    }

    async fn nack(&self, _claimed: &[Claimed]) -> Result<(), QueueError> {
        // Nothing is held back by an in-memory claim; the caller re-sends through the WAL.
        Ok(())
    }

    async fn claim_stale(
        &self,
        _min_idle: Duration,
        _max: usize,
        _out: &mut Vec<Claimed>,
    ) -> Result<usize, QueueError> {
        Ok(0)
    }
}

/// The topic-wide end of a log, held by its route: appends a message once for every
/// subscription.
#[derive(Debug)]
pub(crate) struct LogAppender {
    writer: LogWriter,
    all: SubSet,
}

impl LogAppender {
    pub(crate) fn new(log: Arc<TopicLog>) -> Self {
        let all = log.all();
        LogAppender {
            writer: LogWriter::new(log),
            all,
        }
    }

    /// Appends `message` once for every subscription, without waiting; hands it back if the
    /// log is full or closed (the caller then queues a copy per subscription, waiting).
    /// `counted`: its copies are counted by the log's state words (`CopySlab`), the index
    /// travelling with each claim, instead of by the fan-out table; also handed back when
    /// every index is taken (the caller then counts it in the table).
    #[inline]
    pub(crate) fn try_append_all(
        &self,
        message: Arc<EMessage>,
        counted: bool,
    ) -> Result<(), Arc<EMessage>> {
        let log = self.writer.log();
        let index = match log.copies().filter(|_| counted) {
            Some(slab) => match slab.open(self.all.count_ones()) {
                Some(i) => Some((slab, i)),
                None => return Err(message),
            },
            None => None,
        };
        let copies = index.map_or(0, |(_, i)| i + 1);
        log.try_append_counted(message, self.all, copies)
            .map_err(|e| {
                if let Some((slab, i)) = index {
                    slab.close(i);
                }
                match e {
                    AppendError::Full(m) | AppendError::Closed(m) => m,
                }
            })
    }

    /// Whether appends for every subscription can be counted by state words (the log has
    /// several subscriptions).
    pub(crate) fn counts_copies(&self) -> bool {
        self.writer.log().copies().is_some()
    }
}
