//! Messages of topics with several handlers: how many handlers' copies are still out, and
//! how the ones that ended did.
//!
//! Every handler of a topic is a subscription with a copy of each message. The WAL holds one
//! record per message, so the record is final only when the last copy is: complete if every
//! handler acked, a dead letter naming the handlers whose copy died otherwise. Topics with
//! one handler never come here.
//!
//! Only copies on this process's own queues are counted. A copy on a shared queue (one
//! other processes claim from too: `TopicEntry::claim_counted`) is the backend's once
//! queued, like a copy for a handler only other processes run: another node may claim and
//! settle it, and this process would never see it end, so a fan-out waiting for it would
//! stay open for ever (and, on a file WAL, its record would be replayed at every start).
//! Such a copy ends alone wherever it is claimed: an ack completes the message's record in
//! that node's WAL (nothing, if it holds none), a death records a dead letter naming that
//! handler (in that node's WAL, whether or not it holds a record). Nothing an accepted send
//! promised is lost by not waiting: every copy was handed to the backend's queue before the
//! send answered, and the backend is the log (Redis keeps the entry until its copy is
//! settled, hands a dead node's entries to another, and the writer retries a command until
//! Redis confirmed it). With `RedisWal` the record *is* the entries, so there is nothing else
//! to complete. With a file WAL on shared queues, the sender completes the record itself
//! once the backend confirmed every copy (`sender_completions.rs`), as `delivery/remote/remote_routes.rs`
//! does for records only other processes handle: a message none of whose copies ends on the
//! sender is not sent again at its next start, and a crash before every copy is confirmed
//! replays the message (at least once). A copy that ends on the sender before that (it
//! claimed the entry before the writer heard the reply to a sibling copy's `XADD`) still
//! completes the record at once, a window of about one round trip to Redis. A worker still
//! delivers every copy it claims (a claimed entry of a shared queue is live by its claim,
//! even with no record left here), so none is skipped.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::delivery::dedup::id_key::{IdKeys, KeyHasher};
use crate::message::ack::DeadReason;
use crate::message::emessage::EMessage;

/// Independently locked shards of the open fan-outs; a power of two.
const SHARDS: usize = 16;

/// A handler's copy that ended as a dead letter.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) handler: Arc<str>,
    pub(crate) reason: DeadReason,
    /// The message as of the copy's last delivery.
    pub(crate) message: Arc<EMessage>,
}

/// What one copy's end means for its message.
#[derive(Debug)]
pub(crate) enum CopyEnded {
    /// Not a fanned-out message (one handler had it): it is final now.
    Alone(Option<Failure>),
    /// Other handlers' copies are still out.
    Waiting,
    /// The last copy: the message is final, with these failures (none: every handler acked).
    Last(Vec<Failure>),
}

/// The open fan-outs of one bus, by message id.
///
/// Every copy of every fanned-out message passes here (once when the message is accepted,
/// once per handler when its copy ends), from the sender and from every worker: so the table
/// is sharded, and holds each id by its 128-bit key ([`IdKeys`]): no allocation per message,
/// and a lookup compares 16 bytes instead of validating and comparing the id's text.
#[derive(Debug)]
pub(crate) struct FanOuts {
    keys: IdKeys,
    shards: Box<[Mutex<Shard>]>,
}

type Shard = HashMap<u128, Open, BuildHasherDefault<KeyHasher>>;

impl Default for FanOuts {
    fn default() -> Self {
        FanOuts {
            keys: IdKeys::new(),
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
        }
    }
}

#[derive(Debug)]
struct Open {
    remaining: u32,
    failures: Vec<Failure>,
}

impl FanOuts {
    /// The key of message `id`, and its shard, locked.
    fn lock(&self, id: &str) -> (u128, MutexGuard<'_, Shard>) {
        let key = self.keys.key(id);
        // The high half picks the shard; the map takes its buckets from the low half.
        let i = (key >> 64) as usize & (SHARDS - 1);
        // The map holds counts only; a panic elsewhere cannot leave it half-updated.
        (
            key,
            self.shards[i].lock().unwrap_or_else(|e| e.into_inner()),
        )
    }

    /// `copies` copies of message `id` are being handed to handlers.
    pub(crate) fn open(&self, id: &str, copies: u32) {
        let (key, mut open) = self.lock(id);
        match open.get_mut(&key) {
            // The same id sent again while in flight: the WAL holds one record for both.
            Some(o) => o.remaining += copies,
            None => {
                open.insert(
                    key,
                    Open {
                        remaining: copies,
                        failures: Vec::new(),
                    },
                );
            }
        }
    }

    /// Message `id` was withdrawn before any handler began it.
    pub(crate) fn forget(&self, id: &str) {
        let (key, mut open) = self.lock(id);
        open.remove(&key);
    }

    /// One copy of message `id` ended (`failure`: as a dead letter).
    pub(crate) fn copy_ended(&self, id: &str, failure: Option<Failure>) -> CopyEnded {
        let (key, mut open) = self.lock(id);
        // One probe of the table, whether the entry stays or goes.
        let Entry::Occupied(mut o) = open.entry(key) else {
            return CopyEnded::Alone(failure);
        };
        let entry = o.get_mut();
        if let Some(failure) = failure {
            entry.failures.push(failure);
        }
        entry.remaining = entry.remaining.saturating_sub(1);
        if entry.remaining > 0 {
            return CopyEnded::Waiting;
        }
        CopyEnded::Last(o.remove().failures)
    }

    /// Messages with copies still out.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().map_or(0, |s| s.len()))
            .sum()
    }
}

/// A copy of handler `handler` that died, for the tests of the copy counters.
#[cfg(test)]
pub(crate) fn failure(handler: &str) -> Failure {
    Failure {
        handler: Arc::from(handler),
        reason: DeadReason::Explicit,
        message: Arc::new(EMessage::standard("orders", b"x".to_vec())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_copy_settles_with_every_failure_and_closes_the_entry() {
        let f = FanOuts::default();
        f.open("a", 3);
        assert!(matches!(f.copy_ended("a", None), CopyEnded::Waiting));
        assert!(matches!(
            f.copy_ended("a", Some(failure("notify"))),
            CopyEnded::Waiting
        ));
        match f.copy_ended("a", None) {
            CopyEnded::Last(failures) => {
                assert_eq!(failures.len(), 1);
                assert_eq!(&*failures[0].handler, "notify");
            }
            other => panic!("expected the last copy, got {other:?}"),
        }
        assert_eq!(f.len(), 0);
        // Nothing open any more: a later end is a message of its own.
        assert!(matches!(f.copy_ended("a", None), CopyEnded::Alone(None)));
    }

    #[test]
    fn a_forgotten_message_leaves_nothing_open() {
        let f = FanOuts::default();
        f.open("b", 2);
        f.forget("b");
        assert_eq!(f.len(), 0);
    }
}
