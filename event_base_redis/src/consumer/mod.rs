//! [`RedisConsumer`]: claims a subscription's entries through its consumer group, renews the
//! leases of what it holds, takes over entries whose consumer died, and settles them.
//!
//! | trait method | Redis |
//! |---|---|
//! | `claim_batch` | `XREADGROUP GROUP <handler> <me> COUNT n BLOCK b STREAMS <stream> >` on a connection of its own; every half visibility timeout, first `XAUTOCLAIM` of entries idle past it |
//! | `stop_claiming` | nothing more is read; a blocked `XREADGROUP` is woken (`CLIENT UNBLOCK`) and returns what it got |
//! | `ack` | script `ACK`: one owner check of the batch (`XPENDING <first> <last> <n> <me>`), one `XACK` + one `XDEL` of what it owns, `XLEN` |
//! | `nack` | script `REQUEUE`: owner check of the batch, a copy of each at the end of the stream, `XACK` + `XDEL` of the originals |
//! | `retry_later` | script `RETRY`: owner check of the entry, `XACK` + `XDEL` of it, and its next attempt (`attempts` counted) into the subscription's delayed set, due after the delay by the server's clock (`PROMOTE` moves it back to this subscription's stream) |
//! | `claim_stale` | script `RECLAIM`: `XAUTOCLAIM … <min_idle> <cursor> COUNT n` and each entry's delivery count; one past `max_deliveries` is dead-lettered (script `DEAD`) instead of returned |
//! | (before reading) | script `PROMOTE` when a delayed message may be due (every `block`, and when this process scheduled one): moves what is due by the server's clock to the stream |
//! | (while held) | script `EXTEND` every third of the visibility timeout: owner check of the batch, one `XCLAIM … JUSTID` of what it still owns |
//! | `claim_in_doubt` | nothing: in doubt once the lease was last confirmed (claimed or renewed) half a visibility timeout ago or more, or this node may have been evicted since (`Node::unevicted_since`) |
//! | `confirm_claim` | script `EXTEND` over every claim held in doubt, one confirmation at a time: what is no longer owned is dropped unhandled; after a failed one, none again for a `block` (they fail at once) |
//!
//! A claim can be lost while it waits for its handler: a process paused (or starved) past
//! the visibility timeout stops renewing its leases, and another consumer's sweep takes its
//! entries over. Its acks are then fenced, but the handlers would still run on wake-up, on
//! work already done elsewhere. So the bus asks before each handler starts
//! (`claim_in_doubt`), and this consumer answers from memory: it keeps, for every entry it
//! holds, when its lease was last confirmed (the send of the command that claimed or renewed
//! it). Under half a visibility timeout old, with this node beating since, nobody can have
//! taken it over: no round trip. Older (which only a pause or a starved runtime makes, the
//! extender renewing every third), the bus asks `confirm_claim`, which checks and renews
//! every claim in doubt at once with `EXTEND`, the owner check the renewals already use: a
//! local deadline rather than an epoch on each claim, since Redis already names the owner of
//! each pending entry, and rather than one check per message, which would cost a round trip
//! on every delivery.
//!
//! A work lane's consumer also reads the subscription's broadcast stream, through this
//! node's group `n:<node id>` (created at the stream's end), with a connection of its own:
//! a group name is one per `XREADGROUP`, and the two streams' groups differ (one shared by
//! every node, one per node), so the two reads cannot be one command. The broadcast read
//! runs as a task of its own that outlives a claim (a claim that got work entries leaves it
//! blocked, so a busy consumer pays nothing for it); when it gets entries it wakes the work
//! read, and the claim returns both. Its entries are acked, never deleted (script
//! `ACK_ONLY`, which then trims what every node's group is done with); a `nack` leaves one
//! pending for this node's own sweep; a takeover past `max_deliveries` dead-letters it for
//! this node only. Receipts of broadcast entries carry [`BROADCAST_TAG`] in `lo`, so `ack`
//! and `nack` tell the lanes apart. An entry of the broadcast stream addressed to a worker
//! of another node (`to_worker: "<node id>/<worker>"`) is acked as soon as it is read
//! (or taken over), never handed to the bus.
//!
//! A work lane's consumer also reads, while it holds the subscription's keyed lease
//! (`lease.rs`), its keyed stream: a third lane, read by a task of its own as the broadcast
//! one is (`keyed.rs`), its receipts tagged with [`KEYED_TAG`]. Its reads are fenced by the
//! lease; nobody sweeps it by idle time (only a new lease holder takes its pending entries
//! over, in id order); a `nack` leaves the entry pending for the lease holder to claim again
//! in its place; a retry stays in the process (the bus keeps a keyed retry there, its
//! entry claimed, so that it keeps its place); a claim is in doubt once the lease was not
//! renewed for half its time to live, or was lost since the claim.
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | `RedisConsumer`: a work lane and its side lanes, and which lane a receipt is of |
//! | `econsumer.rs` | the `EConsumer` contract over the lanes |
//! | `lane_consumer.rs` | one lane's state, receipts and consumer group (`LaneConsumer`) |
//! | `lane_tag.rs` | the tags that mark a receipt's lane |
//! | `read.rs` | reads of new entries, and the drain |
//! | `accept.rs` | read entries into claims (poison aside) |
//! | `claim_lease.rs` | the claims' leases: renewed, confirmed |
//! | `takeover.rs` | stale entries taken over, dead letters past `max_deliveries` |
//! | `settle.rs` | acks and requeues |
//! | `delayed.rs` | retries into the delayed set, due messages promoted |
//! | `side_lane.rs` | a side lane's read in flight |
//! | `keyed.rs` | the keyed lane's reads, fenced by its lease |

use std::sync::Arc;

use event_base_core::backend::Claimed;
use tokio::sync::Notify;

use crate::lane::Lane;
use crate::lease::KeyedLease;
use crate::queue::SubQueue;
use lane_consumer::LaneConsumer;
use lane_tag::{BROADCAST_TAG, KEYED_TAG, TAGS};
use side_lane::{Reading, SideLane};

mod accept;
mod claim_lease;
mod delayed;
mod econsumer;
mod keyed;
mod lane_consumer;
mod lane_tag;
mod read;
mod settle;
mod side_lane;
mod takeover;

/// The claiming side of one subscription's stream (see the module docs).
pub(crate) struct RedisConsumer {
    inner: Arc<LaneConsumer>,
    /// A work lane's subscription's broadcast lane, read alongside it.
    bcast: Option<SideLane>,
    /// A work lane's subscription's keyed lane, read alongside it while this consumer
    /// holds the keyed lease.
    keyed: Option<SideLane>,
}

impl RedisConsumer {
    pub(crate) fn new(q: Arc<SubQueue>, name: String) -> Self {
        q.consumes.store(true, std::sync::atomic::Ordering::Release);
        let ended = Arc::new(Notify::new());
        let side = |inner: Arc<LaneConsumer>| SideLane {
            inner,
            read: tokio::sync::Mutex::new(Reading::default()),
            ended: ended.clone(),
        };
        let bcast = q
            .companion(Lane::Broadcast)
            .map(|b| side(LaneConsumer::new(b, name.clone(), None)));
        let keyed = q.keyed_lane().map(|k| {
            let lease = Arc::new(KeyedLease::new(
                k.link.clone(),
                k.lease.clone(),
                name.clone(),
                k.node.beat_every(),
                crate::node::SILENT_BEATS,
            ));
            k.node.keep_lease(&lease);
            side(LaneConsumer::new(k, name.clone(), Some(lease)))
        });
        RedisConsumer {
            inner: LaneConsumer::new(q, name, None),
            bcast,
            keyed,
        }
    }

    /// The lane a claim came from.
    fn lane_of(&self, c: &Claimed) -> &Arc<LaneConsumer> {
        let tag = c.receipt.lo & TAGS;
        match (&self.bcast, &self.keyed) {
            (Some(b), _) if tag == BROADCAST_TAG => &b.inner,
            (_, Some(k)) if tag == KEYED_TAG => &k.inner,
            _ => &self.inner,
        }
    }

    /// `claimed` split by lane; `None` when all are of one lane (the common case, without
    /// copying).
    fn split(&self, claimed: &[Claimed]) -> Option<Vec<Vec<Claimed>>> {
        let first = claimed.first()?.receipt.lo & TAGS;
        if claimed.iter().all(|c| c.receipt.lo & TAGS == first) {
            return None;
        }
        let mut lanes: Vec<Vec<Claimed>> = vec![Vec::new(), Vec::new(), Vec::new()];
        for c in claimed {
            let i = match c.receipt.lo & TAGS {
                BROADCAST_TAG => 1,
                KEYED_TAG => 2,
                _ => 0,
            };
            lanes[i].push(c.clone());
        }
        lanes.retain(|l| !l.is_empty());
        Some(lanes)
    }

    /// The side lanes (broadcast, keyed) this consumer reads alongside its work lane.
    fn sides(&self) -> impl Iterator<Item = &SideLane> {
        self.bcast.iter().chain(self.keyed.iter())
    }
}
