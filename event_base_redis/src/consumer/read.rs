//! A lane's reads of new entries (`XREADGROUP`) on a connection of its own, woken early
//! when they must be (`CLIENT UNBLOCK`), and a closing subscription's drain.

use std::sync::Arc;
use std::time::Duration;

use event_base_core::backend::{Claimed, Receipt};
use redis::aio::MultiplexedConnection;
use redis::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::lane_consumer::{LaneConsumer, Reader};
use crate::codec;
use crate::error::RedisError;
use crate::reply::{self, RawEntry};

impl LaneConsumer {
    async fn reader_conn(
        &self,
        reader: &mut Reader,
    ) -> Result<(MultiplexedConnection, i64), RedisError> {
        if let Some(c) = &reader.conn {
            return Ok(c.clone());
        }
        let mut conn = self.q.link.dedicated(self.q.block).await?;
        let id: i64 = redis::cmd("CLIENT")
            .arg("ID")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.q.link.wire_error("CLIENT ID", e))?;
        reader.conn = Some((conn.clone(), id));
        Ok((conn, id))
    }

    /// One `XREADGROUP` of new entries, blocking up to `block` (`None`: not at all). Wakes
    /// early (`CLIENT UNBLOCK`) when the producer closes, a message is scheduled here for
    /// sooner, or `wake` is notified. Returns the entries read.
    pub(super) async fn read(
        &self,
        reader: &mut Reader,
        max: usize,
        block: Option<Duration>,
        wake: Option<&Notify>,
    ) -> Result<Vec<RawEntry>, RedisError> {
        self.ensure_group().await?;
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(&self.q.group)
            .arg(&self.name)
            .arg("COUNT")
            .arg(max.max(1));
        if let Some(b) = block {
            cmd.arg("BLOCK").arg(b.as_millis().max(1) as u64);
        }
        cmd.arg("STREAMS").arg(&self.q.key).arg(">");
        let v = self
            .blocking(reader, "XREADGROUP", cmd, block.is_some(), wake)
            .await?;
        reply::read_group(&v)
    }

    /// Runs `cmd` on the reader's own connection; if it `blocks`, wakes it early (`CLIENT
    /// UNBLOCK`) when the producer closes, a message is scheduled here for sooner, or
    /// `wake` is notified.
    pub(super) async fn blocking(
        &self,
        reader: &mut Reader,
        name: &'static str,
        cmd: redis::Cmd,
        blocks: bool,
        wake: Option<&Notify>,
    ) -> Result<Value, RedisError> {
        let (mut conn, client_id) = self.reader_conn(reader).await?;
        let read = async move { cmd.query_async::<Value>(&mut conn).await };
        tokio::pin!(read);
        let result = if blocks {
            let woken = tokio::select! {
                r = &mut read => Some(r),
                () = self.q.closed() => None,
                () = self.q.rearmed() => None,
                () = woken_by(wake) => None,
            };
            match woken {
                Some(r) => r,
                None => loop {
                    // Wake the blocked read; it then answers nil (or what it had just got).
                    // Repeated, in case the read had not reached the server yet.
                    let mut unblock = redis::cmd("CLIENT");
                    unblock.arg("UNBLOCK").arg(client_id);
                    let _ = self.q.link.run("CLIENT UNBLOCK", unblock).await;
                    if let Ok(r) = tokio::time::timeout(Duration::from_millis(200), &mut read).await
                    {
                        break r;
                    }
                },
            }
        } else {
            read.await
        };
        result.map_err(|e| {
            let e = self.q.link.wire_error(name, e);
            self.forget_group_on(&e);
            if !matches!(e, RedisError::Refused { .. }) {
                reader.conn = None;
            }
            e
        })
    }

    /// The newest entry of the stream when the drain began (read once, at the first claim
    /// after the producer closed); `None` if the stream was empty.
    pub(super) async fn drain_cutoff(&self) -> Result<Option<Receipt>, RedisError> {
        self.cutoff
            .get_or_try_init(|| async {
                let mut cmd = redis::cmd("XREVRANGE");
                cmd.arg(&self.q.key).arg("+").arg("-").arg("COUNT").arg(1);
                let v = self.q.link.run("XREVRANGE", cmd).await?;
                let newest = reply::entries("XREVRANGE", &v)?
                    .into_iter()
                    .next()
                    .and_then(|(id, _)| codec::receipt(&id));
                Ok(newest)
            })
            .await
            .copied()
    }

    /// One step of a drain: reads (without blocking) what is left up to the newest entry of
    /// the stream when the drain began. Returns the claims it added to `out`, and whether
    /// the lane is drained.
    pub(super) async fn drain_step(
        self: &Arc<Self>,
        reader: &mut Reader,
        max: usize,
        out: &mut Vec<Claimed>,
    ) -> Result<(usize, bool), RedisError> {
        use std::sync::atomic::Ordering;
        if self.drained.load(Ordering::Acquire) {
            return Ok((0, true));
        }
        let Some(cutoff) = self.drain_cutoff().await? else {
            self.drained.store(true, Ordering::Release);
            return Ok((0, true));
        };
        let sent = Instant::now();
        let entries = self.read(reader, max, None, None).await?;
        // Reads come in id order: one that reaches the cutoff has read all before it.
        let reached = entries.is_empty()
            || entries.iter().any(|(id, _)| {
                codec::receipt(id).is_none_or(|r| (r.hi, r.lo) >= (cutoff.hi, cutoff.lo))
            });
        if reached {
            self.drained.store(true, Ordering::Release);
        }
        Ok((self.accept(entries, out, sent).await, reached))
    }
}

/// Resolves when `wake` is notified; never without one.
async fn woken_by(wake: Option<&Notify>) {
    match wake {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}
