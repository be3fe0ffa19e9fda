//! The queues' statements, prepared once on each connection ([`Statements`]).
//!
//! A subscription's copies are the rows of `event_base_queue` whose `subscription` is
//! `<topic>` U+001F `<handler>`; a row is claimable when nobody holds it, it is due, and, if it
//! has an ordering key, no older row of its subscription has the same key (the oldest row of
//! a key is its head: the others wait for it to be acked or dead-lettered). Every change
//! that makes rows claimable notifies the channel [`CHANNEL`] with the subscription, which
//! the listener of each process turns into a wake-up of its consumers (`listener.rs`).
//!
//! A process's *lane* of a subscription (`<subscription>` U+001F `<process id>`) holds what
//! only that process claims: its copy of a broadcast, and messages addressed to one of its
//! workers. The processes consuming a subscription are listed in their records
//! (`event_base_nodes.subscriptions`); a broadcast puts a copy in the lane of each, and an
//! eviction deletes a silent process's record, then its lanes' rows.

use tokio_postgres::{Client, Statement};

use crate::error::PostgresError;

/// The channel of wake-ups: the payload is the subscription.
pub(crate) const CHANNEL: &str = "event_base";

/// The channel that says a subscription was created, so that routes are read again.
pub(crate) const ROUTES_CHANNEL: &str = "event_base_routes";

/// The columns a claim returns: `seq, message, payload, deliveries`.
const CLAIMED: &str = "q.seq, q.message, q.payload, q.deliveries";

/// Inserts copies (`$1` subscriptions, `$2` ids, `$3` keys, `$4` due times, `$5` messages,
/// `$6` payloads) and wakes each subscription that got one. (No unique index on the id: it
/// would cost a third of a send's time; see `writer.rs` for what that allows.)
const INSERT: &str = "WITH added AS (
        INSERT INTO event_base_queue (subscription, id, key, due_at, message, payload)
        SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::bytea[])
        RETURNING subscription)
    SELECT pg_notify('event_base', s) FROM (SELECT DISTINCT subscription AS s FROM added) w";

/// Claims for `$2` up to `$3` claimable rows of subscription `$1`, oldest first.
fn claim() -> String {
    format!(
        "UPDATE event_base_queue q SET claimed_by = $2, claimed_at = now(), deliveries = deliveries + 1
        WHERE q.seq IN (
            SELECT c.seq FROM event_base_queue c
            WHERE c.subscription = $1 AND c.claimed_by IS NULL AND c.due_at <= now()
              AND (c.key IS NULL OR NOT EXISTS (
                  SELECT 1 FROM event_base_queue h
                  WHERE h.subscription = c.subscription AND h.key = c.key AND h.seq < c.seq))
            ORDER BY c.seq LIMIT $3
            FOR UPDATE SKIP LOCKED)
        RETURNING {CLAIMED}"
    )
}

/// Takes over for `$2` up to `$3` rows of subscription `$1` held for at least `$4`
/// milliseconds without their lease being renewed (by any consumer, `$2` too).
fn take_over() -> String {
    format!(
        "UPDATE event_base_queue q SET claimed_by = $2, claimed_at = now(), deliveries = deliveries + 1
        WHERE q.seq IN (
            SELECT c.seq FROM event_base_queue c
            WHERE c.subscription = $1 AND c.claimed_by IS NOT NULL
              AND c.claimed_at <= now() - $4 * interval '1 millisecond'
            ORDER BY c.seq LIMIT $3
            FOR UPDATE SKIP LOCKED)
        RETURNING {CLAIMED}"
    )
}

/// Milliseconds until the next unclaimed row of the subscriptions (or lanes) `$1` falls due
/// (none: null).
const NEXT_DUE: &str = "SELECT (extract(epoch FROM min(due_at) - now()) * 1000)::float8
    FROM event_base_queue
    WHERE subscription = ANY($1::text[]) AND claimed_by IS NULL AND due_at > now()";

/// Puts a copy of a message (`$2` id, `$3` due, `$4` message, `$5` payload) in the lane of
/// subscription `$1` of every process that consumes it, or of process `$6` only when it is
/// not null, and wakes each lane; one row back per copy. With none to take it and `$7`, the
/// copy goes to the subscription itself instead (the next process to consume it takes it).
/// The processes' records are share-locked: an eviction, which deletes a record and then,
/// in another statement of its transaction, the rows of its lanes, either waits for this to
/// commit (and then deletes its copy) or is seen by it (and no copy is made).
const FAN_OUT: &str = "WITH readers AS (
        SELECT id FROM event_base_nodes
        WHERE $1 = ANY(subscriptions) AND ($6::text IS NULL OR id = $6)
        FOR SHARE),
    added AS (
        INSERT INTO event_base_queue (subscription, id, due_at, message, payload)
        SELECT coalesce($1 || chr(31) || r.id, $1), $2, $3, $4, $5 FROM (
            SELECT id FROM readers
            UNION ALL SELECT NULL WHERE $7 AND NOT EXISTS (SELECT 1 FROM readers)) r
        RETURNING subscription)
    SELECT pg_notify('event_base', subscription) FROM added";

/// Records that process `$1` (named `$2`, pid `$3`) consumes subscription `$4`: a copy of
/// each broadcast goes to its lane from now on. Makes the process's record if no bus
/// described it yet.
const ENLIST: &str = "INSERT INTO event_base_nodes (id, name, pid, last_seen, subscriptions)
    VALUES ($1, $2, $3, now(), ARRAY[$4::text])
    ON CONFLICT (id) DO UPDATE SET last_seen = now(), subscriptions =
        array(SELECT DISTINCT unnest(event_base_nodes.subscriptions || EXCLUDED.subscriptions))";

/// Deletes the records of the processes silent for `$1` milliseconds, returning `id, name,
/// workers, last_seen, subscriptions`.
const EVICT: &str = "DELETE FROM event_base_nodes
    WHERE last_seen <= now() - $1 * interval '1 millisecond'
    RETURNING id, name, workers, last_seen, subscriptions";

/// Deletes the rows of the lanes `$1` (an evicted process's), moving into the dead letters,
/// with reason `$2`, those addressed to one of its workers (a broadcast's copy is dropped:
/// the other processes had theirs). Returns how many were dead-lettered.
const ORPHANS: &str = "WITH gone AS (
        DELETE FROM event_base_queue WHERE subscription = ANY($1::text[])
        RETURNING id, subscription, message, payload),
    dead AS (
        INSERT INTO event_base_dead_letters (id, topic, message, payload, reason, handlers, died_at)
        SELECT id, split_part(subscription, chr(31), 1), message, payload, $2,
            ARRAY[split_part(subscription, chr(31), 2)], now()
        FROM gone WHERE (message::jsonb ->> 'to_worker') IS NOT NULL
        ON CONFLICT (id) DO UPDATE SET
            handlers = array(SELECT DISTINCT unnest(event_base_dead_letters.handlers || EXCLUDED.handlers)),
            reason = EXCLUDED.reason, died_at = EXCLUDED.died_at
        RETURNING 1)
    SELECT count(*) FROM dead";

/// What the subscriptions `$1` and every process's lanes of them still hold: rows due now
/// or claimed (being handled, or held by a process that died until its lease runs out), and
/// rows due later that nobody holds (delayed messages, retries waiting).
const OUTSTANDING: &str = "SELECT
        count(*) FILTER (WHERE q.due_at <= now() OR q.claimed_by IS NOT NULL),
        count(*) FILTER (WHERE q.due_at > now() AND q.claimed_by IS NULL)
    FROM event_base_queue q
    WHERE q.subscription IN (
        SELECT s FROM unnest($1::text[]) s
        UNION ALL
        SELECT s || chr(31) || n.id FROM unnest($1::text[]) s
        JOIN event_base_nodes n ON s = ANY(n.subscriptions))";

/// The processes that consume subscription `$2` whose id or name is `$1`: `id, name`.
const READERS: &str = "SELECT id, name FROM event_base_nodes
    WHERE (id = $1 OR name = $1) AND $2 = ANY(subscriptions) ORDER BY id";

/// The rows of subscription `$1`.
const COUNT: &str = "SELECT count(*) FROM event_base_queue WHERE subscription = $1";

/// Deletes the rows `$1` held by `$2` (acked), waking the subscriptions where that lets a
/// keyed row through.
const ACK: &str = "WITH done AS (
        DELETE FROM event_base_queue q USING unnest($1::bigint[], $2::text[]) AS a(seq, owner)
        WHERE q.seq = a.seq AND q.claimed_by = a.owner
        RETURNING q.subscription, q.key)
    SELECT pg_notify('event_base', s)
    FROM (SELECT DISTINCT subscription AS s FROM done WHERE key IS NOT NULL) w";

/// Gives the rows `$1` held by `$2` back, unclaimed, and wakes their subscriptions.
const RELEASE: &str = "WITH back AS (
        UPDATE event_base_queue q SET claimed_by = NULL, claimed_at = NULL
        FROM unnest($1::bigint[], $2::text[]) AS a(seq, owner)
        WHERE q.seq = a.seq AND q.claimed_by = a.owner
        RETURNING q.subscription)
    SELECT pg_notify('event_base', s) FROM (SELECT DISTINCT subscription AS s FROM back) w";

/// Renews the leases of the rows `$1` held by `$2`, skipping those locked now (being
/// settled by this process's writer, or freed by another's lease check): a renewal never
/// waits, so it is never late because a commit is slow.
const RENEW: &str = "UPDATE event_base_queue SET claimed_at = now()
    WHERE seq IN (
        SELECT seq FROM event_base_queue WHERE seq = ANY($1) AND claimed_by = $2
        FOR UPDATE SKIP LOCKED)";

/// The failed delivery of row `$1` held by `$2` becomes its next attempt (message `$3`,
/// payload `$4`), due in `$5` milliseconds, unclaimed, keeping its place (and its key's).
const RETRY: &str = "WITH again AS (
        UPDATE event_base_queue SET claimed_by = NULL, claimed_at = NULL, deliveries = 0,
            message = $3, payload = $4, due_at = now() + $5 * interval '1 millisecond'
        WHERE seq = $1 AND claimed_by = $2
        RETURNING subscription)
    SELECT pg_notify('event_base', subscription) FROM again";

/// Deletes the not yet due, unclaimed copies `$2` of subscription `$1` and of its lanes (a
/// cancel).
const CANCEL: &str = "DELETE FROM event_base_queue
    WHERE subscription IN (
            SELECT $1 UNION ALL
            SELECT $1 || chr(31) || id FROM event_base_nodes WHERE $1 = ANY(subscriptions))
        AND id = $2 AND claimed_by IS NULL AND due_at > now()";

/// Frees every claim whose lease ran out `$1` milliseconds ago, waking the subscriptions;
/// one row back: the subscriptions woken, and whether a process has been silent that long
/// (then it is evicted: [`EVICT`]).
const EXPIRE: &str = "WITH freed AS (
        UPDATE event_base_queue SET claimed_by = NULL, claimed_at = NULL
        WHERE claimed_by IS NOT NULL AND claimed_at <= now() - $1 * interval '1 millisecond'
        RETURNING subscription),
    woken AS (
        SELECT pg_notify('event_base', s) FROM (SELECT DISTINCT subscription AS s FROM freed) w)
    SELECT (SELECT count(*) FROM woken), EXISTS (
        SELECT 1 FROM event_base_nodes
        WHERE last_seen <= now() - $1 * interval '1 millisecond')";

/// Records a subscription (`$1`, topic `$2`, handler `$3`) and says so to every process.
const REGISTER: &str = "WITH up AS (
        INSERT INTO event_base_subscriptions (subscription, topic, handler, seen_at)
        VALUES ($1, $2, $3, now())
        ON CONFLICT (subscription) DO UPDATE SET seen_at = now()
        RETURNING topic)
    SELECT pg_notify('event_base_routes', topic) FROM up";

/// The handlers of topic `$1`.
const HANDLERS: &str =
    "SELECT handler FROM event_base_subscriptions WHERE topic = $1 ORDER BY handler";

/// Every subscription: `topic, handler`.
const ALL_SUBSCRIPTIONS: &str =
    "SELECT topic, handler FROM event_base_subscriptions ORDER BY topic, handler";

/// Moves row `$1` into the dead letters with reason `$2`, as handler `$3`'s copy (a
/// message that used up its deliveries), in one statement.
const BURY: &str = "WITH gone AS (
        DELETE FROM event_base_queue WHERE seq = $1 RETURNING id, subscription, message, payload)
    INSERT INTO event_base_dead_letters (id, topic, message, payload, reason, handlers, died_at)
    SELECT id, split_part(subscription, chr(31), 1), message, payload, $2, ARRAY[$3::text], now()
    FROM gone
    ON CONFLICT (id) DO UPDATE SET
        handlers = array(SELECT DISTINCT unnest(event_base_dead_letters.handlers || EXCLUDED.handlers)),
        reason = EXCLUDED.reason, died_at = EXCLUDED.died_at";

/// A dead letter: `$1` id, `$2` topic, `$3` message, `$4` payload, `$5` reason, `$6`
/// handlers; the handlers of an existing one are added to.
const DEAD: &str = "INSERT INTO event_base_dead_letters
        (id, topic, message, payload, reason, handlers, died_at)
    VALUES ($1, $2, $3, $4, $5, $6, now())
    ON CONFLICT (id) DO UPDATE SET
        handlers = array(SELECT DISTINCT unnest(event_base_dead_letters.handlers || EXCLUDED.handlers)),
        message = EXCLUDED.message, payload = EXCLUDED.payload,
        reason = EXCLUDED.reason, died_at = EXCLUDED.died_at";

/// Reserves the next start of rated handler `$1`, one interval of `$2` microseconds after
/// the last one reserved (or now, if that is past), on the server's clock: the generic cell
/// rate algorithm without burst, one row a handler, locked for the statement so every
/// process shares one pace. Returns the wait until the reserved start, in microseconds.
const RATE: &str = "WITH now AS (SELECT clock_timestamp() AS t),
    up AS (
        INSERT INTO event_base_rates (name, next_at)
        SELECT $1, t + $2 * interval '1 microsecond' FROM now
        ON CONFLICT (name) DO UPDATE SET next_at =
            greatest(event_base_rates.next_at, (SELECT t FROM now)) + $2 * interval '1 microsecond'
        RETURNING next_at)
    SELECT (extract(epoch FROM up.next_at - now.t) * 1000000 - $2)::float8 FROM up, now";

/// Records process `$1` (name `$2`, kind `$3` as JSON, pid `$4`) as seen now, with its
/// live workers `$5` (JSON) and the subscriptions it consumes `$6`, each if given.
const NODE: &str =
    "INSERT INTO event_base_nodes (id, name, kind, pid, last_seen, workers, subscriptions)
    VALUES ($1, $2, $3, $4, now(), coalesce($5, '[]'), coalesce($6::text[], '{}'))
    ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, kind = EXCLUDED.kind,
        pid = EXCLUDED.pid, last_seen = now(),
        workers = coalesce($5, event_base_nodes.workers),
        subscriptions = coalesce($6::text[], event_base_nodes.subscriptions)";

/// Process `$1` is alive: its last beat is now.
const BEAT: &str = "UPDATE event_base_nodes SET last_seen = now() WHERE id = $1";

/// The processes seen within `$1` milliseconds, by name.
const NODES: &str = "SELECT id, name, kind, pid, last_seen, workers FROM event_base_nodes
    WHERE last_seen > now() - $1 * interval '1 millisecond' ORDER BY name, id";

/// Deletes the dead letters `$1` (sent again).
const UNDEAD: &str = "DELETE FROM event_base_dead_letters WHERE id = ANY($1)";

/// The queues' statements, prepared on one connection.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) insert: Statement,
    pub(crate) claim: Statement,
    pub(crate) take_over: Statement,
    pub(crate) next_due: Statement,
    pub(crate) count: Statement,
    pub(crate) ack: Statement,
    pub(crate) release: Statement,
    pub(crate) renew: Statement,
    pub(crate) retry: Statement,
    pub(crate) cancel: Statement,
    pub(crate) expire: Statement,
    pub(crate) register: Statement,
    pub(crate) handlers: Statement,
    pub(crate) all_subscriptions: Statement,
    pub(crate) bury: Statement,
    pub(crate) dead: Statement,
    pub(crate) undead: Statement,
    pub(crate) rate: Statement,
    pub(crate) node: Statement,
    pub(crate) beat: Statement,
    pub(crate) nodes: Statement,
    pub(crate) fan_out: Statement,
    pub(crate) enlist: Statement,
    pub(crate) evict: Statement,
    pub(crate) orphans: Statement,
    pub(crate) readers: Statement,
    pub(crate) outstanding: Statement,
}

impl Statements {
    pub(crate) async fn prepare(client: &Client) -> Result<Statements, PostgresError> {
        let what = "the preparation of the queues' statements";
        let prepare = |sql: String| async move {
            client
                .prepare(&sql)
                .await
                .map_err(PostgresError::statement(what))
        };
        Ok(Statements {
            insert: prepare(INSERT.into()).await?,
            claim: prepare(claim()).await?,
            take_over: prepare(take_over()).await?,
            next_due: prepare(NEXT_DUE.into()).await?,
            count: prepare(COUNT.into()).await?,
            ack: prepare(ACK.into()).await?,
            release: prepare(RELEASE.into()).await?,
            renew: prepare(RENEW.into()).await?,
            retry: prepare(RETRY.into()).await?,
            cancel: prepare(CANCEL.into()).await?,
            expire: prepare(EXPIRE.into()).await?,
            register: prepare(REGISTER.into()).await?,
            handlers: prepare(HANDLERS.into()).await?,
            all_subscriptions: prepare(ALL_SUBSCRIPTIONS.into()).await?,
            bury: prepare(BURY.into()).await?,
            dead: prepare(DEAD.into()).await?,
            undead: prepare(UNDEAD.into()).await?,
            rate: prepare(RATE.into()).await?,
            node: prepare(NODE.into()).await?,
            beat: prepare(BEAT.into()).await?,
            nodes: prepare(NODES.into()).await?,
            fan_out: prepare(FAN_OUT.into()).await?,
            enlist: prepare(ENLIST.into()).await?,
            evict: prepare(EVICT.into()).await?,
            orphans: prepare(ORPHANS.into()).await?,
            readers: prepare(READERS.into()).await?,
            outstanding: prepare(OUTSTANDING.into()).await?,
        })
    }
}

/// The subscription of `handler` of `topic`: its rows' `subscription`.
pub(crate) fn subscription(topic: &str, handler: &str) -> String {
    format!("{topic}\u{1f}{handler}")
}

/// The lane of process `node` in `subscription`: its rows' `subscription`.
pub(crate) fn lane(subscription: &str, node: &str) -> String {
    format!("{subscription}\u{1f}{node}")
}

/// The statement [`send_in`](crate::PostgresQueueFactory::send_in) runs in the caller's
/// transaction: a copy for every subscription of topic `$1` (`$2` id, `$3` key, `$4` due,
/// `$5` message, `$6` payload), each woken at commit; returns the subscriptions (or lanes).
/// With `$7` (a broadcast), a subscription's copy goes instead to the lane of each process
/// consuming it (their records share-locked, as [`FAN_OUT`] does), and to the subscription
/// itself only while none does.
pub(crate) const INSERT_FOR_TOPIC: &str = "WITH subs AS (
        SELECT subscription FROM event_base_subscriptions WHERE topic = $1),
    lanes AS (
        SELECT s.subscription, n.id FROM subs s
        JOIN event_base_nodes n ON s.subscription = ANY(n.subscriptions)
        WHERE $7
        FOR SHARE OF n),
    added AS (
        INSERT INTO event_base_queue (subscription, id, key, due_at, message, payload)
        SELECT l.subscription || chr(31) || l.id, $2::text, NULL::text, $4::timestamptz,
            $5::text, $6::bytea
        FROM lanes l
        UNION ALL
        SELECT s.subscription, $2, $3, $4, $5, $6 FROM subs s
        WHERE NOT EXISTS (SELECT 1 FROM lanes l WHERE l.subscription = s.subscription)
        RETURNING subscription)
    SELECT subscription, pg_notify('event_base', subscription) FROM added";
