//! The keyed lane's reads: a subscription's keyed stream, read only while this consumer
//! holds its keyed lease (`lease.rs`), every read fenced by it.
//!
//! A read (a task of its own, as the broadcast lane's, that wakes the work read when it
//! ends):
//! 1. without the lease, takes it if free (`TAKE_LEASE`), else waits until the holder's
//!    time to live runs out (a heartbeat at most) and tries again;
//! 2. just taken (or an entry given back since), claims the stream's pending entries this
//!    consumer does not hold, in id order (`XPENDING`, then `TAKE_KEYED`), before anything
//!    new: they are older than every unread entry;
//! 3. reads new entries (`READ_KEYED`); with none, waits on a plain `XREAD BLOCK` after the
//!    stream's last id (which claims nothing, so it needs no fence), and reads again.
//!
//! The lease's state is locked from the check of the lease to the entries' being held
//! here (`LaneConsumer::accept`), so a claim is never older than a loss of the lease it was made
//! under without the lease knowing (`KeyedLease::lost_since`).

use std::sync::Arc;

use event_base_core::backend::{ClaimStatus, Claimed, Receipt};
use redis::Value;
use tokio::time::Instant;

use super::lane_consumer::LaneConsumer;
use crate::error::RedisError;
use crate::lease::{KeyedLease, LeaseState, Taking};
use crate::reply::{self, RawEntry};
use crate::scripts;

/// Pending entries looked at per `XPENDING` of a takeover pass.
const PAGE: usize = 100;

/// What a fenced read found.
enum Fenced {
    /// The lease is not held with this value (anymore).
    Lost,
    /// New entries, read at `sent`.
    Entries(Vec<RawEntry>, Instant),
    /// Nothing new: wait for entries after this id.
    Idle(String),
}

/// One read of the keyed lane (see the module docs): the claims it made, or none once the
/// subscription closed.
pub(super) async fn read(
    inner: &Arc<LaneConsumer>,
    lease: &KeyedLease,
    max: usize,
) -> Result<Vec<Claimed>, RedisError> {
    inner.ensure_group().await?;
    let mut reader = inner.reader.lock().await;
    loop {
        if inner.q.is_closed() {
            return Ok(Vec::new());
        }
        let mut st = lease.lock().await;
        if st.value.is_none() {
            if let Taking::Busy(wait) = lease.take(&mut st).await? {
                drop(st);
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = inner.q.closed() => {}
                }
                continue;
            }
        }
        let mut out = Vec::new();
        if st.rescan {
            let took = take_over(inner, lease, &mut st, max, &mut out).await;
            if !took.inspect_err(|e| inner.forget_group_on(e))? {
                continue; // lost meanwhile
            }
            if !out.is_empty() {
                return Ok(out);
            }
            if st.rescan {
                continue; // a page of entries deleted meanwhile: the next one
            }
        }
        match fenced_read(inner, &st, max).await? {
            Fenced::Lost => lease.lost(&mut st),
            Fenced::Entries(entries, sent) => {
                if inner.accept(entries, &mut out, sent).await > 0 {
                    return Ok(out);
                }
            }
            Fenced::Idle(after) => {
                drop(st);
                let mut cmd = redis::cmd("XREAD");
                cmd.arg("COUNT")
                    .arg(1)
                    .arg("BLOCK")
                    .arg(inner.q.block.as_millis().max(1) as u64)
                    .arg("STREAMS")
                    .arg(&inner.q.key)
                    .arg(after);
                inner
                    .blocking(&mut reader, "XREAD", cmd, true, None)
                    .await?;
            }
        }
    }
}

/// `READ_KEYED`: up to `max` new entries, if the lease is held as `st` says.
async fn fenced_read(
    inner: &LaneConsumer,
    st: &LeaseState,
    max: usize,
) -> Result<Fenced, RedisError> {
    let Some(value) = &st.value else {
        return Ok(Fenced::Lost);
    };
    let cmd = scripts::evalsha(
        &scripts::READ_KEYED,
        &[&inner.q.lease, &inner.q.key],
        (value.as_str(), &inner.q.group, &inner.name, max.max(1)),
    );
    let sent = Instant::now();
    let v = match inner.q.link.run("READ_KEYED", cmd).await {
        Ok(v) => v,
        Err(e) => {
            inner.forget_group_on(&e);
            return Err(e);
        }
    };
    let parts = reply::array("READ_KEYED", &v)?;
    match (
        parts.first().map(|c| reply::int("READ_KEYED", c)),
        parts.get(1),
    ) {
        (Some(Ok(1)), Some(list)) => Ok(Fenced::Entries(reply::entries("READ_KEYED", list)?, sent)),
        (Some(Ok(2)), Some(id)) => Ok(Fenced::Idle(reply::string("READ_KEYED", id)?)),
        (Some(Ok(0)), _) => Ok(Fenced::Lost),
        _ => Err(RedisError::UnexpectedReply {
            command: "READ_KEYED",
            what: format!("{v:?}"),
        }),
    }
}

/// The takeover pass (see the module docs), from where it stopped (`st.cursor`): claims
/// into `out` the pending entries this consumer does not hold, page by page, until the
/// pending list is through (then `st.rescan` is cleared) or `out` has `max`. Returns
/// `false` if the lease was found lost.
async fn take_over(
    inner: &Arc<LaneConsumer>,
    lease: &KeyedLease,
    st: &mut LeaseState,
    max: usize,
    out: &mut Vec<Claimed>,
) -> Result<bool, RedisError> {
    let Some(value) = st.value.clone() else {
        return Ok(false);
    };
    loop {
        let mut xpending = redis::cmd("XPENDING");
        xpending
            .arg(&inner.q.key)
            .arg(&inner.q.group)
            .arg(&st.cursor)
            .arg("+")
            .arg(PAGE);
        let v = inner.q.link.run("XPENDING", xpending).await?;
        let page = pending_page(&v)?;
        let Some(last) = page.last().map(|(id, _)| id.clone()) else {
            st.rescan = false;
            st.cursor = "-".to_owned();
            return Ok(true);
        };
        let want: Vec<&str> = {
            let held = inner.held();
            page.iter()
                .filter(|(id, owner)| {
                    *owner != inner.name || inner.receipt(id).is_none_or(|r| !held.contains_key(&r))
                })
                .map(|(id, _)| id.as_str())
                .collect()
        };
        if !want.is_empty() {
            let cmd = scripts::evalsha(
                &scripts::TAKE_KEYED,
                &[&inner.q.lease, &inner.q.key],
                (value.as_str(), &inner.q.group, &inner.name, &want),
            );
            let sent = Instant::now();
            let v = inner.q.link.run("TAKE_KEYED", cmd).await?;
            let parts = reply::array("TAKE_KEYED", &v)?;
            if parts
                .first()
                .map(|c| reply::int("TAKE_KEYED", c))
                .transpose()?
                != Some(1)
            {
                lease.lost(st);
                return Ok(false);
            }
            let (Some(entries), Some(counts)) = (parts.get(1), parts.get(2)) else {
                return Err(RedisError::UnexpectedReply {
                    command: "TAKE_KEYED",
                    what: format!("{} parts", parts.len()),
                });
            };
            let taken = reply::entries("TAKE_KEYED", entries)?
                .into_iter()
                .zip(reply::ints("TAKE_KEYED", counts)?);
            let mut live = Vec::with_capacity(taken.len());
            for (entry, count) in taken {
                if count > i64::from(inner.q.max_deliveries) {
                    inner.stalled(entry, count).await;
                } else {
                    live.push(entry);
                }
            }
            let n = live.len();
            inner.accept(live, out, sent).await;
            if n > 0 {
                tracing::info!(target: "event_base::redis", topic = %inner.q.topic, handler = %inner.q.handler, consumer = %inner.name, entries = n, "took over keyed entries another consumer had claimed (or this one gave back), in their order");
            }
        }
        st.cursor = format!("({last}");
        if page.len() < PAGE {
            st.rescan = false;
            st.cursor = "-".to_owned();
            return Ok(true);
        }
        if out.len() >= max {
            return Ok(true);
        }
    }
}

/// The `(id, consumer)` pairs of an extended `XPENDING` reply.
fn pending_page(v: &Value) -> Result<Vec<(String, String)>, RedisError> {
    reply::array("XPENDING", v)?
        .iter()
        .map(|e| match reply::array("XPENDING", e)? {
            [id, owner, ..] => Ok((
                reply::string("XPENDING", id)?,
                reply::string("XPENDING", owner)?,
            )),
            other => Err(RedisError::UnexpectedReply {
                command: "XPENDING",
                what: format!("an entry of {} parts", other.len()),
            }),
        })
        .collect()
}

/// One step of a closing subscription's drain on the keyed lane: while this consumer holds
/// the lease (taken if free, unless given up), its takeover pass, then what the stream held
/// when the drain began. Returns the claims added to `out`, and whether the lane is drained.
pub(super) async fn drain_step(
    inner: &Arc<LaneConsumer>,
    lease: &KeyedLease,
    max: usize,
    out: &mut Vec<Claimed>,
) -> Result<(usize, bool), RedisError> {
    use std::sync::atomic::Ordering;
    if inner.drained.load(Ordering::Acquire) {
        return Ok((0, true));
    }
    inner.ensure_group().await?;
    let mut st = lease.lock().await;
    if st.value.is_none() && lease.take(&mut st).await? != Taking::Taken {
        // Another consumer reads the keyed messages (or this one gave up): none are ours.
        inner.drained.store(true, Ordering::Release);
        return Ok((0, true));
    }
    let before = out.len();
    if st.rescan {
        let took = take_over(inner, lease, &mut st, max, out).await;
        if !took.inspect_err(|e| inner.forget_group_on(e))? {
            inner.drained.store(true, Ordering::Release);
            return Ok((0, true));
        }
        if out.len() > before || st.rescan {
            return Ok((out.len() - before, false));
        }
    }
    let Some(cutoff) = inner.drain_cutoff().await? else {
        inner.drained.store(true, Ordering::Release);
        return Ok((0, true));
    };
    match fenced_read(inner, &st, max).await? {
        Fenced::Lost => {
            lease.lost(&mut st);
            inner.drained.store(true, Ordering::Release);
            Ok((0, true))
        }
        Fenced::Idle(_) => {
            inner.drained.store(true, Ordering::Release);
            Ok((0, true))
        }
        Fenced::Entries(entries, sent) => {
            // Reads come in id order: one that reaches the cutoff has read all before it.
            let reached = entries.iter().any(|(id, _)| {
                crate::codec::receipt(id).is_none_or(|r| (r.hi, r.lo) >= (cutoff.hi, cutoff.lo))
            });
            if reached {
                inner.drained.store(true, Ordering::Release);
            }
            Ok((inner.accept(entries, out, sent).await, reached))
        }
    }
}

/// Whether a keyed claim in doubt is still this consumer's: not if the lease was lost
/// since it was made; else the lease is renewed (one round trip for every claim in doubt:
/// they share the lease), and the claim is this consumer's if that found it held.
pub(super) async fn confirm(
    inner: &LaneConsumer,
    lease: &KeyedLease,
    receipt: Receipt,
) -> Result<ClaimStatus, RedisError> {
    let Some(at) = inner.held().get(&receipt).copied() else {
        return Ok(ClaimStatus::Lost);
    };
    if lease.lost_since(at) {
        inner.held().remove(&receipt);
        return Ok(ClaimStatus::Lost);
    }
    if lease.fresh(at, Instant::now()) {
        return Ok(ClaimStatus::Held);
    }
    match lease.renew().await {
        Ok(true) if !lease.lost_since(at) => Ok(ClaimStatus::Held),
        Ok(_) => {
            inner.held().remove(&receipt);
            inner
                .lost
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(target: "event_base::redis", topic = %inner.q.topic, consumer = %inner.name, "a keyed claim was made under a keyed lease lost since (was this process paused?); it is dropped here unhandled, the lease's new holder handles it");
            Ok(ClaimStatus::Lost)
        }
        Err(e) => {
            tracing::warn!(target: "event_base::redis", topic = %inner.q.topic, consumer = %inner.name, error = %e, "could not confirm the keyed lease; the handler runs anyway, so a keyed message another consumer took over meanwhile may be handled twice, or beside a later one of its key");
            Err(RedisError::LeaseUnconfirmed {
                reason: e.to_string(),
            })
        }
    }
}

/// Keyed claims given back (`nack`: dropped before their handler's copy ended): left
/// pending, not held here any more, and claimed again, in id order, by the lease holder's
/// next pass (this consumer's, if it still holds the lease).
pub(super) async fn give_back(inner: &LaneConsumer, claimed: &[Claimed]) {
    {
        let mut held = inner.held();
        for c in claimed {
            held.remove(&c.receipt);
        }
    }
    if let Some(lease) = &inner.lease {
        let mut st = lease.lock().await;
        if !st.rescan {
            st.rescan = true;
            st.cursor = "-".to_owned();
        }
    }
    inner.release_if_idle().await;
}

impl LaneConsumer {
    /// Gives up the keyed lease once the subscription closed and no keyed claim is held
    /// here: the next holder takes over at once. Nothing on other lanes.
    pub(super) async fn release_if_idle(&self) {
        if let Some(lease) = &self.lease {
            if self.q.is_closed() && self.held().is_empty() && !lease.released() {
                lease.release().await;
            }
        }
    }
}

impl Drop for LaneConsumer {
    fn drop(&mut self) {
        if let Some(lease) = &self.lease {
            lease.release_detached();
        }
    }
}
