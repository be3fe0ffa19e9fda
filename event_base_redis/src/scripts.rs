//! The Lua scripts: each state change of an entry is one script, so it happens whole or not
//! at all. Every script touches the keys of one topic only (one hash tag, one Cluster slot),
//! all named in `KEYS`.
//!
//! Owner checks: `XACK` takes no consumer name, so any consumer could settle an entry that
//! another one has since taken over (a paused "zombie" waking up). Every script that settles
//! or extends entries first checks, with `XPENDING`, that the calling consumer still owns
//! each one, and skips (counts as fenced) those it does not. A batch is checked with one
//! `XPENDING <first> <last> <n> <consumer>` (the consumer's own entries between the batch's
//! first and last id), paged only if the consumer holds more than `n` there; then one
//! variadic `XACK` and `XDEL` settle what it owns.
//!
//! Sends are a plain `XADD` (no script): the process counts its own sends towards `bound`
//! and hears the stream's length from the ack replies and an `XLEN` every
//! [`LEN_EVERY`](crate::queue::LEN_EVERY) sends.

use std::sync::LazyLock;

use redis::aio::MultiplexedConnection;
use redis::Cmd;

/// A script: its source, and its SHA1 for `EVALSHA`.
#[derive(Debug)]
pub(crate) struct Script {
    src: String,
    hash: String,
}

impl Script {
    fn new(src: &str) -> Script {
        Script {
            src: src.to_owned(),
            hash: redis::Script::new(src).get_hash().to_owned(),
        }
    }
}

/// The server's clock in milliseconds, as a Lua local `now`.
const NOW: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
";

/// `KEYS[1]` delayed set, `KEYS[2]` delayed fields, `KEYS[3]` stream; `ARGV` delay (ms),
/// message id, m, p, the stream it goes to when due (0 work, 1 broadcast, 2 keyed), and for
/// a message addressed to a worker of one node that node's id (kept as `<id>:a`, for the
/// janitor should the node be evicted before it is due: `orphans.rs`). Keeps a message until
/// the server's clock passes now + delay (a broadcast one is then moved to the
/// subscription's broadcast stream, a keyed one to its keyed stream, where it takes its
/// place in its key's order); returns the length of `KEYS[3]`.
pub(crate) static SCHEDULE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2] .. ':m', ARGV[3], ARGV[2] .. ':p', ARGV[4])
if ARGV[5] == '1' then redis.call('HSET', KEYS[2], ARGV[2] .. ':b', '1') end
if ARGV[5] == '2' then redis.call('HSET', KEYS[2], ARGV[2] .. ':k', '1') end
if ARGV[6] then redis.call('HSET', KEYS[2], ARGV[2] .. ':a', ARGV[6]) end
return redis.call('XLEN', KEYS[3])
"
    ))
});

/// `KEYS[1]` delayed set, `KEYS[2]` delayed fields, `KEYS[3]` stream, `KEYS[4]` the
/// subscription's broadcast stream, `KEYS[5]` its keyed stream; `ARGV` limit, the broadcast
/// stream's cap. Moves up to `limit` messages that are due by the server's clock to the
/// stream (a broadcast one to the broadcast stream, a keyed one to the keyed stream), each
/// whole or not at all; any node may run it. Returns `{moved, wait}`: `wait` the
/// milliseconds until the next one is due (0: more are due now), -1 if none is left.
pub(crate) static PROMOTE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, id in ipairs(due) do
  local f = redis.call('HMGET', KEYS[2], id .. ':m', id .. ':p', id .. ':b', id .. ':k')
  if f[1] and f[2] then
    if f[3] == '1' then
      redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[2], '*', 'm', f[1], 'p', f[2])
    elseif f[4] == '1' then
      redis.call('XADD', KEYS[5], '*', 'm', f[1], 'p', f[2])
    else
      redis.call('XADD', KEYS[3], '*', 'm', f[1], 'p', f[2])
    end
  end
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id .. ':m', id .. ':p', id .. ':b', id .. ':k', id .. ':a')
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local wait = -1
if first[2] ~= nil then wait = math.max(0, tonumber(first[2]) - now) end
return {{#due, wait}}
"
    ))
});

/// `KEYS[1]` nodes (sorted set), `KEYS[2]` this node's hash, `KEYS[3]` janitor lease,
/// `KEYS[4]` this node's set of consumers; `ARGV` node id, ttl (ms), name, type, pid,
/// whether it may be the janitor (1/0), then the node's consumers. Records a beat (score and
/// hash, the hash expiring after the ttl, the consumers listed); takes or renews the janitor lease
/// if allowed and free or already held. Returns `{janitor, silent}`: 1 if this node holds
/// the lease, and then the nodes whose last beat is older than the ttl.
pub(crate) static BEAT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('HSET', KEYS[2], 'name', ARGV[3], 'type', ARGV[4], 'pid', ARGV[5], 'beat', now)
redis.call('PEXPIRE', KEYS[2], ttl)
for i = 7, #ARGV do redis.call('SADD', KEYS[4], ARGV[i]) end
local mine = 0
if ARGV[6] == '1' then
  local holder = redis.call('GET', KEYS[3])
  if not holder then
    redis.call('SET', KEYS[3], ARGV[1], 'PX', ttl)
    mine = 1
  elseif holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[3], ttl)
    mine = 1
  end
end
local silent = {{}}
if mine == 1 then
  silent = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - ttl, 'LIMIT', 0, 100)
end
return {{mine, silent}}
"
    ))
});

/// `KEYS[1]` nodes (sorted set), `KEYS[2]` a silent node's workers' list; `ARGV` its id,
/// the ttl (ms). Takes the list out (`GETDEL`) only while the node is still silent: returns
/// `{last beat, list}` (either `false` when absent), or `{}` when the node beat again since
/// the janitor found it silent (it was only paused: its list stays).
pub(crate) static TAKE_WORKERS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) > now - tonumber(ARGV[2]) then return {{}} end
return {{score, redis.call('GETDEL', KEYS[2])}}
"
    ))
});

/// `KEYS[1]` nodes (sorted set), `KEYS[2]` a silent node's set of consumers, `KEYS[3]` its
/// hash, `KEYS[4]` its workers' list; `ARGV` its id, the ttl (ms). Forgets the node (deletes
/// the three keys and its score) only while it is still silent; returns 1 if it did, 0 when
/// the node beat again meanwhile.
pub(crate) static FORGET: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) > now - tonumber(ARGV[2]) then return 0 end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
"
    ))
});

/// `KEYS[1]` a subscription's broadcast stream; `ARGV` the group of a silent node, at most
/// how many of each kind. Returns the entries that group still held (pending) or had not
/// read yet, `[[id, fields], ...]`: before the group is destroyed, the janitor dead-letters
/// those addressed to a worker of that node (`orphans.rs`). A missing stream or group:
/// none.
pub(crate) static ORPHANS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
if type(groups) ~= 'table' or groups.err then return {} end
local last = nil
for _, g in ipairs(groups) do
  local info = {}
  for i = 1, #g - 1, 2 do info[g[i]] = g[i + 1] end
  if info['name'] == ARGV[1] then last = info['last-delivered-id'] end
end
if not last then return {} end
local out = {}
for _, p in ipairs(redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', ARGV[2])) do
  local e = redis.call('XRANGE', KEYS[1], p[1], p[1])
  if e[1] then out[#out + 1] = e[1] end
end
for _, e in ipairs(redis.call('XRANGE', KEYS[1], '(' .. last, '+', 'COUNT', ARGV[2])) do
  out[#out + 1] = e
end
return out
",
    )
});

/// `KEYS[1]` stream; `ARGV` group, consumer (of a silent node), whether the group is the
/// node's own (1/0). The node's own group (on a broadcast stream) is destroyed, with what
/// it still held: nobody else reads it, and what the node did not finish of its broadcasts
/// died with it. Else, if the consumer holds no entries, deletes it and returns 1; else
/// makes its entries claimable at once (idle for long, no delivery counted, owner
/// unchanged) and returns 0. A missing stream or group is nothing to delete (1).
pub(crate) static EVICT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if ARGV[3] == '1' then
  redis.pcall('XGROUP', 'DESTROY', KEYS[1], ARGV[1])
  return 1
end
local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], '-', '+', 100, ARGV[2])
if type(p) == 'table' and p.err then return 1 end
if #p == 0 then
  redis.pcall('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
for _, e in ipairs(p) do
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, e[1], 'IDLE', 86400000000, 'JUSTID')
end
return 0
",
    )
});

/// `KEYS[1]` a topic's handler registry; `ARGV` handler. Records that a node runs the
/// handler now (server time).
pub(crate) static REGISTER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}
redis.call('ZADD', KEYS[1], now, ARGV[1])
return now
"
    ))
});

/// `KEYS[1]` a topic's handler registry; `ARGV` max age (ms). The handlers some node ran
/// within the max age (server time).
pub(crate) static HANDLERS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}
return redis.call('ZRANGEBYSCORE', KEYS[1], now - tonumber(ARGV[1]), '+inf')
"
    ))
});

/// `KEYS[1]` a subscription's stream, `KEYS[2]` its broadcast stream, `KEYS[3]` its delayed
/// set, `KEYS[4]` its keyed stream. What the subscription's queues hold, in every node:
/// `{queued, delayed}`. `queued`: the entries of the stream and of the keyed stream (acked
/// ones are deleted, so each is unclaimed or claimed and unsettled), plus, for each group on the broadcast stream (one per node), its pending
/// entries and those it has not read (`lag`; when Redis cannot tell it, after deletions,
/// the entries past the group's last read, up to 100). `delayed`: the delayed set's size.
/// One script, so a message the delayed set hands to a stream meanwhile is not missed.
/// Run with `EVAL` (rarely: `wait_idle`), not kept in the script cache.
pub(crate) static OUTSTANDING: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local queued = redis.call('XLEN', KEYS[1]) + redis.call('XLEN', KEYS[4])
if redis.call('EXISTS', KEYS[2]) == 1 then
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[2])) do
    local f = {}
    for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
    queued = queued + f['pending']
    if type(f['lag']) == 'number' then
      queued = queued + f['lag']
    else
      local rest = redis.call('XRANGE', KEYS[2], '(' .. f['last-delivered-id'], '+', 'COUNT', 100)
      queued = queued + #rest
    end
  end
end
return {queued, redis.call('ZCARD', KEYS[3])}
",
    )
});

/// `KEYS[1]` dead-letter stream; `ARGV` max age (ms). Deletes the entries older than the max
/// age by the server's clock (entry ids are the server's time when added); returns how many.
pub(crate) static TRIM_AGE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}
local minid = now - tonumber(ARGV[1])
if minid <= 0 then return 0 end
return redis.call('XTRIM', KEYS[1], 'MINID', '=', minid)
"
    ))
});

/// `KEYS[1]` broadcast stream; `ARGV` m, p, max length, and optionally a group to make
/// sure of first (this node's, created at the stream's end if missing, so this node's
/// consumer reads the entry even if it has not claimed yet). Trims what every group is done
/// with, adds the entry, capping the stream at about the max length; returns
/// `{id, length}`.
pub(crate) static ADD_BROADCAST: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{TRIM_READ}
if ARGV[4] then redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[4], '$', 'MKSTREAM') end
trim_read(KEYS[1])
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'm', ARGV[1], 'p', ARGV[2])
return {{id, redis.call('XLEN', KEYS[1])}}
"
    ))
});

/// `KEYS[1]` a subscription's broadcast stream; `ARGV` m, p, cap, the group of the node
/// addressed (`n:<node id>`), and optionally `check`. Adds a message addressed to a worker
/// of that node, if that node reads the stream (its group exists: it runs the handler and
/// was not evicted), as [`ADD_BROADCAST`] adds (trimmed, capped); the other nodes' groups
/// read it and ack it unread. Returns `{id, length}`, or 0 when that node has no group on
/// the stream. With `check`, only looks (1 or 0): for a message due later, checked at send.
pub(crate) static ADD_ADDRESSED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{TRIM_READ}
local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
local found = false
if type(groups) == 'table' and not groups.err then
  for _, g in ipairs(groups) do
    for i = 1, #g - 1, 2 do
      if g[i] == 'name' and g[i + 1] == ARGV[4] then found = true end
    end
  end
end
if not found then return 0 end
if ARGV[5] then return 1 end
trim_read(KEYS[1])
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'm', ARGV[1], 'p', ARGV[2])
return {{id, redis.call('XLEN', KEYS[1])}}
"
    ))
});

/// Trimming a broadcast stream to what every group is done with, as a Lua function: for
/// each group, its oldest pending entry, or (none pending) the last one it read; entries
/// older than the oldest of those are deleted (`XTRIM MINID`). No group at all: every entry
/// is deleted (a group is created at the stream's end, so no node will read them). A missing
/// stream: nothing to do.
const TRIM_READ: &str = r"
local function id_before(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end
local function trim_read(key)
  local groups = redis.pcall('XINFO', 'GROUPS', key)
  if type(groups) ~= 'table' or groups.err then return end
  if #groups == 0 then
    redis.call('XTRIM', key, 'MAXLEN', 0)
    return
  end
  local low = nil
  for _, g in ipairs(groups) do
    local info = {}
    for i = 1, #g - 1, 2 do info[g[i]] = g[i + 1] end
    local mark = info['last-delivered-id']
    if tonumber(info['pending']) > 0 then
      local p = redis.call('XPENDING', key, info['name'])
      if p[2] then mark = p[2] end
    end
    if mark and (low == nil or id_before(mark, low)) then low = mark end
  end
  if low and low ~= '0-0' then redis.call('XTRIM', key, 'MINID', low) end
end
";

/// The owner check of one entry, as a Lua function.
const OWNS: &str = r"
local function owns(key, group, consumer, id)
  local p = redis.call('XPENDING', key, group, id, id, 1)
  return p[1] ~= nil and p[1][2] == consumer
end
";

/// The owner check of a batch, as a Lua function: `ARGV[3]` and `ARGV[4]` the batch's first
/// and last id, its ids from `ARGV[5]`. Returns the ids the consumer owns, and how many it
/// does not. One `XPENDING` of the consumer's entries in that range, paged (from just past
/// the last one seen) only while a page comes back full.
const OWNED: &str = r"
local function owned(key, group, consumer)
  local want = {}
  local n = 0
  for i = 5, #ARGV do
    if not want[ARGV[i]] then want[ARGV[i]] = true; n = n + 1 end
  end
  local page = math.max(n, 16)
  local mine, start, found = {}, ARGV[3], 0
  while found < n do
    local p = redis.call('XPENDING', key, group, start, ARGV[4], page, consumer)
    for _, e in ipairs(p) do
      if want[e[1]] then want[e[1]] = nil; mine[#mine + 1] = e[1]; found = found + 1 end
    end
    if #p < page then break end
    start = '(' .. p[#p][1]
  end
  return mine, n - found
end
";

/// `KEYS[1]` stream; `ARGV` group, consumer, first id, last id, ids... Acks and deletes the
/// entries the consumer still owns; returns `{acked, fenced, length}`.
pub(crate) static ACK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{OWNED}
local mine, fenced = owned(KEYS[1], ARGV[1], ARGV[2])
if #mine > 0 then
  redis.call('XACK', KEYS[1], ARGV[1], unpack(mine))
  redis.call('XDEL', KEYS[1], unpack(mine))
end
return {{#mine, fenced, redis.call('XLEN', KEYS[1])}}
"
    ))
});

/// `KEYS[1]` broadcast stream; `ARGV` group, consumer, first id, last id, ids... Acks (no
/// delete: other nodes' groups may not have read them) the entries the consumer still owns,
/// then trims the entries every group is done with; returns `{acked, fenced, length}`.
pub(crate) static ACK_ONLY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{OWNED}{TRIM_READ}
local mine, fenced = owned(KEYS[1], ARGV[1], ARGV[2])
if #mine > 0 then
  redis.call('XACK', KEYS[1], ARGV[1], unpack(mine))
  trim_read(KEYS[1])
end
return {{#mine, fenced, redis.call('XLEN', KEYS[1])}}
"
    ))
});

/// `KEYS[1]` stream; `ARGV` group, consumer, first id, last id, ids... Gives entries back at
/// once: a copy goes to the end of the stream (a new entry any consumer reads next), the
/// original is acked and deleted. Returns `{requeued, fenced, length}`.
pub(crate) static REQUEUE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{OWNED}
local mine, fenced = owned(KEYS[1], ARGV[1], ARGV[2])
local requeued = 0
for _, id in ipairs(mine) do
  local e = redis.call('XRANGE', KEYS[1], id, id)
  if e[1] ~= nil then
    redis.call('XADD', KEYS[1], '*', unpack(e[1][2]))
    requeued = requeued + 1
  end
end
if #mine > 0 then
  redis.call('XACK', KEYS[1], ARGV[1], unpack(mine))
  redis.call('XDEL', KEYS[1], unpack(mine))
end
return {{requeued, fenced, redis.call('XLEN', KEYS[1])}}
"
    ))
});

/// `KEYS[1]` stream; `ARGV` group, consumer, first id, last id, ids... Renews the lease
/// (resets the idle time, without counting a delivery) of each entry the consumer still
/// owns; returns the ids it no longer owns (taken over by another consumer, or gone).
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{OWNED}
local mine = owned(KEYS[1], ARGV[1], ARGV[2])
local kept = {{}}
for _, id in ipairs(mine) do kept[id] = true end
if #mine > 0 then
  local args = {{KEYS[1], ARGV[1], ARGV[2], 0}}
  for _, id in ipairs(mine) do args[#args + 1] = id end
  args[#args + 1] = 'JUSTID'
  redis.call('XCLAIM', unpack(args))
end
local lost = {{}}
for i = 5, #ARGV do
  if not kept[ARGV[i]] then lost[#lost + 1] = ARGV[i] end
end
return lost
"
    ))
});

/// `KEYS[1]` stream; `ARGV` group, consumer, min idle (ms), cursor, count. Takes over
/// entries idle past the min idle time (`XAUTOCLAIM`) and reads each one's delivery count
/// (`XPENDING`, which now counts this takeover too) in the same script. Returns
/// `{next cursor, entries, counts}`, `counts[i]` the count of `entries[i]`.
pub(crate) static RECLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5])
local counts = {}
for i, e in ipairs(r[2]) do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], e[1], e[1], 1)
  if p[1] ~= nil then counts[i] = p[1][4] else counts[i] = 0 end
end
return {r[1], r[2], counts}
",
    )
});

/// `KEYS[1]` stream, `KEYS[2]` dead-letter stream; `ARGV` group, consumer, id, dead letter
/// (the `d` field), max length, whether to delete the entry (1/0: 0 on a broadcast stream,
/// whose other groups may still read it). Dead-letters an entry the consumer owns: the dead
/// letter is added and the entry acked (and deleted), at once. Returns 1, or 0 if the
/// consumer no longer owns it (fenced: its new owner decides).
pub(crate) static DEAD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{OWNS}
if not owns(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*', 'd', ARGV[4])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
if ARGV[6] ~= '0' then redis.call('XDEL', KEYS[1], ARGV[3]) end
return 1
"
    ))
});

/// `KEYS[1]` stream, `KEYS[2]` delayed set, `KEYS[3]` delayed fields; `ARGV` group,
/// consumer, entry id, delay (ms), delayed member (`<message id>#<attempts>`), m, p (the next
/// attempt: `attempts` counted, `deliver_at` set). A retry kept in Redis: if the consumer
/// still owns the entry, acks and deletes it and adds the next attempt to the
/// subscription's delayed set, due at the server's now + delay (then `PROMOTE` moves it to
/// this subscription's stream, for any of its consumers), at once. Returns
/// `{kept, length}`: kept 1, or 0 if the consumer no longer owns the entry (fenced: its new
/// owner decides, nothing changed).
pub(crate) static RETRY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}{OWNS}
if not owns(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then
  return {{0, redis.call('XLEN', KEYS[1])}}
end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), ARGV[5])
redis.call('HSET', KEYS[3], ARGV[5] .. ':m', ARGV[6], ARGV[5] .. ':p', ARGV[7])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
return {{1, redis.call('XLEN', KEYS[1])}}
"
    ))
});

/// `KEYS[1]` stream, `KEYS[2]` poison stream; `ARGV` group, id, reason, max length. Moves an
/// entry that does not decode aside, with its fields, the source id and the reason.
pub(crate) static POISON: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
local fields = {'src', ARGV[2], 'reason', ARGV[3]}
if e[1] ~= nil then
  for _, v in ipairs(e[1][2]) do fields[#fields + 1] = v end
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', unpack(fields))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
",
    )
});

/// `KEYS[1]` dead-letter stream; `ARGV` message id. Deletes the dead letters of that message
/// (it is being sent again); returns how many.
pub(crate) static UNDEAD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local n = 0
for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
  local f = e[2]
  for i = 1, #f - 1, 2 do
    if f[i] == 'd' then
      local ok, d = pcall(cjson.decode, f[i + 1])
      if ok and type(d) == 'table' and type(d.message) == 'table' and d.message.id == ARGV[1] then
        redis.call('XDEL', KEYS[1], e[1])
        n = n + 1
      end
    end
  end
end
return n
",
    )
});

/// `KEYS[1]` a subscription's keyed lease; `ARGV` the value to hold it with (the fencing
/// token, `<consumer>#<n>`, new at each taking), its time to live (ms). Takes the lease if
/// nobody holds it: returns `{1}`; else `{0, ttl left (ms)}`.
pub(crate) static TAKE_LEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1} end
return {0, redis.call('PTTL', KEYS[1])}
",
    )
});

/// `KEYS[1]` a subscription's keyed lease; `ARGV` the value it was taken with, its time to
/// live (ms). Renews the lease if it is still held with that value (it never expired since:
/// a lapse and a new taking would hold another value); returns 1, or 0 if it is lost.
pub(crate) static RENEW_LEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
",
    )
});

/// `KEYS[1]` a subscription's keyed lease; `ARGV` the value it was taken with. Gives the
/// lease up (deletes it) if it is still held with that value; returns 1 if it did.
pub(crate) static DROP_LEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
",
    )
});

/// `KEYS[1]` a subscription's keyed lease, `KEYS[2]` its keyed stream; `ARGV` the lease's
/// value, group, consumer, count. The keyed stream's read, fenced by the lease: only while
/// the lease is held with that value, `XREADGROUP … COUNT n STREAMS <keyed> >` (never
/// blocking: a read sent before the lease lapsed cannot deliver after another consumer
/// took it). Returns `{0}` when the lease is not held so, `{1, entries}`, or `{2, id}` when
/// nothing was new: `id` the stream's last generated id, after which a blocking `XREAD`
/// (which claims nothing) waits for the next entry.
pub(crate) static READ_KEYED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0} end
local r = redis.call('XREADGROUP', 'GROUP', ARGV[2], ARGV[3], 'COUNT', ARGV[4], 'STREAMS', KEYS[2], '>')
if r and r[1] and #r[1][2] > 0 then return {1, r[1][2]} end
local info = redis.pcall('XINFO', 'STREAM', KEYS[2])
local last = '0-0'
if type(info) == 'table' and not info.err then
  for i = 1, #info - 1, 2 do
    if info[i] == 'last-generated-id' then last = info[i + 1] end
  end
end
return {2, last}
",
    )
});

/// `KEYS[1]` a subscription's keyed lease, `KEYS[2]` its keyed stream; `ARGV` the lease's
/// value, group, consumer, then entry ids (pending, in id order). A new lease holder's
/// takeover, fenced by the lease: only while it is held with that value, claims each entry
/// (`XCLAIM … 0`, whoever holds it) and reads its delivery count. Returns `{0}` when the
/// lease is not held so, else `{1, entries, counts}` (an entry deleted meanwhile is left
/// out).
pub(crate) static TAKE_KEYED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0} end
local entries, counts = {}, {}
for i = 4, #ARGV do
  local e = redis.call('XCLAIM', KEYS[2], ARGV[2], ARGV[3], 0, ARGV[i])
  if e[1] then
    entries[#entries + 1] = e[1]
    local p = redis.call('XPENDING', KEYS[2], ARGV[2], ARGV[i], ARGV[i], 1)
    if p[1] ~= nil then counts[#counts + 1] = p[1][4] else counts[#counts + 1] = 0 end
  end
end
return {1, entries, counts}
",
    )
});

/// Every script, loaded on each new writer connection.
fn all() -> [&'static Script; 28] {
    [
        &*TAKE_LEASE,
        &*RENEW_LEASE,
        &*DROP_LEASE,
        &*READ_KEYED,
        &*TAKE_KEYED,
        &*RETRY,
        &*ADD_BROADCAST,
        &*ADD_ADDRESSED,
        &*ORPHANS,
        &*SCHEDULE,
        &*PROMOTE,
        &*ACK,
        &*ACK_ONLY,
        &*REQUEUE,
        &*EXTEND,
        &*RECLAIM,
        &*DEAD,
        &*POISON,
        &*UNDEAD,
        &*BEAT,
        &*TAKE_WORKERS,
        &*FORGET,
        &*EVICT,
        &*REGISTER,
        &*HANDLERS,
        &*TRIM_AGE,
        &*RATE,
        &*UNSCHEDULE,
    ]
}

/// `KEYS[1]` a subscription's delayed set, `KEYS[2]` its delayed fields; `ARGV[1]` a message
/// id. Takes the message back if it still waits (`PROMOTE` has not released it): removes it
/// and its fields, returns 1; else 0.
pub(crate) static UNSCHEDULE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
local id = ARGV[1]
redis.call('HDEL', KEYS[2], id .. ':m', id .. ':p', id .. ':b', id .. ':k', id .. ':a')
return 1
",
    )
});

/// `KEYS[1]` a handler's rate key; `ARGV[1]` its interval in microseconds. The generic cell
/// rate algorithm with no burst, on the server's clock, for every node running the
/// handler: the key holds the next free slot (microseconds since the epoch, exact in a Lua
/// number); a caller takes the later of it and now, pushes it one interval on, and waits
/// until its slot. Returns that wait in microseconds. The key expires a second after its
/// last slot, so an idle handler leaves nothing behind.
pub(crate) static RATE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local slot = math.max(tat, now)
local next = slot + tonumber(ARGV[1])
redis.call('SET', KEYS[1], string.format('%.0f', next), 'PX', math.ceil((next - now) / 1000) + 1000)
return slot - now
",
    )
});

/// Loads every script into the server's script cache.
pub(crate) async fn load_all(conn: &mut MultiplexedConnection) -> Result<(), redis::RedisError> {
    let mut pipe = redis::pipe();
    for s in all() {
        pipe.cmd("SCRIPT").arg("LOAD").arg(&s.src);
    }
    pipe.query_async::<Vec<String>>(conn).await.map(|_| ())
}

/// `EVAL` of `script` with `keys` (for a script run too rarely to keep in the cache).
pub(crate) fn eval(script: &Script, keys: &[&str]) -> Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(&script.src).arg(keys.len()).arg(keys);
    cmd
}

/// `EVALSHA` of `script` with `keys` and `args`.
pub(crate) fn evalsha<A: redis::ToRedisArgs>(script: &Script, keys: &[&str], args: A) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(&script.hash).arg(keys.len()).arg(keys).arg(args);
    cmd
}
