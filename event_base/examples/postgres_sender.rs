//! A process that only sends, two ways, to `order.created`, which `postgres_worker`
//! processes handle: `n` orders (the first argument, default 10) through a bus, then one
//! more inside the application's own transaction, committed with the row that records it.
//!
//! ```sh
//! cargo run --example postgres_sender --features postgres -- 10
//! ```
//!
//! The database is `EB_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`).
//! Its bus has no handler at all: a send goes to the subscriptions recorded on the database
//! (start a `postgres_worker` once first), and a topic nobody handles is refused with
//! `NoHandler`.

use event_base::postgres::tokio_postgres::{self, NoTls};
use event_base::{EMessage, EventBus, PostgresQueueFactory};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("EB_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let n: usize = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 10,
    };
    let queue = PostgresQueueFactory::connect(&url).await?;
    let wal = queue.wal();
    let bus = EventBus::builder()
        .wal(wal.clone())
        .queue(queue.clone())
        .build()
        .await?;
    for i in 1..=n {
        let id = bus
            .send("order.created", format!("order #{i}").into_bytes())
            .await?;
        println!("sent order #{i} ({id})");
    }
    // Sends are handed to the writer connection: wait until PostgreSQL committed them all.
    event_base::backend::Wal::flush(&wal).await?;

    // The outbox without a relay: the order row and its event commit together, or neither.
    let (mut client, connection) = url
        .parse::<tokio_postgres::Config>()?
        .connect(NoTls)
        .await?;
    tokio::spawn(connection);
    client
        .batch_execute("CREATE TABLE IF NOT EXISTS example_orders (id bigint PRIMARY KEY)")
        .await?;
    let tx = client.transaction().await?;
    let order = i64::try_from(n + 1)?;
    tx.execute(
        "INSERT INTO example_orders (id) VALUES ($1) ON CONFLICT DO NOTHING",
        &[&order],
    )
    .await?;
    let id = queue
        .send_in(
            &tx,
            EMessage::standard("order.created", format!("order #{order}")),
        )
        .await?;
    tx.commit().await?;
    println!("sent order #{order} ({id}) in the same transaction as its row");
    Ok(())
}
