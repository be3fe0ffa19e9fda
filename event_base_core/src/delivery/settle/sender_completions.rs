//! [`SenderCompletions`]: the WAL records of messages whose every copy went to a shared
//! queue, completed on the sender once the backend confirmed those copies.
//!
//! A copy on a shared queue (`TopicEntry::claim_counted`) may be claimed and settled by any
//! node, so the sender cannot wait for its handler's ack to complete its record: a message
//! another node handled would stay `Pending` in a file WAL and be sent again at every start.
//! Once the backend confirmed the copy (on Redis: the `XADD` answered), the backend is the
//! log: it keeps the entry until a handler settles it and hands a dead node's entries to
//! another. So the sender completes the record then, whoever handles the copies, and a
//! crash before that (a copy's `XADD` still on the writer) replays it.
//!
//! Sends register their message ids here once every copy is queued; one task per bus at a
//! time waits for the backend to confirm what was queued so far
//! ([`RemoteRoutes::flush`]) and completes the ids registered before it asked, in one
//! WAL write. The task counts in flight, so `wait_idle` and `Drain` wait for it.
//!
//! With `RedisWal` the record *is* the entries: its `complete` does nothing, and this costs
//! one `PING` per batch. In-process queues never come here.

use std::sync::{Arc, Mutex};

use crate::backend::routes::RemoteRoutes;
use crate::backend::wal::Wal;
use crate::delivery::in_flight::InFlight;

/// The ids waiting for the backend's confirmation, and whether a task is confirming.
#[derive(Default)]
struct Waiting {
    ids: Vec<String>,
    confirming: bool,
}

/// Records to complete once the backend confirmed their copies (see the module docs).
#[derive(Default)]
pub(crate) struct SenderCompletions {
    waiting: Arc<Mutex<Waiting>>,
}

impl SenderCompletions {
    /// Every copy of each of `ids` was handed to a shared queue: complete their records in
    /// `wal` once `provider` confirmed what it was handed so far. Without a runtime the
    /// records stay (a restart sends them again: a duplicate, never a loss).
    pub(crate) fn queued<'a>(
        &self,
        ids: impl IntoIterator<Item = &'a str>,
        wal: &Arc<dyn Wal>,
        provider: &Arc<dyn RemoteRoutes>,
        in_flight: &Arc<InFlight>,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(target: crate::constant::target::DELIVERY, "no runtime to complete records once the backend confirmed their copies; they stay in the WAL for the next start");
            return;
        };
        {
            let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            waiting.ids.extend(ids.into_iter().map(str::to_owned));
            if waiting.confirming || waiting.ids.is_empty() {
                return;
            }
            waiting.confirming = true;
        }
        // Counted before the send that registered the ids stops counting (it still does).
        in_flight.add();
        let (waiting, wal, provider, in_flight) = (
            self.waiting.clone(),
            wal.clone(),
            provider.clone(),
            in_flight.clone(),
        );
        runtime.spawn(async move {
            loop {
                let ids = {
                    let mut w = waiting.lock().unwrap_or_else(|e| e.into_inner());
                    if w.ids.is_empty() {
                        w.confirming = false;
                        break;
                    }
                    std::mem::take(&mut w.ids)
                };
                // Asked after the ids were registered, so after their copies were queued.
                match provider.flush().await {
                    Ok(()) => {
                        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                        if let Err(e) = wal.complete_batch(&ids) {
                            tracing::warn!(target: crate::constant::target::DELIVERY, messages = ids.len(), error = %e, "could not complete records whose copies the backend confirmed; they will be sent again after a restart");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(target: crate::constant::target::DELIVERY, messages = ids.len(), error = %e, "the backend did not confirm the copies of these messages; their records stay in the WAL for the next start");
                    }
                }
            }
            // The WAL's handle goes before the count does: once the bus is idle, closing it
            // releases the WAL (a `PersistentWal` unlocks its directory) at once.
            drop((wal, provider, waiting));
            in_flight.done();
        });
    }
}
