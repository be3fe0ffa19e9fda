//! A unit of work handed from the router to a worker.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use crate::message::emessage::EMessage;

/// Shared by the deliveries of one `Broadcast` or `Repeated(n)` message: the WAL record is
/// finished when the last of them is.
#[derive(Debug)]
pub(crate) struct DeliveryGroup {
    remaining: AtomicU32,
    failed: AtomicBool,
}

impl DeliveryGroup {
    pub(crate) fn new(n: u32) -> Arc<Self> {
        Arc::new(DeliveryGroup {
            remaining: AtomicU32::new(n),
            failed: AtomicBool::new(false),
        })
    }

    /// Counts one delivery done; `true` for the last one.
    pub(crate) fn finish_one(&self) -> bool {
        self.remaining.fetch_sub(1, Ordering::AcqRel) == 1
    }

    pub(crate) fn mark_failed(&self) {
        self.failed.store(true, Ordering::Release);
    }

    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
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
