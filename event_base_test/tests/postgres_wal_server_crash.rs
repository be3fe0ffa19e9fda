//! What `PostgresWal` promises when its server dies: every append it acknowledged is in the
//! table after an immediate shutdown of the server (a crash to the data files) and a restart;
//! and a WAL whose server is gone stops with a clear cause and refuses new records, without
//! hanging (it does not reconnect: like a file WAL after a failed write, it stops for good,
//! and a new process recovers from the table).

use std::sync::Arc;
use std::time::Duration;

use event_base::backend::{Wal, WalRecordState};
use event_base::{EMessage, WalError};
use event_base_postgres::PostgresWal;
use event_base_test::postgres_server::PostgresServer;

/// Far more than any of these takes; a hang fails the test instead of stalling it.
const AT_MOST: Duration = Duration::from_secs(30);

fn msg(i: u32) -> Arc<EMessage> {
    Arc::new(EMessage::standard("orders", i.to_be_bytes().to_vec()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_appends_survive_a_crash_of_the_server() {
    let mut server = PostgresServer::start();
    let wal = PostgresWal::connect(&server.url()).await.unwrap();
    let sent: Vec<_> = (0..200).map(msg).collect();
    let commits: Vec<_> = sent.iter().map(|m| wal.append(m).unwrap()).collect();
    for c in commits {
        c.wait().await.unwrap();
    }
    assert!(wal.begin(&sent[0].id).unwrap());
    wal.complete(&sent[0].id).unwrap();
    wal.flush().await.unwrap();
    assert!(
        wal.stats().syncs < 200,
        "appends share commits: {:?}",
        wal.stats()
    );

    server.restart();
    // The old WAL's connection is gone: it stops, with a cause, and accepts nothing more.
    let cause = tokio::time::timeout(AT_MOST, async {
        let _ = wal.append(&msg(1000));
        let _ = wal.flush().await;
        wal.wait_failure().await
    })
    .await
    .expect("the WAL notices its server is gone");
    assert!(cause.contains("write of the WAL"), "{cause}");
    assert!(wal.stats().failed);
    assert!(matches!(
        wal.append(&msg(1001)),
        Err(WalError::Failed { .. })
    ));
    drop(wal);

    let wal = PostgresWal::connect(&server.url()).await.unwrap();
    let pending = wal.pending().await.unwrap();
    let mut ids: Vec<&str> = pending.iter().map(|r| r.message.id.as_str()).collect();
    ids.sort_unstable();
    let mut want: Vec<&str> = sent[1..].iter().map(|m| m.id.as_str()).collect();
    want.sort_unstable();
    assert_eq!(ids, want, "every acknowledged append, nothing completed");
    assert!(pending.iter().all(|r| r.state == WalRecordState::Pending));
    assert_eq!(wal.stats().live, 199);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wal_whose_server_is_gone_refuses_without_hanging() {
    let mut server = PostgresServer::start();
    let wal = PostgresWal::connect(&server.url()).await.unwrap();
    wal.append(&msg(0)).unwrap().wait().await.unwrap();
    server.kill();
    let refused = tokio::time::timeout(AT_MOST, async {
        match wal.append(&msg(1)) {
            Ok(commit) => commit.wait().await,
            Err(e) => Err(e),
        }
    })
    .await
    .expect("the append answers, it does not hang");
    let Err(WalError::Failed { cause }) = refused else {
        panic!("expected WalError::Failed, got {refused:?}");
    };
    assert!(cause.contains("PostgreSQL failed"), "{cause}");
    assert_eq!(wal.failure().as_deref(), Some(cause.as_str()));
    let flushed = tokio::time::timeout(AT_MOST, wal.flush()).await.unwrap();
    assert!(
        matches!(flushed, Err(WalError::Failed { .. })),
        "{flushed:?}"
    );
}
