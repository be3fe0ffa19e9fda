//! A unit of work handed from the router to a worker.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use crate::message::ack::DeadReason;
use crate::message::emessage::EMessage;

/// Shared by the deliveries of one `Broadcast` or `Repeated(n)` message within one handler:
/// the handler's copy is finished when the last of them is.
#[derive(Debug)]
pub(crate) struct DeliveryGroup {
    remaining: AtomicU32,
    /// Why the first of them that died did.
    failure: OnceLock<DeadReason>,
}

impl DeliveryGroup {
    pub(crate) fn new(n: u32) -> Arc<Self> {
        Arc::new(DeliveryGroup {
            remaining: AtomicU32::new(n),
            failure: OnceLock::new(),
        })
    }

    /// Counts one delivery done; `true` for the last one.
    pub(crate) fn finish_one(&self) -> bool {
        self.remaining.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// One delivery died for `reason` (the first reason is kept).
    pub(crate) fn mark_failed(&self, reason: DeadReason) {
        let _ = self.failure.set(reason);
    }

    /// Why the first delivery that died did, if one did.
    pub(crate) fn failure(&self) -> Option<&DeadReason> {
        self.failure.get()
    }
}

/// One delivery.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) message: Arc<EMessage>,
    pub(crate) group: Option<Arc<DeliveryGroup>>,
}

/// Which worker may take a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// Any idle worker of the topic.
    Any,
    /// The worker at this index of the topic's worker list.
    Worker(usize),
}
