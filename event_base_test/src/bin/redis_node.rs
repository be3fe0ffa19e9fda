//! One process of the multi-process Redis tests, in one of its roles, most on handler
//! `work` of topic `jobs` (stream `eb:{jobs}:s:work`). Every line it prints is written before
//! what it reports is acknowledged to Redis, so a parent reading its stdout sees it even if
//! the process is then killed with SIGKILL (a line shorter than `PIPE_BUF` reaches the pipe
//! whole, in one `write`).
//!
//! - `redis_node worker <url> <visibility-ms> <batch> <workers> <work-us> [<heartbeat-ms>
//!   [host]]`: a bus (a `Worker` node, or a `Host`, which may be the janitor, with `host`) with
//!   `<workers>` workers claiming `<batch>` entries at a time; each handling sleeps
//!   `<work-us>` microseconds (the work), prints `h <id>` and acks. Prints `ready` once built and its handler is in the
//!   registry (so a `bus-sender` finds it). For each line `idle` on its stdin it waits until
//!   its bus holds nothing claimed or in flight (`wait_idle`), then prints `idle`.
//! - `redis_node sender <url> <n> <tasks>`: writes `<n>` messages to the subscription's stream
//!   from `<tasks>` concurrent tasks, with no handler of its own (through the queue backend
//!   directly, without a bus), printing `sent <id>` for
//!   each one Redis confirmed, then `done`.
//! - `redis_node bus-sender <url> <n> <tasks>`: the same through a bus with no handler at
//!   all: the registry of handlers routes the messages to `work`.
//! - `redis_node host <url> <name> <workers>`: a `Host` bus named `<name>` (its node name)
//!   with `<workers>` workers of `work` on `jobs`, so it runs the bus's own handlers too
//!   (shutdown commands, topic discovery). Prints `ready` once built, then, once a
//!   shutdown command stopped it, `stopped`, and exits.
//! - `redis_node replier <url>`: a bus with handler `upper` of topic `ask`, which answers
//!   each request (`EventBus::request`) with its payload in upper case (`reply`). Prints
//!   `ready` once built and registered; answers `idle` as `worker` does.
//! - `redis_node keyed <url> <workers> <heartbeat-ms> <work-us>`: a bus with `<workers>`
//!   workers of handler `apply` on topic `ledger` (streams `eb:{ledger}:s:apply` and, for
//!   keyed messages, `eb:{ledger}:k:apply`, read by the holder of the keyed lease
//!   `eb:{ledger}:kl:apply`), beating every `<heartbeat-ms>`. Each handling of a keyed
//!   message (payload: its sequence number in its key) sleeps `<work-us>` and prints
//!   `k <key> <seq> <start-us> <end-us>` (wall clock, microseconds since the epoch, read
//!   when the handler began and ended); of an unkeyed one (which sleeps as long), `u <id>`. Prints `ready` once
//!   built and registered; answers `idle` as `worker` does.
//! - `redis_node zombie <url> <visibility-ms>`: a bus with one worker that sends one message
//!   to itself, prints `started <id>` when its handler begins it, then waits for a line on
//!   stdin before acking it (prints `returning <id>`). Warnings of the Redis backend (a fenced
//!   ack) are printed to stdout as well, as tracing lines.

use std::sync::Arc;
use std::time::Duration;

use event_base::backend::QueueFactory;
use event_base::{
    async_trait, Ack, EHandler, EMessage, EventBus, HandlerSpec, MessageTopic, NodeType,
    RedisQueueFactory,
};

use event_base_test::child_role::{answer_idle, say, Error};

const USAGE: &str = "usage: redis_node worker <url> <visibility-ms> <batch> <workers> <work-us> [<heartbeat-ms> [host]]
       redis_node sender <url> <n> <tasks>
       redis_node bus-sender <url> <n> <tasks>
       redis_node replier <url>
       redis_node host <url> <name> <workers>
       redis_node keyed <url> <workers> <heartbeat-ms> <work-us>
       redis_node zombie <url> <visibility-ms>";

struct Record {
    work: Duration,
}

#[async_trait]
impl EHandler for Record {
    async fn handler(&self, msg: &EMessage) -> Ack {
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
        say(format_args!("h {}", msg.id));
        Ack::Ack
    }
}

/// Microseconds since the epoch, by the wall clock (one clock for every process of a
/// machine).
fn wall_us() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

struct Keyed {
    work: Duration,
}

#[async_trait]
impl EHandler for Keyed {
    async fn handler(&self, msg: &EMessage) -> Ack {
        let start = wall_us();
        tokio::time::sleep(self.work).await;
        let Some(key) = msg.key() else {
            say(format_args!("u {}", msg.id));
            return Ack::Ack;
        };
        let seq = String::from_utf8_lossy(&msg.payload.0);
        say(format_args!("k {key} {seq} {start} {}", wall_us()));
        Ack::Ack
    }
}

struct Zombie;

#[async_trait]
impl EHandler for Zombie {
    async fn handler(&self, msg: &EMessage) -> Ack {
        say(format_args!("started {}", msg.id));
        let line = tokio::task::spawn_blocking(|| {
            let mut s = String::new();
            std::io::stdin().read_line(&mut s).map(|_| s)
        })
        .await;
        if !matches!(line, Ok(Ok(_))) {
            std::future::pending::<()>().await;
        }
        say(format_args!("returning {}", msg.id));
        Ack::Ack
    }
}

/// Prints warnings and errors to stdout, one line each: `WARN <target> field=value ...`.
struct PrintWarnings;

struct Line(String);

impl tracing::field::Visit for Line {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for PrintWarnings {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let meta = event.metadata();
        if *meta.level() > tracing::Level::WARN {
            return;
        }
        let mut line = Line(format!("{} {}", meta.level(), meta.target()));
        event.record(&mut line);
        say(format_args!("{}", line.0));
    }
}

fn arg<T: std::str::FromStr>(args: &mut impl Iterator<Item = String>) -> Result<T, Error>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    Ok(args.next().ok_or(USAGE)?.parse()?)
}

async fn worker(mut args: impl Iterator<Item = String>) -> Result<(), Error> {
    let url: String = arg(&mut args)?;
    let visibility = Duration::from_millis(arg(&mut args)?);
    let batch: usize = arg(&mut args)?;
    let workers: usize = arg(&mut args)?;
    let work = Duration::from_micros(arg(&mut args)?);
    let mut queue = RedisQueueFactory::connect(&url)
        .await?
        .visibility_timeout(visibility);
    if let Some(ms) = args.next() {
        queue = queue.heartbeat(Duration::from_millis(ms.parse()?));
    }
    let kind = match args.next().as_deref() {
        Some("host") => NodeType::Host,
        None => NodeType::Worker,
        Some(_) => return Err(USAGE.into()),
    };
    let registry = queue.clone();
    let bus = EventBus::builder()
        .node_type(kind)
        .batch_size(batch)
        .wal(queue.wal())
        .queue(queue)
        .handler(HandlerSpec::new("work", "jobs", Record { work }).workers(workers))
        .build()
        .await?;
    registered(&registry).await?;
    say(format_args!("ready"));
    answer_idle(bus).await
}

/// Waits until the registry lists handler `work` of `jobs` (the node registers it with its
/// first claim), so that a sender with no handler of its own finds it: Redis offers nothing
/// to wait on, so this polls, up to 10 s.
async fn registered(queue: &RedisQueueFactory) -> Result<(), Error> {
    registered_as(queue, "jobs", "work").await
}

/// Waits until the registry lists `handler` of `topic` (see [`registered`]).
async fn registered_as(queue: &RedisQueueFactory, topic: &str, handler: &str) -> Result<(), Error> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let handlers = queue.handlers_of(topic, Duration::from_secs(60)).await?;
        if handlers.iter().any(|h| h == handler) {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(
                format!("handler `{handler}` of `{topic}` was not registered within 10 s").into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `keyed <url> <workers> <heartbeat-ms> <work-us>` (see the module docs).
async fn keyed(mut args: impl Iterator<Item = String>) -> Result<(), Error> {
    let url: String = arg(&mut args)?;
    let workers: usize = arg(&mut args)?;
    let heartbeat = Duration::from_millis(arg(&mut args)?);
    let work = Duration::from_micros(arg(&mut args)?);
    let queue = RedisQueueFactory::connect(&url).await?.heartbeat(heartbeat);
    let registry = queue.clone();
    let bus = EventBus::builder()
        .node_type(NodeType::Worker)
        .batch_size(16)
        .wal(queue.wal())
        .queue(queue)
        .handler(HandlerSpec::new("apply", "ledger", Keyed { work }).workers(workers))
        .build()
        .await?;
    registered_as(&registry, "ledger", "apply").await?;
    say(format_args!("ready"));
    answer_idle(bus).await
}

/// Answers each request on `ask` with its payload in upper case.
struct Upper;

#[async_trait]
impl EHandler for Upper {
    async fn handler(&self, msg: &EMessage) -> Ack {
        let answer = String::from_utf8_lossy(&msg.payload.0).to_uppercase();
        match event_base::reply(msg, answer.into_bytes()).await {
            Ok(()) => Ack::Ack,
            Err(e) => {
                say(format_args!("reply failed: {e}"));
                Ack::dead()
            }
        }
    }
}

/// `replier <url>`: a bus with handler `upper` of topic `ask` (2 workers), which replies to
/// each request with its payload in upper case. Prints `ready` once built and registered;
/// answers `idle` as `worker` does.
async fn replier(mut args: impl Iterator<Item = String>) -> Result<(), Error> {
    let url: String = arg(&mut args)?;
    let queue = RedisQueueFactory::connect(&url).await?;
    let registry = queue.clone();
    let bus = EventBus::builder()
        .node_type(NodeType::Worker)
        .wal(queue.wal())
        .queue(queue)
        .handler(HandlerSpec::new("upper", "ask", Upper).workers(2))
        .build()
        .await?;
    registered_as(&registry, "ask", "upper").await?;
    say(format_args!("ready"));
    answer_idle(bus).await
}

/// `bus-sender <url> <n> <tasks>`: a bus with no handler at all sends `<n>` messages to
/// `jobs` from `<tasks>` tasks (the registry routes them to handler `work`, run by other
/// processes), printing `sent <id>` for each accepted, then `done`.
async fn bus_sender(mut args: impl Iterator<Item = String>) -> Result<(), Error> {
    let url: String = arg(&mut args)?;
    let n: usize = arg(&mut args)?;
    let tasks = arg::<usize>(&mut args)?.max(1);
    let queue = RedisQueueFactory::connect(&url).await?;
    let bus = EventBus::builder()
        .node_type(NodeType::Worker)
        .wal(queue.wal())
        .queue(queue)
        .build()
        .await?;
    let mut running = Vec::new();
    for t in 0..tasks {
        let bus = bus.clone();
        let share = n / tasks + usize::from(t < n % tasks);
        running.push(tokio::spawn(async move {
            for i in 0..share {
                let id = bus.send("jobs", format!("{t}-{i}").into_bytes()).await?;
                say(format_args!("sent {id}"));
            }
            Ok::<(), event_base::CoreError>(())
        }));
    }
    for task in running {
        task.await??;
    }
    // What `send` took is queued for the writer: written before the process ends.
    bus.wal().flush().await?;
    say(format_args!("done"));
    Ok(())
}

async fn sender(mut args: impl Iterator<Item = String>) -> Result<(), Error> {
    let url: String = arg(&mut args)?;
    let n: usize = arg(&mut args)?;
    let tasks: usize = arg(&mut args)?;
    let queue = RedisQueueFactory::connect(&url).await?;
    let topic = MessageTopic::from("jobs");
    let producer = queue.create_subscription(&topic, "work")?.producer;
    let mut running = Vec::new();
    for t in 0..tasks.max(1) {
        let producer = producer.clone();
        let share = n / tasks.max(1) + usize::from(t < n % tasks.max(1));
        running.push(tokio::spawn(async move {
            for i in 0..share {
                let payload = format!("{t}-{i}").into_bytes();
                let message = Arc::new(EMessage::standard("jobs", payload));
                let id = message.id.clone();
                producer.send(message).await?;
                say(format_args!("sent {id}"));
            }
            Ok::<(), event_base::QueueError>(())
        }));
    }
    for task in running {
        task.await??;
    }
    say(format_args!("done"));
    Ok(())
}

/// `host <url> <name> <workers>` (see the module docs).
async fn host(mut args: impl Iterator<Item = String>) -> Result<(), Error> {
    let url: String = arg(&mut args)?;
    let name: String = arg(&mut args)?;
    let workers: usize = arg(&mut args)?;
    let queue = RedisQueueFactory::connect(&url)
        .await?
        .heartbeat(Duration::from_millis(200));
    let bus = EventBus::builder()
        .node_type(NodeType::Host)
        .node_name(name)
        .wal(queue.wal())
        .queue(queue)
        .handler(
            HandlerSpec::new(
                "work",
                "jobs",
                Record {
                    work: Duration::ZERO,
                },
            )
            .workers(workers),
        )
        .build()
        .await?;
    say(format_args!("ready"));
    bus.shutdown_started().await;
    // Waits for the shutdown the command started (a second call waits for the first).
    bus.shutdown(event_base::ShutdownStrategy::Force).await?;
    say(format_args!("stopped"));
    Ok(())
}

async fn zombie(mut args: impl Iterator<Item = String>) -> Result<(), Error> {
    let url: String = arg(&mut args)?;
    let visibility = Duration::from_millis(arg(&mut args)?);
    {
        use tracing_subscriber::layer::SubscriberExt;
        let subscriber = tracing_subscriber::registry().with(PrintWarnings);
        tracing::subscriber::set_global_default(subscriber)?;
    }
    let queue = RedisQueueFactory::connect(&url)
        .await?
        .visibility_timeout(visibility);
    let bus = EventBus::builder()
        .node_type(NodeType::Worker)
        .batch_size(1)
        .wal(queue.wal())
        .queue(queue)
        .handler(HandlerSpec::new("work", "jobs", Zombie).workers(1))
        .build()
        .await?;
    bus.send("jobs", b"zombie".to_vec()).await?;
    std::future::pending::<()>().await;
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("worker") => worker(args).await,
        Some("sender") => sender(args).await,
        Some("bus-sender") => bus_sender(args).await,
        Some("host") => host(args).await,
        Some("zombie") => zombie(args).await,
        Some("keyed") => keyed(args).await,
        Some("replier") => replier(args).await,
        _ => Err(USAGE.into()),
    }
}
