//! A send inside the application's own transaction (`PostgresQueueFactory::send_in`): the
//! message reaches the handler only if the transaction commits; a rollback, or a crash of
//! the application between its write and its commit (a child killed with SIGKILL), leaves
//! no trace — neither the application's row nor the message.

use std::sync::mpsc;
use std::time::Duration;

use event_base::postgres::tokio_postgres::Client;
use event_base::{EMessage, EventBus, HandlerSpec, PostgresError, PostgresQueueFactory};
use event_base_test::child_node::ChildNode;
use event_base_test::forward::Forward;
use event_base_test::postgres_server::PostgresServer;
use tokio::sync::mpsc as tmpsc;

/// A bus with handler `work` of `jobs` on the server, and the payloads it handles.
async fn bus(server: &PostgresServer) -> (EventBus, tmpsc::UnboundedReceiver<String>) {
    let queue = PostgresQueueFactory::connect(&server.url()).await.unwrap();
    let wal = queue.wal();
    let (tx, rx) = tmpsc::unbounded_channel();
    let bus = EventBus::builder()
        .wal(wal.clone())
        .queue(queue)
        .handler(HandlerSpec::new("work", "jobs", Forward(tx)))
        .build()
        .await
        .unwrap();
    // The subscription is committed once the writer's queue is flushed.
    event_base::backend::Wal::flush(&wal).await.unwrap();
    (bus, rx)
}

/// The application's own connection, with its `orders` table.
async fn app(server: &PostgresServer) -> Client {
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY)")
        .await
        .unwrap();
    client
}

async fn count(client: &Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

async fn next(rx: &mut tmpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a message handled in time")
        .expect("the bus runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_send_is_handled_and_invisible_before_the_commit() {
    let server = PostgresServer::start();
    let (bus, mut handled) = bus(&server).await;
    let queue = PostgresQueueFactory::connect(&server.url()).await.unwrap();
    let mut client = app(&server).await;
    let other = app(&server).await;
    let tx = client.transaction().await.unwrap();
    tx.execute("INSERT INTO orders (id) VALUES (7)", &[])
        .await
        .unwrap();
    queue
        .send_in(&tx, EMessage::standard("jobs", "order 7"))
        .await
        .unwrap();
    assert_eq!(
        count(&other, "SELECT count(*) FROM event_base_queue").await,
        0,
        "before the commit, no other session sees the message"
    );
    tx.commit().await.unwrap();
    assert_eq!(next(&mut handled).await, "order 7");
    assert_eq!(count(&other, "SELECT count(*) FROM orders").await, 1);
    drop(bus);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_send_leaves_no_trace() {
    let server = PostgresServer::start();
    let (bus, mut handled) = bus(&server).await;
    let queue = PostgresQueueFactory::connect(&server.url()).await.unwrap();
    let mut client = app(&server).await;
    let tx = client.transaction().await.unwrap();
    tx.execute("INSERT INTO orders (id) VALUES (8)", &[])
        .await
        .unwrap();
    queue
        .send_in(&tx, EMessage::standard("jobs", "order 8"))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(
        count(&client, "SELECT count(*) FROM event_base_queue").await,
        0
    );
    assert_eq!(count(&client, "SELECT count(*) FROM orders").await, 0);
    // A later message is the first the handler sees: nothing of the rolled-back one waits.
    queue
        .send_in(&client, EMessage::standard("jobs", "after"))
        .await
        .unwrap();
    assert_eq!(next(&mut handled).await, "after");
    drop(bus);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_write_and_the_commit_leaves_no_trace() {
    let server = PostgresServer::start();
    let (bus, mut handled) = bus(&server).await;
    let (events, lines) = mpsc::channel();
    let args = ["hold".to_owned(), server.url()];
    let mut child = ChildNode::start(env!("CARGO_BIN_EXE_postgres_node"), 0, &args, &events);
    let (_, line) =
        tokio::task::spawn_blocking(move || lines.recv_timeout(Duration::from_secs(30)))
            .await
            .unwrap()
            .expect("the child wrote its order and message");
    assert!(line.starts_with("written "), "{line}");
    child.kill();
    let client = app(&server).await;
    // The server ends the dead session's transaction when it notices the socket closed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while count(
        &client,
        "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'",
    )
    .await
        > 0
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the dead session's transaction lingers"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(count(&client, "SELECT count(*) FROM orders").await, 0);
    assert_eq!(
        count(&client, "SELECT count(*) FROM event_base_queue").await,
        0
    );
    let queue = PostgresQueueFactory::connect(&server.url()).await.unwrap();
    queue
        .send_in(&client, EMessage::standard("jobs", "after"))
        .await
        .unwrap();
    assert_eq!(next(&mut handled).await, "after");
    drop(bus);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_nobody_handles_is_refused_and_changes_nothing() {
    let server = PostgresServer::start();
    let queue = PostgresQueueFactory::connect(&server.url()).await.unwrap();
    let client = app(&server).await;
    let e = queue
        .send_in(&client, EMessage::standard("nobody", "x"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, PostgresError::NoSubscription { topic } if topic == "nobody"),
        "{e:?}"
    );
    assert!(e.to_string().contains("start a bus with a handler"), "{e}");
    assert_eq!(
        count(&client, "SELECT count(*) FROM event_base_queue").await,
        0
    );
}
