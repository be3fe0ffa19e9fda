//! Distributed mode's figures: the bus on Redis Streams across processes, beside
//! `redis-benchmark` run against the same server in the same run.
//!
//! `cargo run --release -p event_base_test --bin redis_throughput [-- --quick] [-- --only NAME]`
//!
//! Each scenario starts its own `redis-server` on a free loopback port (skipped, saying so,
//! when `redis-server` or `redis-benchmark` is not installed), one sender process and worker
//! processes (this binary, run again in a role), and prints one line:
//!
//! - `redis_e2e`: send → handler → ack across processes, msgs/s, with the Redis commands per
//!   message from `INFO commandstats`; floor `redis-benchmark XADD` with 8 clients and with 8
//!   clients pipelining 32.
//! - `redis_latency`: p50/p99 of send → handler start at a paced 1,000 msgs/s; floor the p50
//!   and p99 of `redis-benchmark XADD` with one client (one round trip).
//! - `redis_send_only`: the sender alone (64 tasks, no workers), against the pipelined floor.
//! - `redis_always_64`: 64 concurrent senders on a server with `appendonly yes`,
//!   `appendfsync always`, msgs/s confirmed and handled; floor `redis-benchmark XADD` with 64
//!   clients on the same server; and the same sender alone (`redis_always_64_send_only`).
//!
//! It asserts no timing; CI does not run it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use event_base::backend::QueueFactory;
use event_base::{
    async_trait, Ack, EHandler, EMessage, EventBus, HandlerSpec, MessageTopic, NodeType,
    RedisQueueFactory,
};
use event_base_test::redis_server::RedisServer;

type Error = Box<dyn std::error::Error + Send + Sync>;

const PAYLOAD: usize = 256;
const STREAM: &str = "eb:{bench}:s:work";

// ---- roles (this binary run again as a child) ----

/// Counts handlings; with `latency`, records send → handler-start in microseconds from the
/// send time carried in the payload's first 16 bytes (the same machine's clock).
struct Count {
    n: Arc<AtomicU64>,
    latency: Option<mpsc::Sender<u64>>,
}

#[async_trait]
impl EHandler for Count {
    async fn handler(&self, msg: &EMessage) -> Ack {
        if let Some(tx) = &self.latency {
            let p = &msg.payload.0;
            if p.len() >= 16 {
                let mut b = [0u8; 16];
                b.copy_from_slice(&p[..16]);
                let sent = u128::from_le_bytes(b);
                let now = now_nanos();
                let _ = tx.send((now.saturating_sub(sent) / 1000) as u64);
            }
        }
        self.n.fetch_add(1, Ordering::Relaxed);
        Ack::Ack
    }
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn wait_go() {
    let mut s = String::new();
    let _ = std::io::stdin().read_line(&mut s);
}

/// `__worker <url> <batch> <workers> <latency 0|1>`: prints `ready`, then `n <handled>` every
/// 20 ms while it changes, and with latency `lat <us>` lines when stdin says `report`.
async fn worker(args: &[String]) -> Result<(), Error> {
    let url = &args[0];
    let batch: usize = args[1].parse()?;
    let workers: usize = args[2].parse()?;
    let latency = args[3] == "1";
    let queue = RedisQueueFactory::connect(url).await?;
    let n = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    let handler = Count {
        n: n.clone(),
        latency: latency.then_some(tx),
    };
    let bus = EventBus::builder()
        .node_type(NodeType::Worker)
        .batch_size(batch)
        .wal(queue.wal())
        .queue(queue)
        .handler(HandlerSpec::new("work", "bench", handler).workers(workers))
        .build()
        .await?;
    say(format_args!("ready"));
    let reporter = tokio::spawn(async move {
        let mut last = 0;
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = n.load(Ordering::Relaxed);
            if now != last {
                say(format_args!("n {now}"));
                last = now;
            }
        }
    });
    // Until stdin says `report` (or closes).
    tokio::task::spawn_blocking(wait_go).await?;
    reporter.abort();
    let lat: Vec<u64> = rx.try_iter().collect();
    let mut out = std::io::stdout().lock();
    for l in lat {
        let _ = writeln!(out, "lat {l}");
    }
    let _ = writeln!(out, "end");
    let _ = out.flush();
    drop(out);
    drop(bus);
    Ok(())
}

/// `__sender <url> <n> <tasks> <rate per s, 0 = as fast as possible>`: prints `ready`, waits
/// for a line on stdin, sends, prints `sent <secs>`.
async fn sender(args: &[String]) -> Result<(), Error> {
    let url = &args[0];
    let n: u64 = args[1].parse()?;
    let tasks: u64 = args[2].parse::<u64>()?.max(1);
    let rate: u64 = args[3].parse()?;
    // Room for every message, so that a sender without workers never waits for acks.
    let bound = usize::try_from(n)?.max(event_base::redis::DEFAULT_BOUND);
    let queue = RedisQueueFactory::connect(url).await?.bound(bound);
    let producer = queue
        .create_subscription(&MessageTopic::from("bench"), "work")?
        .producer;
    say(format_args!("ready"));
    tokio::task::spawn_blocking(wait_go).await?;
    let started = Instant::now();
    let mut running = Vec::new();
    for t in 0..tasks {
        let producer = producer.clone();
        let share = n / tasks + u64::from(t < n % tasks);
        running.push(tokio::spawn(async move {
            let mut tick = (rate > 0).then(|| {
                let mut i =
                    tokio::time::interval(Duration::from_secs_f64(tasks as f64 / rate as f64));
                i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                i
            });
            for _ in 0..share {
                if let Some(t) = tick.as_mut() {
                    t.tick().await;
                }
                let mut p = vec![7u8; PAYLOAD];
                p[..16].copy_from_slice(&now_nanos().to_le_bytes());
                producer
                    .send(Arc::new(EMessage::standard("bench", p)))
                    .await?;
            }
            Ok::<(), event_base::QueueError>(())
        }));
    }
    for r in running {
        r.await??;
    }
    say(format_args!("sent {:.3}", started.elapsed().as_secs_f64()));
    Ok(())
}

// ---- the parent ----

struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Proc {
    fn start(
        role: &str,
        args: &[String],
        index: usize,
        tx: &mpsc::Sender<(usize, String)>,
    ) -> Proc {
        let exe = std::env::current_exe().expect("this binary's path");
        let mut child = Command::new(exe)
            .arg(role)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a child process");
        let out = BufReader::new(child.stdout.take().expect("piped"));
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                if tx.send((index, line)).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Proc { child, stdin }
    }

    fn tell(&mut self, line: &str) {
        if let Some(s) = self.stdin.as_mut() {
            let _ = writeln!(s, "{line}");
            let _ = s.flush();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a run measured.
struct Run {
    secs: f64,
    send_secs: f64,
    handled: u64,
    latencies_us: Vec<u64>,
    /// `XLEN`s this process sent while waiting for the last acks (not the bus's).
    polls: u64,
}

/// The processes of a run.
#[derive(Clone, Copy)]
struct Setup {
    /// Messages to send.
    n: u64,
    /// Worker processes.
    worker_procs: usize,
    /// Claim batch of each.
    batch: usize,
    /// Workers (handler tasks) in each.
    workers: usize,
    /// Concurrent send tasks in the sender process.
    send_tasks: u64,
    /// Messages per second the sender paces itself to; 0: as fast as it can.
    rate: u64,
    /// Whether workers record latencies.
    latency: bool,
}

/// Starts the worker processes and one sender, sends `n`, and waits until all were handled
/// and acked (the stream is empty).
fn run(server: &RedisServer, setup: &Setup) -> Run {
    let Setup {
        n,
        worker_procs,
        batch,
        workers,
        send_tasks,
        rate,
        latency,
    } = *setup;
    let (tx, rx) = mpsc::channel();
    let mut procs = Vec::new();
    for i in 0..worker_procs {
        procs.push(Proc::start(
            "__worker",
            &[
                server.url(),
                batch.to_string(),
                workers.to_string(),
                if latency { "1" } else { "0" }.into(),
            ],
            i,
            &tx,
        ));
    }
    let s = worker_procs;
    procs.push(Proc::start(
        "__sender",
        &[
            server.url(),
            n.to_string(),
            send_tasks.to_string(),
            rate.to_string(),
        ],
        s,
        &tx,
    ));
    drop(tx);
    let mut ready = 0;
    while ready < worker_procs + 1 {
        let (_, line) = rx.recv().expect("children start");
        if line == "ready" {
            ready += 1;
        }
    }
    // Let the workers' first claims reach Redis (their groups exist), then reset the counts.
    std::thread::sleep(Duration::from_millis(300));
    server.query(&["CONFIG", "RESETSTAT"]);
    let started = Instant::now();
    procs[s].tell("go");
    let mut counts = vec![0u64; worker_procs];
    let mut send_secs = 0.0;
    loop {
        let (i, line) = rx.recv().expect("children report");
        if let Some(c) = line.strip_prefix("n ") {
            counts[i] = c.parse().unwrap_or(0);
        } else if let Some(t) = line.strip_prefix("sent ") {
            send_secs = t.parse().unwrap_or(0.0);
        }
        let finished = if worker_procs == 0 {
            send_secs > 0.0
        } else {
            counts.iter().sum::<u64>() >= n
        };
        if finished {
            break;
        }
    }
    if worker_procs == 0 {
        return Run {
            secs: started.elapsed().as_secs_f64(),
            send_secs,
            handled: n,
            latencies_us: Vec::new(),
            polls: 0,
        };
    }
    // Handled; now acked too.
    let mut polls = 0;
    while server.query(&["XLEN", STREAM]).as_int() != Some(0) {
        polls += 1;
        std::thread::sleep(Duration::from_millis(2));
    }
    let secs = started.elapsed().as_secs_f64();
    let latencies_us = latencies(&mut procs[..worker_procs], &rx);
    Run {
        secs,
        send_secs,
        handled: counts.iter().sum(),
        latencies_us,
        polls,
    }
}

/// Asks each worker process for its latencies and reads them.
fn latencies(workers: &mut [Proc], rx: &mpsc::Receiver<(usize, String)>) -> Vec<u64> {
    let worker_procs = workers.len();
    let mut latencies_us = Vec::new();
    for p in workers.iter_mut() {
        p.tell("report");
    }
    let mut ended = 0;
    while ended < worker_procs {
        let Ok((_, line)) = rx.recv_timeout(Duration::from_secs(10)) else {
            break;
        };
        if let Some(l) = line.strip_prefix("lat ") {
            latencies_us.push(l.parse().unwrap_or(0));
        } else if line == "end" {
            ended += 1;
        }
    }
    latencies_us
}

/// `INFO commandstats` as command → calls, without the benchmark's own probes.
fn commandstats(server: &RedisServer) -> HashMap<String, u64> {
    let text = server.command(&["INFO", "commandstats"]);
    let mut out = HashMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let calls = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let base = name.split('|').next().unwrap_or(name);
        if !matches!(base, "info" | "config" | "ping") {
            out.insert(name.to_owned(), calls);
        }
    }
    out
}

/// `redis-benchmark` against `server`: requests per second and p50/p99 in ms (from its CSV).
fn redis_benchmark(server: &RedisServer, n: u64, clients: u32, pipeline: u32) -> (f64, f64, f64) {
    let payload = "x".repeat(PAYLOAD);
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p"])
        .arg(server.port().to_string())
        .args(["-n", &n.to_string(), "-c", &clients.to_string()])
        .args(["-P", &pipeline.to_string(), "--csv"])
        .args(["XADD", "floor", "*", "f", &payload])
        .output()
        .expect("run redis-benchmark");
    let text = String::from_utf8_lossy(&out.stdout);
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    let row = text.lines().last().unwrap_or_default();
    let cols: Vec<f64> = row
        .split(',')
        .skip(1)
        .map(|c| c.trim_matches('"').parse().unwrap_or(0.0))
        .collect();
    server.query(&["DEL", "floor"]);
    (
        cols.first().copied().unwrap_or(0.0),
        cols.get(3).copied().unwrap_or(0.0),
        cols.get(5).copied().unwrap_or(0.0),
    )
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64
}

fn installed(bin: &str) -> bool {
    Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

struct Plan {
    quick: bool,
    only: Option<String>,
}

impl Plan {
    fn runs(&self, name: &str) -> bool {
        self.only
            .as_deref()
            .is_none_or(|o| name.starts_with(o) || o == "redis")
    }
}

fn e2e(plan: &Plan) {
    let server = RedisServer::start();
    let n = if plan.quick { 5_000 } else { 200_000 };
    let (floor8, _, _) = redis_benchmark(&server, n, 8, 1);
    let (floor8p, _, _) = redis_benchmark(&server, n * 5, 8, 32);
    let r = run(
        &server,
        &Setup {
            n,
            worker_procs: 2,
            batch: 64,
            workers: 4,
            send_tasks: 64,
            rate: 0,
            latency: false,
        },
    );
    let mut stats = commandstats(&server);
    if let Some(x) = stats.get_mut("xlen") {
        *x = x.saturating_sub(r.polls);
    }
    let total: u64 = stats.values().sum();
    let mut parts: Vec<(&String, &u64)> = stats.iter().collect();
    parts.sort_by(|a, b| b.1.cmp(a.1));
    let per = |c: u64| c as f64 / r.handled.max(1) as f64;
    let breakdown: Vec<String> = parts
        .iter()
        .map(|(k, v)| format!("{k}={:.2}", per(**v)))
        .collect();
    let rate = r.handled as f64 / r.secs;
    println!(
        "scenario=redis_e2e msgs={} secs={:.3} msgs_per_sec={rate:.0} send_secs={:.3} floor_xadd_c8={floor8:.0} floor_xadd_c8_p32={floor8p:.0} ratio_c8={:.2} target_msgs_per_sec=30000",
        r.handled,
        r.secs,
        r.send_secs,
        rate / floor8.max(1.0),
    );
    // What the processes sent, as against what ran in Redis (scripts' own calls included).
    let client: u64 = ["evalsha", "xreadgroup", "xautoclaim", "xgroup|create"]
        .iter()
        .filter_map(|c| stats.get(*c))
        .sum();
    println!(
        "scenario=redis_e2e_commands server_cmds_per_msg={:.2} client_cmds_per_msg={:.2} ({}) target=3+2/batch",
        per(total),
        per(client),
        breakdown.join(" ")
    );
    let s = run(
        &server,
        &Setup {
            n,
            worker_procs: 0,
            batch: 64,
            workers: 4,
            send_tasks: 64,
            rate: 0,
            latency: false,
        },
    );
    server.query(&["DEL", STREAM]);
    let rate = n as f64 / s.send_secs.max(1e-9);
    println!(
        "scenario=redis_send_only msgs={n} secs={:.3} msgs_per_sec={rate:.0} floor_xadd_c8_p32={floor8p:.0} ratio={:.2} (64 send tasks, no workers)",
        s.send_secs,
        rate / floor8p.max(1.0),
    );
}

fn latency(plan: &Plan) {
    let server = RedisServer::start();
    let n = if plan.quick { 500 } else { 10_000 };
    let (_, f50, f99) = redis_benchmark(&server, 20_000, 1, 1);
    let r = run(
        &server,
        &Setup {
            n,
            worker_procs: 2,
            batch: 64,
            workers: 4,
            send_tasks: 4,
            rate: 1_000,
            latency: true,
        },
    );
    let mut l = r.latencies_us;
    l.sort_unstable();
    println!(
        "scenario=redis_latency msgs={} rate_per_sec=1000 p50_us={:.0} p99_us={:.0} floor_xadd_c1_p50_us={:.0} floor_xadd_c1_p99_us={:.0} target_p99_us=5000",
        l.len(),
        percentile(&l, 0.50),
        percentile(&l, 0.99),
        f50 * 1000.0,
        f99 * 1000.0,
    );
}

fn always_64(plan: &Plan) {
    let server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let n = if plan.quick { 2_000 } else { 40_000 };
    let (floor64, _, _) = redis_benchmark(&server, n, 64, 1);
    let r = run(
        &server,
        &Setup {
            n,
            worker_procs: 2,
            batch: 64,
            workers: 4,
            send_tasks: 64,
            rate: 0,
            latency: false,
        },
    );
    let s = run(
        &server,
        &Setup {
            n,
            worker_procs: 0,
            batch: 64,
            workers: 4,
            send_tasks: 64,
            rate: 0,
            latency: false,
        },
    );
    server.query(&["DEL", STREAM]);
    // The same floor again: the server (its AOF grown, maybe rewriting) may be slower now.
    let (floor64_after, _, _) = redis_benchmark(&server, n, 64, 1);
    let info = server.command(&["INFO", "persistence"]);
    let rewrites = info
        .lines()
        .find_map(|l| l.strip_prefix("aof_rewrites:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    println!(
        "scenario=redis_always_64_send_only msgs={n} secs={:.3} msgs_per_sec={:.0} floor_xadd_c64={floor64:.0} ratio={:.2} floor_xadd_c64_after={floor64_after:.0} aof_rewrites={rewrites} (no workers, after the run with workers)",
        s.send_secs,
        n as f64 / s.send_secs.max(1e-9),
        n as f64 / s.send_secs.max(1e-9) / floor64.max(1.0),
    );
    let rate = r.handled as f64 / r.secs;
    println!(
        "scenario=redis_always_64 msgs={} secs={:.3} msgs_per_sec={rate:.0} send_msgs_per_sec={:.0} floor_xadd_c64={floor64:.0} ratio={:.2} target_msgs_per_sec=5000",
        r.handled,
        r.secs,
        r.handled as f64 / r.send_secs.max(1e-9),
        rate / floor64.max(1.0),
    );
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(role) = args.first().filter(|a| a.starts_with("__")) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        return match role.as_str() {
            "__worker" => rt.block_on(worker(&args[1..])),
            "__sender" => rt.block_on(sender(&args[1..])),
            _ => Err(format!("unknown role {role}").into()),
        };
    }
    let plan = Plan {
        quick: args.iter().any(|a| a == "--quick"),
        only: args
            .iter()
            .position(|a| a == "--only")
            .and_then(|i| args.get(i + 1).cloned()),
    };
    for bin in ["redis-server", "redis-benchmark"] {
        if !installed(bin) {
            println!("redis_throughput: `{bin}` is not installed; skipping every Redis scenario (apt-get install redis-server)");
            return Ok(());
        }
    }
    if plan.runs("redis_e2e") {
        e2e(&plan);
    }
    if plan.runs("redis_latency") {
        latency(&plan);
    }
    if plan.runs("redis_always_64") {
        always_64(&plan);
    }
    Ok(())
}
