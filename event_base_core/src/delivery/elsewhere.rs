//! The handlers of a route that only other processes run ([`Elsewhere`]), each one a
//! [`RemoteSub`]: what a [`Route`](crate::delivery::topic_table::Route) carries besides its
//! local subscriptions when the queue backend is shared (`QueueFactory::routes`). Kept apart
//! from the table that fills them in (`remote_table.rs`) so the topic table can hold them
//! without importing it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::backend::queue::EProducer;

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
