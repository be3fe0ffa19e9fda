//! [`PostgresError`]: what can go wrong talking to PostgreSQL, each message saying what to do.

use event_base_core::{CoreError, WalError};

/// Errors of the PostgreSQL backend. Converted into [`WalError::Backend`] (and so into
/// [`CoreError`]) where the bus meets them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresError {
    /// The URL is not a PostgreSQL connection string. (The URL is not repeated: it may hold
    /// a password.)
    #[error("the PostgreSQL URL does not parse ({source}); write it as postgres://user:password@host:port/database, e.g. postgres://postgres@127.0.0.1:5432/postgres")]
    BadUrl {
        /// The parser's complaint.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The server could not be reached, refused the connection, or refused the login.
    #[error("cannot connect to PostgreSQL ({source}); check that the server runs at the URL's host and port and accepts this user and database")]
    Unreachable {
        /// The client's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// A statement failed (or the connection broke while it ran).
    #[error("PostgreSQL failed `{what}` ({source})")]
    Statement {
        /// What was being done.
        what: &'static str,
        /// The client's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The database holds event_base's tables at a schema version newer than this build
    /// knows: a newer event_base created them.
    #[error("the database holds event_base's schema version {found}, newer than this build's {supported}: a newer event_base made it; run that version (or newer) against it, or point this one at another database")]
    SchemaTooNew {
        /// The version the database holds.
        found: i32,
        /// The newest version this build knows.
        supported: i32,
    },
    /// A change failed, for this and every change committed with it; `cause` is the
    /// server's or the client's error, as text (shared by every change of the batch).
    #[error("PostgreSQL failed `{what}` ({cause}); check the server's log, and that event_base's tables are not changed by hand")]
    Failed {
        /// What was being done.
        what: &'static str,
        /// The error, as text.
        cause: String,
    },
    /// A send inside the application's transaction (`PostgresQueueFactory::send_in`) found
    /// no subscription of the topic: no process has started a handler of it on this
    /// database, so the message would reach no one.
    #[error("no handler of topic `{topic}` has ever run against this database, so a message sent to it would reach no one; start a bus with a handler of it first (its subscription is recorded when it starts)")]
    NoSubscription {
        /// The topic.
        topic: String,
    },
    /// [`send_in`](crate::PostgresQueueFactory::send_in) was given a message addressed to a
    /// worker of one process (`to_worker: "<node>/<worker>"`).
    #[error("send_in does not take a message addressed to a worker of one process (`{to_worker}`): which process reads it is decided by a bus at send; send it with `EventBus::send`, or address the worker by its name alone")]
    AddressedInTransaction {
        /// The message's `to_worker`.
        to_worker: String,
    },
    /// A row of the WAL's table does not hold a record event_base wrote.
    #[error("row `{id}` of event_base_wal is not an event_base record ({reason}); keep other writers off event_base's tables")]
    Undecodable {
        /// The row's id.
        id: String,
        /// What was wrong.
        reason: String,
    },
}

impl PostgresError {
    /// A failed statement: `what` was being done.
    pub(crate) fn statement(what: &'static str) -> impl FnOnce(tokio_postgres::Error) -> Self {
        move |source| PostgresError::Statement { what, source }
    }
}

impl From<PostgresError> for event_base_core::QueueError {
    fn from(e: PostgresError) -> Self {
        event_base_core::QueueError::Backend(Box::new(e))
    }
}

impl From<PostgresError> for WalError {
    fn from(e: PostgresError) -> Self {
        WalError::Backend(Box::new(e))
    }
}

impl From<PostgresError> for CoreError {
    fn from(e: PostgresError) -> Self {
        CoreError::Wal(e.into())
    }
}
