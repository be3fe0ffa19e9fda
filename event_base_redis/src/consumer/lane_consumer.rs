//! One lane of a consumer (its work, broadcast or keyed stream): the lane's state, its
//! receipts, and its consumer group. What the lane does is in the files beside this one:
//! `read.rs` (reads), `accept.rs` (read entries into claims), `claim_lease.rs` (the claims'
//! leases), `takeover.rs` (stale entries), `settle.rs` (acks and requeues), `delayed.rs`
//! (retries and delayed messages).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use event_base_core::backend::Receipt;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use super::lane_tag::{BROADCAST_TAG, KEYED_TAG, TAGS};
use crate::codec;
use crate::error::RedisError;
use crate::lane::Lane;
use crate::lease::KeyedLease;
use crate::queue::SubQueue;

/// One lane of a consumer: its stream (`q`), its reads, the claims it holds and their leases.
pub(super) struct LaneConsumer {
    pub(super) q: Arc<SubQueue>,
    /// [`BROADCAST_TAG`] on a broadcast lane, else 0: or-ed into each receipt's `lo`.
    pub(super) tag: u64,
    /// This consumer's name in the group: unique per process start.
    pub(super) name: String,
    pub(super) reader: tokio::sync::Mutex<Reader>,
    /// Entries claimed and not yet settled (their leases are renewed), each with when its
    /// lease was last confirmed: when the command that claimed or renewed it was sent, so
    /// never later than Redis reset its idle time.
    pub(super) held: Mutex<HashMap<Receipt, Instant>>,
    /// One confirmation of claims in doubt at a time (`confirm`): workers that ask
    /// meanwhile wait for it, and most then find theirs decided. Holds the last failed one:
    /// when it began and ended, and why.
    pub(super) confirming: tokio::sync::Mutex<Option<(Instant, Instant, String)>>,
    /// Claims found lost by a confirmation before their handlers started.
    pub(super) lost: std::sync::atomic::AtomicU64,
    /// A keyed lane's lease.
    pub(super) lease: Option<Arc<KeyedLease>>,
    /// Where the last `claim_stale` scan stopped.
    pub(super) cursor: tokio::sync::Mutex<String>,
    /// When `claim_batch` next looks for stale entries.
    pub(super) next_sweep: Mutex<Instant>,
    /// Whether the group is known to exist.
    pub(super) group_ready: std::sync::atomic::AtomicBool,
    /// Closed, and a read found nothing more (or claiming stopped: `stop_claiming`): every
    /// claim now reports `Closed`.
    pub(super) drained: std::sync::atomic::AtomicBool,
    /// Once closed: the newest entry of the stream when the drain began (`None` inside: it
    /// was empty). The drain reads up to it, not what other processes send after.
    pub(super) cutoff: tokio::sync::OnceCell<Option<Receipt>>,
    pub(super) extender: std::sync::Once,
}

#[derive(Default)]
pub(super) struct Reader {
    pub(super) conn: Option<(MultiplexedConnection, i64)>,
}

impl LaneConsumer {
    pub(super) fn new(
        q: Arc<SubQueue>,
        name: String,
        lease: Option<Arc<KeyedLease>>,
    ) -> Arc<LaneConsumer> {
        let first_sweep = Instant::now() + q.visibility / 2;
        let tag = match q.lane {
            Lane::Broadcast => BROADCAST_TAG,
            Lane::Keyed => KEYED_TAG,
            Lane::Work => 0,
        };
        Arc::new(LaneConsumer {
            q,
            tag,
            name,
            reader: tokio::sync::Mutex::new(Reader::default()),
            held: Mutex::new(HashMap::new()),
            confirming: tokio::sync::Mutex::new(None),
            lost: std::sync::atomic::AtomicU64::new(0),
            lease,
            cursor: tokio::sync::Mutex::new("0-0".to_owned()),
            next_sweep: Mutex::new(first_sweep),
            group_ready: std::sync::atomic::AtomicBool::new(false),
            drained: std::sync::atomic::AtomicBool::new(false),
            cutoff: tokio::sync::OnceCell::new(),
            extender: std::sync::Once::new(),
        })
    }

    /// The receipt of entry `id` on this lane.
    pub(super) fn receipt(&self, id: &str) -> Option<Receipt> {
        codec::receipt(id).map(|r| Receipt {
            hi: r.hi,
            lo: r.lo | self.tag,
        })
    }

    /// The entry id of a receipt of this lane.
    pub(super) fn entry_id(&self, r: &Receipt) -> String {
        codec::entry_id(&Receipt {
            hi: r.hi,
            lo: r.lo & !TAGS,
        })
    }

    pub(super) fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Receipt, Instant>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates the group (at the stream's start, so entries added before it are read) if it
    /// is not known to exist.
    pub(super) async fn ensure_group(&self) -> Result<(), RedisError> {
        use std::sync::atomic::Ordering;
        if self.group_ready.load(Ordering::Acquire) {
            return Ok(());
        }
        if self.q.lane == Lane::Broadcast {
            // The group makes the node addressable: be found by name first, or a send by
            // name in between misses this node (or picks its namesake as the only one).
            self.q.node.beat_now().await?;
        }
        let mut cmd = redis::cmd("XGROUP");
        cmd.arg("CREATE")
            .arg(&self.q.key)
            .arg(&self.q.group)
            // A node's broadcast group starts at the end: commands sent before it started
            // are not for it.
            .arg(if self.q.lane == Lane::Broadcast {
                "$"
            } else {
                "0"
            })
            .arg("MKSTREAM");
        match self.q.link.run("XGROUP CREATE", cmd).await {
            Ok(_) => {}
            Err(RedisError::Refused { message, .. }) if message.starts_with("BUSYGROUP") => {}
            Err(e) => return Err(e),
        }
        // Registered on either lane: other nodes send to (and publish on) what it lists.
        let as_handler = (
            self.q.registry.as_str(),
            self.q.topic.as_str(),
            self.q.handler.as_str(),
        );
        self.q
            .node
            .register(Some(as_handler), &self.q.key, &self.q.group, &self.name);
        self.group_ready.store(true, Ordering::Release);
        Ok(())
    }

    /// A failed command may mean the group is gone (Redis restarted without persistence):
    /// look again next time.
    pub(super) fn forget_group_on(&self, e: &RedisError) {
        if matches!(e, RedisError::Refused { message, .. } if message.starts_with("NOGROUP")) {
            self.group_ready
                .store(false, std::sync::atomic::Ordering::Release);
        }
    }
}
