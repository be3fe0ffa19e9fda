//! One process of the multi-process PostgreSQL tests, in one of its roles, on handler `work`
//! of topic `jobs` (rows of `event_base_queue` whose subscription is `jobs` U+001F `work`).
//! Every line it prints is written before what it reports is acknowledged to PostgreSQL, so a
//! parent reading its stdout sees it even if the process is then killed with SIGKILL.
//!
//! - `postgres_node worker <url> <visibility-ms> <workers> <work-us>`: a bus with `<workers>`
//!   workers of `work`; each handling sleeps `<work-us>` microseconds, prints `h <id>` and
//!   acks. Prints `ready` once built and its subscription is committed (so a `bus-sender`
//!   finds it). For each line `idle` on its stdin it waits until its bus holds nothing
//!   claimed or in flight, then prints `idle`.
//! - `postgres_node keyed <url> <workers> <work-us>`: as `worker`, but each handling of a
//!   keyed message (payload: its sequence number in its key) prints
//!   `k <key> <seq> <start-us> <end-us>` (wall clock, microseconds since the epoch).
//! - `postgres_node bus-sender <url> <n> <tasks>`: a bus with no handler at all sends `<n>`
//!   messages to `jobs` from `<tasks>` concurrent tasks (the routes find `work`), printing
//!   `sent <id>` for each send that returned, then flushes (every row committed) and prints
//!   `done`.
//! - `postgres_node hold <url>`: the application's crash between its write and its commit:
//!   opens a transaction, inserts order 1 into the table `orders` (made if missing), sends
//!   a message to `jobs` inside it (`send_in`), prints `written <id>`, and waits to be
//!   killed without committing.
//! - `postgres_node host <url> <name> <workers>`: a `Host` bus named `<name>` (visibility
//!   timeout 1 s, so it beats every third of it and is evicted a second after it falls
//!   silent) with `<workers>` workers of `work` (each prints `h <id>`); prints `ready` once
//!   built and recorded, waits for a shutdown command, prints `stopped` once it ended.

use std::sync::Arc;
use std::time::Duration;

use event_base::backend::Wal;
use event_base::postgres::tokio_postgres;
use event_base::{
    async_trait, Ack, EHandler, EMessage, EventBus, HandlerSpec, PostgresQueueFactory,
};

use event_base_test::child_role::{answer_idle, say, Error};

const USAGE: &str = "usage: postgres_node worker <url> <visibility-ms> <workers> <work-us>
       postgres_node keyed <url> <workers> <work-us>
       postgres_node bus-sender <url> <n> <tasks>
       postgres_node hold <url>
       postgres_node host <url> <name> <workers>";

fn arg<T: std::str::FromStr>(args: &mut impl Iterator<Item = String>) -> Result<T, Error>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    Ok(args.next().ok_or(USAGE)?.parse()?)
}

/// Microseconds since the epoch, by the wall clock (one clock for every process of a
/// machine).
fn wall_us() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

struct Record {
    work: Duration,
    keyed: bool,
}

#[async_trait]
impl EHandler for Record {
    async fn handler(&self, msg: &EMessage) -> Ack {
        let start = wall_us();
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
        match msg.key().filter(|_| self.keyed) {
            Some(key) => {
                let seq = String::from_utf8_lossy(&msg.payload.0);
                say(format_args!("k {key} {seq} {start} {}", wall_us()));
            }
            None => say(format_args!("h {}", msg.id)),
        }
        Ack::Ack
    }
}

async fn worker(
    url: &str,
    visibility: Duration,
    workers: usize,
    work: Duration,
    keyed: bool,
) -> Result<(), Error> {
    let queue = PostgresQueueFactory::connect(url)
        .await?
        .visibility_timeout(visibility);
    let wal = queue.wal();
    let bus = EventBus::builder()
        .wal(wal.clone())
        .queue(queue)
        .handler(HandlerSpec::new("work", "jobs", Record { work, keyed }).workers(workers))
        .build()
        .await?;
    // The subscription is recorded through the writer: committed once this answers.
    wal.flush().await?;
    say(format_args!("ready"));
    answer_idle(bus).await
}

async fn bus_sender(url: &str, n: usize, tasks: usize) -> Result<(), Error> {
    let queue = PostgresQueueFactory::connect(url).await?;
    let wal = queue.wal();
    let bus = Arc::new(
        EventBus::builder()
            .wal(wal.clone())
            .queue(queue)
            .build()
            .await?,
    );
    let mut handles = Vec::new();
    for t in 0..tasks {
        let bus = bus.clone();
        handles.push(tokio::spawn(async move {
            let mut i = t;
            while i < n {
                let id = bus
                    .send("jobs", EMessage::standard("jobs", i.to_string()))
                    .await?;
                say(format_args!("sent {id}"));
                i += tasks;
            }
            Ok::<_, Error>(())
        }));
    }
    for h in handles {
        h.await??;
    }
    wal.flush().await?;
    say(format_args!("done"));
    std::future::pending::<()>().await;
    Ok(())
}

async fn hold(url: &str) -> Result<(), Error> {
    let queue = PostgresQueueFactory::connect(url).await?;
    let (mut client, connection) = url
        .parse::<tokio_postgres::Config>()?
        .connect(tokio_postgres::NoTls)
        .await?;
    tokio::spawn(connection);
    client
        .batch_execute("CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY)")
        .await?;
    let tx = client.transaction().await?;
    tx.execute("INSERT INTO orders (id) VALUES (1)", &[])
        .await?;
    let id = queue
        .send_in(&tx, EMessage::standard("jobs", "order 1"))
        .await?;
    say(format_args!("written {id}"));
    std::future::pending::<()>().await;
    drop(tx);
    Ok(())
}

async fn host(url: &str, name: String, workers: usize) -> Result<(), Error> {
    let queue = PostgresQueueFactory::connect(url)
        .await?
        .visibility_timeout(Duration::from_secs(1));
    let bus = EventBus::builder()
        .node_type(event_base::NodeType::Host)
        .node_name(name)
        .wal(queue.wal())
        .queue(queue)
        .handler(
            HandlerSpec::new(
                "work",
                "jobs",
                Record {
                    work: Duration::ZERO,
                    keyed: false,
                },
            )
            .workers(workers),
        )
        .build()
        .await?;
    bus.wal().flush().await?;
    say(format_args!("ready"));
    bus.shutdown_started().await;
    // Waits for the shutdown the command started (a second call waits for the first).
    bus.shutdown(event_base::ShutdownStrategy::Force).await?;
    say(format_args!("stopped"));
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let role = args.next().ok_or(USAGE)?;
    let url: String = arg(&mut args)?;
    match role.as_str() {
        "worker" => {
            let visibility = Duration::from_millis(arg(&mut args)?);
            let workers = arg(&mut args)?;
            let work = Duration::from_micros(arg(&mut args)?);
            worker(&url, visibility, workers, work, false).await
        }
        "keyed" => {
            let workers = arg(&mut args)?;
            let work = Duration::from_micros(arg(&mut args)?);
            worker(&url, Duration::from_secs(5), workers, work, true).await
        }
        "bus-sender" => bus_sender(&url, arg(&mut args)?, arg(&mut args)?).await,
        "hold" => hold(&url).await,
        "host" => host(&url, arg(&mut args)?, arg(&mut args)?).await,
        _ => Err(USAGE.into()),
    }
}
