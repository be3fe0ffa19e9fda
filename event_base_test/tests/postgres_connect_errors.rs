//! `PostgresWal::connect` answers bad input with a clear error, never a panic or a hang: a
//! URL that does not parse, a server that refuses the connection, and a database whose
//! event_base schema is newer than this build's. A database it made is connected to again
//! as it is.

use std::time::Duration;

use event_base_postgres::{PostgresError, PostgresWal, SCHEMA_VERSION};
use event_base_test::postgres_server::PostgresServer;

/// Far more than any of these takes; a hang fails the test instead of stalling it.
const AT_MOST: Duration = Duration::from_secs(30);

async fn connect(url: &str) -> Result<PostgresWal, PostgresError> {
    tokio::time::timeout(AT_MOST, PostgresWal::connect(url))
        .await
        .expect("connect answers, it does not hang")
}

#[tokio::test]
async fn a_url_that_does_not_parse_is_a_bad_url() {
    let err = connect("postgres://[::1").await.unwrap_err();
    assert!(matches!(err, PostgresError::BadUrl { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("postgres://user:password@host:port/database"),
        "{text}"
    );
}

#[tokio::test]
async fn a_server_that_refuses_is_unreachable() {
    // A port nobody listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = connect(&format!("postgres://postgres@127.0.0.1:{port}/postgres"))
        .await
        .unwrap_err();
    assert!(matches!(err, PostgresError::Unreachable { .. }), "{err:?}");
    assert!(
        err.to_string().contains("cannot connect to PostgreSQL"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_refused_and_the_same_one_is_reused() {
    let server = PostgresServer::start();
    let wal = connect(&server.url()).await.unwrap();
    drop(wal);
    assert_eq!(
        server.sql("SELECT version FROM event_base_schema"),
        SCHEMA_VERSION.to_string(),
        "the first connect made the tables at this build's version"
    );
    connect(&server.url())
        .await
        .expect("a database this build made is connected to again");

    let newer = SCHEMA_VERSION + 1;
    server.sql(&format!("UPDATE event_base_schema SET version = {newer}"));
    let err = connect(&server.url()).await.unwrap_err();
    match &err {
        PostgresError::SchemaTooNew { found, supported } => {
            assert_eq!((*found, *supported), (newer, SCHEMA_VERSION));
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    assert!(err.to_string().contains("newer than this build"), "{err}");
    assert_eq!(
        server.sql("SELECT version FROM event_base_schema"),
        newer.to_string(),
        "a refused connect changes nothing"
    );
}
