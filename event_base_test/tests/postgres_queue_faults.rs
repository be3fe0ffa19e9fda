//! Faults and bad input on the PostgreSQL queues: a message whose holders keep vanishing is
//! dead-lettered past `max_deliveries`; a URL that does not parse, a server that refuses, a
//! schema of a newer version each give a clear error; an idle bus runs no statement between
//! its beats (every third of the visibility timeout: 10 s by default).

use std::sync::Arc;
use std::time::Duration;

use event_base::backend::{EConsumer, QueueFactory, Wal};
use event_base::{
    DeadReason, EMessage, EventBus, HandlerSpec, MessageTopic, PostgresError, PostgresQueueFactory,
};
use event_base_postgres::SCHEMA_VERSION;
use event_base_test::forward::Forward;
use event_base_test::postgres_server::PostgresServer;
use event_base_test::until;
use tokio::sync::mpsc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_whose_holders_vanish_is_dead_lettered_past_max_deliveries() {
    let server = PostgresServer::start();
    let topic = MessageTopic::from("jobs");
    let first = PostgresQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .visibility_timeout(Duration::from_millis(100))
        .max_deliveries(1);
    let q = first.create_subscription(&topic, "work").unwrap();
    q.producer
        .send(Arc::new(EMessage::standard("jobs", "poison")))
        .await
        .unwrap();
    let mut held = Vec::new();
    assert_eq!(q.consumer.claim_batch(1, &mut held).await.unwrap(), 1);
    // Its holder vanishes: neither acked nor renewed.
    drop((q, first, held));
    let second = PostgresQueueFactory::connect(&server.url())
        .await
        .unwrap()
        .visibility_timeout(Duration::from_millis(100))
        .max_deliveries(1);
    let wal = second.wal();
    // (Its producer kept: a queue whose producers are all gone here reports `Closed`.)
    let q = second.create_subscription(&topic, "work").unwrap();
    let consumer: Arc<dyn EConsumer> = q.consumer.clone();
    // Claims on: the freed row comes back with its second delivery, one past the limit.
    let claiming = tokio::spawn(async move {
        let mut out = Vec::new();
        consumer.claim_batch(1, &mut out).await.map(|_| out)
    });
    let mut dead = Vec::new();
    until("the vanished holder's message dead-lettered", async || {
        dead = wal.dead_letters().await.unwrap();
        !dead.is_empty()
    })
    .await;
    assert_eq!(dead.len(), 1);
    assert_eq!(&dead[0].message.payload.0[..], b"poison");
    assert_eq!(dead[0].handlers, vec!["work".to_owned()]);
    assert!(
        matches!(&dead[0].reason, DeadReason::Other(why) if why.contains("max_deliveries is 1")),
        "{:?}",
        dead[0].reason
    );
    assert!(
        !claiming.is_finished(),
        "the dead-lettered message was not delivered"
    );
    claiming.abort();
    drop(q);
    let c = server.client().await;
    let left: i64 = c
        .query_one("SELECT count(*) FROM event_base_queue", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "the row left the queue as it became a dead letter");
}

#[tokio::test]
async fn a_url_that_does_not_parse_is_refused_at_once() {
    let e = PostgresQueueFactory::open("postgres://[::1").unwrap_err();
    assert!(matches!(e, PostgresError::BadUrl { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("postgres://user:password@host:port/database"),
        "{e}"
    );
}

#[tokio::test]
async fn a_server_that_refuses_is_a_clear_error_not_a_hang() {
    // A port nobody listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres?connect_timeout=2");
    let e = tokio::time::timeout(Duration::from_secs(10), PostgresQueueFactory::connect(&url))
        .await
        .expect("connect answers within its timeout")
        .unwrap_err();
    assert!(matches!(e, PostgresError::Unreachable { .. }), "{e:?}");
    assert!(e.to_string().contains("check that the server runs"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_of_a_newer_version_is_refused() {
    let server = PostgresServer::start();
    drop(PostgresQueueFactory::connect(&server.url()).await.unwrap());
    let c = server.client().await;
    c.execute(
        "UPDATE event_base_schema SET version = $1",
        &[&(SCHEMA_VERSION + 1)],
    )
    .await
    .unwrap();
    let e = PostgresQueueFactory::connect(&server.url())
        .await
        .unwrap_err();
    assert!(
        matches!(e, PostgresError::SchemaTooNew { found, .. } if found == SCHEMA_VERSION + 1),
        "{e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_bus_runs_no_statement() {
    let server = PostgresServer::start();
    let queue = PostgresQueueFactory::connect(&server.url()).await.unwrap();
    let (tx, mut handled) = mpsc::unbounded_channel();
    let bus = EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(HandlerSpec::new("work", "jobs", Forward(tx)).workers(2))
        .build()
        .await
        .unwrap();
    bus.send("jobs", EMessage::standard("jobs", "one"))
        .await
        .unwrap();
    handled.recv().await.unwrap();
    bus.wait_idle(Duration::from_secs(10)).await.unwrap();
    let c = server.client().await;
    // Let the last statements (the ack's transaction) finish before the window opens.
    let mut start = std::time::SystemTime::UNIX_EPOCH;
    until("the last statements finished", async || {
        let row = c
            .query_one(
                "SELECT now(), count(*) FROM pg_stat_activity
                 WHERE application_name = 'event_base' AND state = 'active'",
                &[],
            )
            .await
            .unwrap();
        start = row.get(0);
        row.get::<_, i64>(1) == 0
    })
    .await;
    // The window: two seconds of a bus with nothing to do (what is measured, not a wait for
    // an event).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let busy: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE application_name = 'event_base' AND query_start > $1",
            &[&start],
        )
        .await
        .unwrap()
        .get(0);
    let sessions: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'event_base'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(sessions >= 3, "the bus's sessions are there ({sessions})");
    assert_eq!(busy, 0, "an idle bus ran statements");
    drop(bus);
}
