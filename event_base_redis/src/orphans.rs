//! Messages addressed to a worker of a node (`to_worker: "<node id>/<worker>"`) that the
//! node never finished: when the janitor evicts a silent node, before it destroys the
//! node's group on a subscription's broadcast stream (with what it held), it dead-letters
//! each entry addressed to that node which the group still held or had not read, with the
//! reason. No other node would handle them (they ack such entries unread), so without this
//! they would be dropped with the group. So are those still waiting in the subscription's
//! delayed set (marked `<id>:a` with their node by `SCHEDULE`): once due, no group would
//! read them.
//!
//! Not atomic with the group's destruction: a janitor that dies in between leaves the group
//! to the next janitor, which dead-letters the same entries again (at least once).

use std::time::SystemTime;

use event_base_core::{DeadLetterMessage, DeadReason};

use crate::codec;
use crate::error::RedisError;
use crate::keys::{Keys, DLQ_MAX_LEN};
use crate::link::Link;
use crate::reply;
use crate::scripts;
use event_base_core::backend::node_and_worker;

/// Entries of each kind (held, unread) read at most per eviction of one group.
const MAX_ORPHANS: usize = 10_000;

/// `(topic, handler)` of a subscription's broadcast stream `<prefix>:{<topic>}:b:<handler>`.
fn subscription_of<'k>(keys: &Keys, stream: &'k str) -> Option<(&'k str, &'k str)> {
    let rest = stream.strip_prefix(keys.prefix())?.strip_prefix(":{")?;
    rest.split_once("}:b:")
}

/// Dead-letters what the group `n:<dead>` on `stream` held or had not read of the
/// messages addressed to node `dead` (see the module docs). Returns how many. Any stream
/// that is not a subscription's broadcast stream has none.
pub(crate) async fn dead_letter_orphans(
    link: &Link,
    keys: &Keys,
    stream: &str,
    dead: &str,
) -> Result<usize, RedisError> {
    let Some((topic, handler)) = subscription_of(keys, stream) else {
        return Ok(0);
    };
    let group = format!("n:{dead}");
    let cmd = scripts::evalsha(&scripts::ORPHANS, &[stream], (&group, MAX_ORPHANS));
    let v = link.run("ORPHANS", cmd).await?;
    let mut entries = reply::entries("ORPHANS", &v)?;
    entries.extend(delayed_for(link, keys, topic, handler, dead).await?);
    let mut n = 0;
    for (id, fields) in entries {
        let Some(fields) = fields else { continue };
        // An entry that does not decode is no message of event_base: it stays, as on any
        // broadcast stream, for the groups that read it to move aside.
        let Ok(message) = codec::decode_message(&fields) else {
            continue;
        };
        let Some(worker) = message.to_worker.clone() else {
            continue;
        };
        if node_and_worker(&worker).map(|(node, _)| node) != Some(dead) {
            continue;
        }
        let reason = DeadReason::Other(format!(
            "addressed to `{worker}`, but node `{dead}` was evicted (silent for three \
             heartbeats) before it handled it; send it again with to_worker naming a node \
             that runs `{handler}` now (its node id), or no node"
        ));
        let dead_letter = DeadLetterMessage {
            attempts: message.attempts,
            message,
            reason,
            died_at: SystemTime::now(),
            handlers: vec![handler.to_owned()],
        };
        let mut sadd = redis::cmd("SADD");
        sadd.arg(keys.topics()).arg(topic);
        link.run("SADD", sadd).await?;
        let mut xadd = redis::cmd("XADD");
        xadd.arg(keys.dlq(topic))
            .arg("MAXLEN")
            .arg("~")
            .arg(DLQ_MAX_LEN)
            .arg("*")
            .arg(codec::DEAD)
            .arg(codec::dead_field(&dead_letter));
        link.run("XADD", xadd).await?;
        n += 1;
        tracing::error!(target: "event_base::redis", node = %dead, %topic, %handler, entry = %id, %worker, "message dead-lettered: addressed to a worker of a node evicted before it handled it");
    }
    Ok(n)
}

/// Takes out of the subscription's delayed set the messages addressed to node `dead`,
/// as entries (`<delayed id>`, fields `m`, `p`). Each is taken only if this call removed it
/// from the set (a consumer may be moving it to the stream at the same time: then the
/// stream's scan has it, or it is gone).
async fn delayed_for(
    link: &Link,
    keys: &Keys,
    topic: &str,
    handler: &str,
    dead: &str,
) -> Result<Vec<reply::RawEntry>, RedisError> {
    let (set, fields) = (
        keys.delayed(topic, handler),
        keys.delayed_fields(topic, handler),
    );
    let mut ids = Vec::new();
    let mut cursor = "0".to_owned();
    loop {
        let mut hscan = redis::cmd("HSCAN");
        hscan
            .arg(&fields)
            .arg(&cursor)
            .arg("MATCH")
            .arg("*:a")
            .arg("COUNT")
            .arg(500);
        let v = link.run("HSCAN", hscan).await?;
        let [next, found] = reply::array("HSCAN", &v)? else {
            break;
        };
        for kv in reply::array("HSCAN", found)?.chunks_exact(2) {
            let (field, node) = (
                reply::string("HSCAN", &kv[0])?,
                reply::string("HSCAN", &kv[1])?,
            );
            if node == dead {
                if let Some(id) = field.strip_suffix(":a") {
                    ids.push(id.to_owned());
                }
            }
        }
        cursor = reply::string("HSCAN", next)?;
        if cursor == "0" || ids.len() >= MAX_ORPHANS {
            break;
        }
    }
    let mut out = Vec::new();
    for id in ids {
        let mut zrem = redis::cmd("ZREM");
        zrem.arg(&set).arg(&id);
        if reply::int("ZREM", &link.run("ZREM", zrem).await?)? != 1 {
            continue;
        }
        let names = [format!("{id}:m"), format!("{id}:p")];
        let mut hmget = redis::cmd("HMGET");
        hmget.arg(&fields).arg(&names);
        let v = link.run("HMGET", hmget).await?;
        let got = reply::array("HMGET", &v)?;
        let mut hdel = redis::cmd("HDEL");
        hdel.arg(&fields)
            .arg(&names)
            .arg(format!("{id}:b"))
            .arg(format!("{id}:a"));
        link.run("HDEL", hdel).await?;
        if let [m, p] = got {
            if !matches!(m, redis::Value::Nil) && !matches!(p, redis::Value::Nil) {
                out.push((
                    format!("delayed {id}"),
                    Some(vec![(b"m".to_vec(), m.clone()), (b"p".to_vec(), p.clone())]),
                ));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_subscriptions_broadcast_stream_names_a_subscription() {
        let k = Keys::new("eb");
        assert_eq!(
            subscription_of(&k, &k.sub_broadcast("orders", "ship")),
            Some(("orders", "ship"))
        );
        assert_eq!(
            subscription_of(&k, &k.broadcast("_system.shutdown", "h")),
            None
        );
        assert_eq!(subscription_of(&k, &k.stream("orders", "ship")), None);
    }
}
