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

use tokio_postgres::Client;

use crate::error::PostgresError;

/// The version of the tables this build reads and writes.
pub const SCHEMA_VERSION: i32 = 1;

/// The key of the advisory lock taken while the schema is checked and upgraded.
const MIGRATION_LOCK: i64 = 0x6576_5f62_6173_6501;

/// The steps, one per version: `MIGRATIONS[n]` takes the tables from version `n` to `n + 1`.
const MIGRATIONS: &[&str] = &["CREATE TABLE event_base_wal (
        id text PRIMARY KEY,
        topic text NOT NULL,
        state smallint NOT NULL,
        message text NOT NULL,
        payload bytea NOT NULL,
        updated_at timestamptz NOT NULL,
        dead_reason text,
        dead_handlers text[]
    );
    CREATE INDEX event_base_wal_state ON event_base_wal (state);"];

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
