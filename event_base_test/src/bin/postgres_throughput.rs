//! Throughput of the PostgreSQL queues against a cluster it starts (`PostgresServer`: fsync
//! and `synchronous_commit` on, as PostgreSQL ships), each figure beside its floor measured
//! in the same run:
//!
//! - **batch**: `send_batch` of 100 messages to a topic handled elsewhere, then the WAL's
//!   `flush` (every row committed), against a raw `INSERT` of 100 rows of the same width in
//!   one statement and its `COMMIT` on a plain connection: batches a second, the ratio, and
//!   the statements (round trips) a batch cost.
//! - **in-process**: one bus sends `n` messages from 8 tasks to its own handler (4 workers):
//!   messages a second end to end (send to ack committed), and the statements (round trips)
//!   a message cost, from `PostgresQueueFactory::statements`.
//! - **processes**: two `postgres_node worker` processes (4 workers each, no work) handle
//!   what a bus in this process sends from 8 tasks: messages a second end to end, from the
//!   first send to the last handling.
//!
//! ```sh
//! cargo run --release -p event_base_test --bin postgres_throughput -- [n]   # n = 20000
//! ```

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use event_base::backend::Wal;
use event_base::postgres::tokio_postgres::{self, NoTls};
use event_base::{
    async_trait, Ack, EHandler, EMessage, EventBus, HandlerSpec, PostgresQueueFactory,
};
use event_base_test::postgres_server::PostgresServer;
use tokio::sync::Notify;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Batches in the batch comparison (each side).
const BATCHES: usize = 200;
/// Messages a batch.
const BATCH: usize = 100;
/// The payload: 64 bytes.
const PAYLOAD: [u8; 64] = [7; 64];

struct Count {
    seen: AtomicUsize,
    want: usize,
    all: Notify,
}

#[async_trait]
impl EHandler for Count {
    async fn handler(&self, _msg: &EMessage) -> Ack {
        if self.seen.fetch_add(1, Ordering::AcqRel) + 1 == self.want {
            self.all.notify_one();
        }
        Ack::Ack
    }
}

async fn raw_batches(url: &str) -> Result<f64, Error> {
    let (client, connection) = url
        .parse::<tokio_postgres::Config>()?
        .connect(NoTls)
        .await?;
    tokio::spawn(connection);
    client
        .batch_execute(
            "CREATE TABLE raw_bench (seq bigserial PRIMARY KEY, subscription text, id text,
                due_at timestamptz, message text, payload bytea)",
        )
        .await?;
    let insert = client
        .prepare(
            "INSERT INTO raw_bench (subscription, id, due_at, message, payload)
             SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::bytea[])",
        )
        .await?;
    let template = EMessage::standard("bench", PAYLOAD.to_vec());
    let json = serde_json::to_string(&template)?;
    let started = Instant::now();
    for b in 0..BATCHES {
        let subs = vec!["bench\u{1f}work"; BATCH];
        let ids: Vec<String> = (0..BATCH).map(|i| format!("{b}-{i}")).collect();
        let due = vec![std::time::SystemTime::UNIX_EPOCH; BATCH];
        let messages = vec![json.as_str(); BATCH];
        let payloads = vec![&PAYLOAD[..]; BATCH];
        client.batch_execute("BEGIN").await?;
        client
            .execute(&insert, &[&subs, &ids, &due, &messages, &payloads])
            .await?;
        client.batch_execute("COMMIT").await?;
    }
    Ok(BATCHES as f64 / started.elapsed().as_secs_f64())
}

/// Batches a second, and statements (round trips) a batch.
async fn bus_batches(url: &str) -> Result<(f64, f64), Error> {
    // A subscription recorded by a factory that then goes away: the topic is handled
    // "elsewhere", so the sends only write.
    {
        let q = PostgresQueueFactory::connect(url).await?;
        let wal = q.wal();
        let bus = EventBus::builder()
            .wal(wal.clone())
            .queue(q)
            .handler(HandlerSpec::new(
                "work",
                "batch",
                Count {
                    seen: AtomicUsize::new(0),
                    want: 0,
                    all: Notify::new(),
                },
            ))
            .build()
            .await?;
        wal.flush().await?;
        drop(bus);
    }
    let queue = PostgresQueueFactory::connect(url)
        .await?
        .bound(BATCHES * BATCH + 1);
    let counted = queue.clone();
    let wal = queue.wal();
    let bus = EventBus::builder()
        .wal(wal.clone())
        .queue(queue)
        .build()
        .await?;
    let started = Instant::now();
    for _ in 0..BATCHES {
        let batch: Vec<EMessage> = (0..BATCH)
            .map(|_| EMessage::standard("batch", PAYLOAD.to_vec()))
            .collect();
        bus.send_batch("batch", batch).await?;
        wal.flush().await?;
    }
    let rate = BATCHES as f64 / started.elapsed().as_secs_f64();
    Ok((rate, counted.statements() as f64 / BATCHES as f64))
}

async fn in_process(url: &str, n: usize) -> Result<(f64, f64), Error> {
    let queue = PostgresQueueFactory::connect(url).await?;
    let counted = queue.clone();
    let wal = queue.wal();
    let count = Arc::new(Count {
        seen: AtomicUsize::new(0),
        want: n,
        all: Notify::new(),
    });
    let bus = Arc::new(
        EventBus::builder()
            .wal(wal.clone())
            .queue(queue)
            .handler(HandlerSpec::new("work", "inproc", count.clone()).workers(4))
            .build()
            .await?,
    );
    wal.flush().await?;
    let statements_before = counted.statements();
    let started = Instant::now();
    send_from_tasks(&bus, "inproc", n).await?;
    count.all.notified().await;
    let elapsed = started.elapsed();
    bus.wait_idle(Duration::from_secs(60)).await?;
    let per_message = (counted.statements() - statements_before) as f64 / n as f64;
    Ok((n as f64 / elapsed.as_secs_f64(), per_message))
}

async fn send_from_tasks(bus: &Arc<EventBus>, topic: &'static str, n: usize) -> Result<(), Error> {
    let tasks = 8;
    let mut handles = Vec::new();
    for t in 0..tasks {
        let bus = bus.clone();
        handles.push(tokio::spawn(async move {
            let mut i = t;
            while i < n {
                bus.send(topic, EMessage::standard(topic, PAYLOAD.to_vec()))
                    .await?;
                i += tasks;
            }
            Ok::<_, event_base::CoreError>(())
        }));
    }
    for h in handles {
        h.await??;
    }
    Ok(())
}

/// Child processes, killed when dropped (also when the run fails half-way).
struct Children(Vec<std::process::Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

async fn processes(url: &str, n: usize) -> Result<f64, Error> {
    let exe = std::env::current_exe()?.with_file_name("postgres_node");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let mut children = Children(Vec::new());
    for _ in 0..2 {
        let mut child = Command::new(&exe)
            .args(["worker", url, "30000", "4", "0"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("start {}: {e} (build it: cargo build --release -p event_base_test --bin postgres_node)", exe.display()))?;
        let out = BufReader::new(child.stdout.take().ok_or("piped")?);
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        children.0.push(child);
    }
    let mut ready = 0;
    while ready < 2 {
        if rx.recv_timeout(Duration::from_secs(30))? == "ready" {
            ready += 1;
        }
    }
    let queue = PostgresQueueFactory::connect(url).await?;
    let bus = Arc::new(
        EventBus::builder()
            .wal(queue.wal())
            .queue(queue)
            .build()
            .await?,
    );
    let started = Instant::now();
    send_from_tasks(&bus, "jobs", n).await?;
    let mut handled = 0;
    while handled < n {
        if rx.recv_timeout(Duration::from_secs(60))?.starts_with("h ") {
            handled += 1;
        }
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    drop(children);
    Ok(rate)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let n: usize = std::env::args().nth(1).map_or(Ok(20_000), |a| a.parse())?;
    let server = PostgresServer::start();
    let url = server.url();
    let raw = raw_batches(&url).await?;
    let (ours, per_batch) = bus_batches(&url).await?;
    println!(
        "batch of {BATCH}: send_batch + flush {ours:.0} batches/s ({per_batch:.1} statements a batch), raw INSERT + COMMIT {raw:.0} batches/s, ratio {:.2}",
        ours / raw
    );
    let (rate, per) = in_process(&url, n).await?;
    println!(
        "in-process, {n} messages: {rate:.0} msgs/s end to end, {per:.2} statements a message"
    );
    let rate = processes(&url, n).await?;
    println!("two worker processes, {n} messages: {rate:.0} msgs/s end to end");
    Ok(())
}
