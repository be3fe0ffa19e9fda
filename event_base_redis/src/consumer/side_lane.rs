//! A side lane (broadcast or keyed) of a work lane's consumer: its read runs as a task of its
//! own that can outlive a claim, and wakes the work read when it ends.

use std::sync::Arc;

use event_base_core::backend::Claimed;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::keyed;
use super::lane_consumer::LaneConsumer;
use crate::error::RedisError;

/// A read of a broadcast stream in flight: the claims it made (held, leases renewed).
type BroadcastRead = JoinHandle<Result<Vec<Claimed>, RedisError>>;

/// The broadcast lane's reading state.
#[derive(Default)]
pub(super) struct Reading {
    /// The read in flight, as a task of its own so it can outlive one claim.
    pub(super) task: Option<BroadcastRead>,
    /// Claims of an ended read that did not fit in the claim that took it (held, leases
    /// renewed): the next claims return them first.
    pub(super) stash: Vec<Claimed>,
}

/// The broadcast or keyed lane of a subscription, and its read in flight.
pub(super) struct SideLane {
    pub(super) inner: Arc<LaneConsumer>,
    pub(super) read: tokio::sync::Mutex<Reading>,
    /// Woken (`notify_one`) when that read ends, to wake the work read (shared by the
    /// side lanes of a consumer).
    pub(super) ended: Arc<Notify>,
}

impl SideLane {
    /// One step of a drain, `before` claims already in `out`: what a read in flight got,
    /// then what is left up to the stream's newest entry when the drain began (on a keyed
    /// lane, only while this consumer holds the lease). Returns the claims added, and
    /// whether the lane is drained.
    pub(super) async fn drain(
        &self,
        max: usize,
        before: usize,
        out: &mut Vec<Claimed>,
    ) -> Result<(usize, bool), RedisError> {
        let mut n = self
            .collect((max, max.saturating_sub(before)), out, (true, false))
            .await?;
        let mut done = self.read.lock().await.stash.is_empty();
        if before + n < max {
            let room = max - before - n;
            let (got, drained) = match &self.inner.lease {
                Some(lease) => keyed::drain_step(&self.inner, lease, room, out).await?,
                None => {
                    let mut r = self.inner.reader.lock().await;
                    self.inner.drain_step(&mut r, room, out).await?
                }
            };
            n += got;
            done &= drained;
        } else {
            done = false;
        }
        Ok((n, done))
    }

    /// Moves up to `room` claims of reads that ended to `out` (waiting for one in flight
    /// if `wait`), keeping the rest for the next claim, and, if `start` and nothing is kept
    /// or in flight, starts the next read. Returns how many claims it added to `out`.
    pub(super) async fn collect(
        &self,
        (max, room): (usize, usize),
        out: &mut Vec<Claimed>,
        (wait, start): (bool, bool),
    ) -> Result<usize, RedisError> {
        let mut reading = self.read.lock().await;
        let ended = reading
            .task
            .as_ref()
            .is_some_and(|h| wait || h.is_finished());
        if ended {
            if let Some(h) = reading.task.take() {
                match h.await {
                    Ok(Ok(claims)) => reading.stash.extend(claims),
                    Ok(Err(e)) => return Err(e),
                    Err(e) => {
                        tracing::warn!(target: "event_base::redis", topic = %self.inner.q.topic, lane = ?self.inner.q.lane, error = %e, "a side lane's read task ended abnormally; what it claimed stays pending (for this node's sweep, or the keyed lease's next taking)");
                    }
                }
            }
        }
        let n = reading.stash.len().min(room);
        out.extend(reading.stash.drain(..n));
        if start && reading.task.is_none() && reading.stash.is_empty() {
            let inner = self.inner.clone();
            let ended = self.ended.clone();
            reading.task = Some(tokio::spawn(async move {
                let r = async {
                    if let Some(lease) = &inner.lease {
                        return keyed::read(&inner, lease, max).await;
                    }
                    let mut reader = inner.reader.lock().await;
                    let sent = Instant::now();
                    let entries = inner
                        .read(&mut reader, max, Some(inner.q.block), None)
                        .await?;
                    let mut out = Vec::new();
                    inner.accept(entries, &mut out, sent).await;
                    Ok(out)
                }
                .await;
                ended.notify_one();
                r
            }));
        }
        Ok(n)
    }
}
