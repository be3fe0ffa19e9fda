//! [`Link`]: one connection to PostgreSQL that comes back by itself. It connects when first
//! used (so a factory can be made outside a runtime), checks event_base's tables on each new
//! connection (`schema.rs`), and after the connection breaks (the server restarted, a
//! network fault) connects again on the next use, waiting between attempts.
//!
//! Statements from many tasks share the connection: tokio-postgres pipelines them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio_postgres::{Client, Config, NoTls};

use crate::queue::sql::Statements;

use crate::error::PostgresError;
use crate::schema;

/// How long a connection attempt may take when the URL does not say (`connect_timeout`).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The shortest wait before connecting again after a failed attempt; it doubles up to
/// [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Parses a connection URL (or PostgreSQL's `key=value` form), with the default connect
/// timeout where the URL gives none.
pub(crate) fn parse_url(url: &str) -> Result<Config, PostgresError> {
    let mut config: Config = url
        .parse()
        .map_err(|source| PostgresError::BadUrl { source })?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
    }
    if config.get_application_name().is_none() {
        // So an operator tells event_base's sessions apart (`pg_stat_activity`).
        config.application_name("event_base");
    }
    Ok(config)
}

/// What a new connection is set up with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Commits {
    /// The server's setting (`synchronous_commit = on` unless configured otherwise): a commit
    /// answers once it is durable. For what a send is acknowledged by.
    Durable,
    /// `synchronous_commit = off`: for claims, whose loss in a crash of the server only
    /// makes a message claimable again.
    Relaxed,
}

/// A connection that reconnects (see the module docs).
#[derive(Debug)]
pub(crate) struct Link {
    config: Config,
    commits: Commits,
    conn: Mutex<Option<Arc<Conn>>>,
    /// Set while connecting fails: the next attempt waits this long first.
    backoff: std::sync::Mutex<Duration>,
    ran: Arc<AtomicU64>,
}

impl Link {
    /// A link whose statements are counted in `ran`.
    pub(crate) fn new(config: Config, commits: Commits, ran: Arc<AtomicU64>) -> Link {
        Link {
            config,
            commits,
            conn: Mutex::new(None),
            backoff: std::sync::Mutex::new(Duration::ZERO),
            ran,
        }
    }

    /// The connection, made (or made again) if it is not open.
    pub(crate) async fn conn(&self) -> Result<Arc<Conn>, PostgresError> {
        let mut slot = self.conn.lock().await;
        if let Some(client) = slot.as_ref().filter(|c| !c.client.is_closed()) {
            return Ok(client.clone());
        }
        *slot = None;
        let wait = *self.backoff.lock().unwrap_or_else(|e| e.into_inner());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        match self.open().await {
            Ok(client) => {
                *self.backoff.lock().unwrap_or_else(|e| e.into_inner()) = Duration::ZERO;
                let client = Arc::new(client);
                *slot = Some(client.clone());
                Ok(client)
            }
            Err(e) => {
                let mut backoff = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
                *backoff = (*backoff * 2).clamp(MIN_BACKOFF, MAX_BACKOFF);
                Err(e)
            }
        }
    }

    /// Forgets the connection if it is `conn` (after a failure that left it unusable).
    pub(crate) async fn drop_conn(&self, conn: &Arc<Conn>) {
        let mut slot = self.conn.lock().await;
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *slot = None;
        }
    }

    async fn open(&self) -> Result<Conn, PostgresError> {
        let mut client = connect(&self.config).await?;
        schema::migrate(&mut client).await?;
        if self.commits == Commits::Relaxed {
            client
                .batch_execute("SET synchronous_commit = off")
                .await
                .map_err(PostgresError::statement("the session's settings"))?;
        }
        let st = Statements::prepare(&client).await?;
        Ok(Conn {
            client,
            st,
            ran: self.ran.clone(),
        })
    }
}

/// An open connection and the statements prepared on it.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) client: Client,
    pub(crate) st: Statements,
    /// Statements run on it and its predecessors (each a round trip), shared with the
    /// factory's count.
    ran: Arc<AtomicU64>,
}

impl Conn {
    /// Counts `n` statements run.
    pub(crate) fn ran(&self, n: u64) {
        self.ran.fetch_add(n, Ordering::Relaxed);
    }
}

/// A connection of its own, its driver spawned on the runtime.
pub(crate) async fn connect(config: &Config) -> Result<Client, PostgresError> {
    let (client, connection) = config
        .connect(NoTls)
        .await
        .map_err(|source| PostgresError::Unreachable { source })?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(target: "event_base::postgres", error = %e, "a connection to PostgreSQL ended");
        }
    });
    Ok(client)
}

/// Whether `e` left the connection unusable (it broke, or the server went away), so the
/// statement may be tried again on a new one, rather than refused by the server.
pub(crate) fn is_connection_error(e: &tokio_postgres::Error, client: &Client) -> bool {
    client.is_closed()
        || e.as_db_error()
            .is_none_or(|db| db.code().code().starts_with("57P"))
}
