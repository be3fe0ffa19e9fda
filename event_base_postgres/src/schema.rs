//! The tables, created and upgraded by the backend when it connects, versioned.
//!
//! `event_base_schema` holds one row: the version of event_base's tables in this database.
//! [`migrate`] runs, in one transaction under an advisory lock (so processes connecting at
//! once do not race), every step past that version, and refuses a database whose version is
//! newer than this build's ([`PostgresError::SchemaTooNew`]): a newer event_base made it, and
//! this one would misread it.
//!
//! Version 1, the WAL:
//!
//! | column | holds |
//! |---|---|
//! | `id` | the message id (primary key) |
//! | `topic` | its topic |
//! | `state` | 0 `Pending`, 1 `Processing`, 3 `Failed` (a dead letter); a completed record is deleted |
//! | `message` | the message as JSON, its payload left out |
//! | `payload` | the payload's bytes |
//! | `updated_at` | when the record was last written (append, retry, fail) |
//! | `dead_reason`, `dead_handlers` | a dead letter's reason (JSON) and the handlers whose copy died |
//!
//! Version 2, the queues (`PostgresQueueFactory`, `queue/`):
//!
//! | table | holds |
//! |---|---|
//! | `event_base_queue` | a row per unfinished copy of a message: its subscription (`<topic>` U+001F `<handler>`), sequence, id, ordering key, due time, the message and payload, and its claim (`claimed_by`, `claimed_at`, `deliveries`) |
//! | `event_base_subscriptions` | every subscription a process created: where a send from any process (and `send_in`) puts its copies |
//! | `event_base_dead_letters` | the dead letters of the queues' WAL (`PostgresQueueWal`), one row per message id |
//! | `event_base_schedules` | recurring schedules: the definition and the last slot fired |
//! | `event_base_nodes` | each process (its id, name, kind, pid, last beat, live workers as JSON, and the subscriptions it consumes: its lanes), for `EventBus::nodes`, broadcasts and addressed messages |
//! | `event_base_rates` | each rated handler's next free start (`HandlerSpec::rate`), shared by every process |
//!
//! Version 3 adds `event_base_nodes.subscriptions`: the subscriptions each process consumes.
//! A process's *lane* of a subscription is the rows whose `subscription` is the
//! subscription's name, U+001F, and the process's id: what only that process claims (a
//! broadcast's copy, a message addressed to one of its workers; `queue/sql.rs`).

use tokio_postgres::Client;

use crate::error::PostgresError;

/// The version of the tables this build reads and writes.
pub const SCHEMA_VERSION: i32 = 3;

/// The key of the advisory lock taken while the schema is checked and upgraded.
const MIGRATION_LOCK: i64 = 0x6576_5f62_6173_6501;

/// The steps, one per version: `MIGRATIONS[n]` takes the tables from version `n` to `n + 1`.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE event_base_wal (
        id text PRIMARY KEY,
        topic text NOT NULL,
        state smallint NOT NULL,
        message text NOT NULL,
        payload bytea NOT NULL,
        updated_at timestamptz NOT NULL,
        dead_reason text,
        dead_handlers text[]
    );
    CREATE INDEX event_base_wal_state ON event_base_wal (state);",
    "CREATE TABLE event_base_queue (
        seq bigserial PRIMARY KEY,
        subscription text NOT NULL,
        id text NOT NULL,
        key text,
        due_at timestamptz NOT NULL,
        message text NOT NULL,
        payload bytea NOT NULL,
        claimed_by text,
        claimed_at timestamptz,
        deliveries integer NOT NULL DEFAULT 0
    );
    CREATE INDEX event_base_queue_ready ON event_base_queue (subscription, seq)
        WHERE claimed_by IS NULL;
    CREATE INDEX event_base_queue_claims ON event_base_queue (claimed_at)
        WHERE claimed_by IS NOT NULL;
    CREATE INDEX event_base_queue_keys ON event_base_queue (subscription, key, seq)
        WHERE key IS NOT NULL;
    CREATE TABLE event_base_subscriptions (
        subscription text PRIMARY KEY,
        topic text NOT NULL,
        handler text NOT NULL,
        seen_at timestamptz NOT NULL
    );
    CREATE INDEX event_base_subscriptions_topic ON event_base_subscriptions (topic);
    CREATE TABLE event_base_dead_letters (
        id text PRIMARY KEY,
        topic text NOT NULL,
        message text NOT NULL,
        payload bytea NOT NULL,
        reason text NOT NULL,
        handlers text[] NOT NULL,
        died_at timestamptz NOT NULL
    );
    CREATE TABLE event_base_schedules (
        name text PRIMARY KEY,
        definition bytea NOT NULL,
        last_slot bigint
    );
    CREATE TABLE event_base_rates (
        name text PRIMARY KEY,
        next_at timestamptz NOT NULL
    );
    CREATE TABLE event_base_nodes (
        id text PRIMARY KEY,
        name text NOT NULL,
        kind text,
        pid integer NOT NULL,
        last_seen timestamptz NOT NULL,
        workers text NOT NULL DEFAULT '[]'
    );",
    "ALTER TABLE event_base_nodes
        ADD COLUMN subscriptions text[] NOT NULL DEFAULT '{}';",
];

/// Creates or upgrades event_base's tables to [`SCHEMA_VERSION`] (see the module docs).
pub(crate) async fn migrate(client: &mut Client) -> Result<(), PostgresError> {
    let what = "the schema check";
    let tx = client
        .transaction()
        .await
        .map_err(PostgresError::statement(what))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(PostgresError::statement(what))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS event_base_schema (
            only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
            version integer NOT NULL
        )",
    )
    .await
    .map_err(PostgresError::statement(what))?;
    let found: i32 = tx
        .query_opt("SELECT version FROM event_base_schema", &[])
        .await
        .map_err(PostgresError::statement(what))?
        .map_or(0, |row| row.get(0));
    if found > SCHEMA_VERSION {
        return Err(PostgresError::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    let from = usize::try_from(found).unwrap_or(0);
    for step in &MIGRATIONS[from..] {
        tx.batch_execute(step)
            .await
            .map_err(PostgresError::statement("a schema upgrade"))?;
    }
    if found < SCHEMA_VERSION {
        tx.execute(
            "INSERT INTO event_base_schema (version) VALUES ($1)
             ON CONFLICT (only_row) DO UPDATE SET version = EXCLUDED.version",
            &[&SCHEMA_VERSION],
        )
        .await
        .map_err(PostgresError::statement(what))?;
    }
    tx.commit().await.map_err(PostgresError::statement(what))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_step_per_version() {
        assert_eq!(MIGRATIONS.len(), usize::try_from(SCHEMA_VERSION).unwrap());
    }
}
