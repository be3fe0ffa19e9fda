//! Throughput and latency of the bus beside its floor, measured in the same run.
//!
//! `cargo run --release -p event_base_test --bin throughput [-- --quick] [-- --only NAME]`
//!
//! Each scenario prints one line:
//! `scenario=<name> msgs=<n> secs=<t> msgs_per_sec=<r> floor_msgs_per_sec=<f> ratio=<r/f>`
//! plus latency percentiles where relevant, and `target_…=` fields where issue 14 sets a
//! target for the figure beside it (a ratio, or a count), so a line says whether it is met.
//! The floor is what the same work costs without
//! the bus: a bare bounded `flume` channel feeding the same number of consumer tasks for the
//! memory path, a raw `write` + `fdatasync` loop on the same disk for the durable path. These
//! machines are shared and noisy, so only ratios from one run are comparable.
//!
//! `--quick` runs every scenario with small counts so CI keeps the binary working; it asserts
//! no timing.

#![allow(unsafe_code)] // the counting allocator below; see `CountingAlloc`

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use event_base::backend::{Wal, WalCommit, WalRecord, WalStats};
use event_base::{
    async_trait, Ack, Bytes, DeadLetterMessage, DeadReason, EHandler, EMessage, EventBus,
    FlumeQueueFactory, HandlerSpec, MemoryWal, PersistentWal, SyncPolicy, TopicRouter, WalError,
};
use tokio::sync::Notify;

/// Counts heap allocations so the report can say how many a message costs. Measured reason
/// for `unsafe`: `GlobalAlloc` can only be implemented with `unsafe`; the impl forwards to the
/// system allocator unchanged.
struct CountingAlloc;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const PAYLOAD: usize = 64;
const WORKERS: usize = 4;
const BOUND: usize = 8192;

/// Counts deliveries and wakes the benchmark when the target is reached.
struct Counter {
    seen: AtomicU64,
    target: AtomicU64,
    done: Notify,
}

impl Counter {
    fn new(target: u64) -> Arc<Counter> {
        Arc::new(Counter {
            seen: AtomicU64::new(0),
            target: AtomicU64::new(target),
            done: Notify::new(),
        })
    }

    fn hit(&self) {
        if self.seen.fetch_add(1, Ordering::Relaxed) + 1 == self.target.load(Ordering::Relaxed) {
            self.done.notify_one();
        }
    }

    fn reset(&self, target: u64) {
        self.seen.store(0, Ordering::Relaxed);
        self.target.store(target, Ordering::Relaxed);
    }
}

#[async_trait]
impl EHandler for Counter {
    async fn handler(&self, _msg: &EMessage) -> Ack {
        self.hit();
        Ack::Ack
    }
}

fn payload(len: usize) -> Bytes {
    Bytes::from(vec![7u8; len])
}

/// Allocations per message that building it (`EMessage::standard`, as `send_one` does)
/// makes alone, so the memory path can say what the bus adds beyond them.
fn new_allocs_per_msg(n: u64) -> f64 {
    let data = payload(PAYLOAD);
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..n {
        std::hint::black_box(EMessage::standard("bench", data.clone()));
    }
    (ALLOCS.load(Ordering::Relaxed) - before) as f64 / n as f64
}

/// Allocations per call that the benchmark's handler makes by itself: the boxed future every
/// `#[async_trait]` method returns (`EHandler::handler`'s signature), counted by calling it
/// outside the bus. Part of what `bus_allocs_per_msg` counts, shown apart so a reader can tell
/// the bus's own allocations from the handler trait's.
fn handler_allocs_per_msg(n: u64) -> f64 {
    let counter = Counter::new(u64::MAX);
    let msg = EMessage::standard("bench", payload(PAYLOAD));
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..n {
        drop(std::hint::black_box(counter.handler(&msg)));
    }
    (ALLOCS.load(Ordering::Relaxed) - before) as f64 / n as f64
}

/// Sends one benchmark message carrying `data` (shared, never copied), waiting for room.
async fn send_one(router: &TopicRouter, topic: &str, data: &Bytes) {
    router
        .send(topic, EMessage::standard(topic, data.clone()), None, None)
        .await
        .unwrap();
}

/// Where the sending loop runs.
#[derive(Clone, Copy, PartialEq)]
enum SendFrom {
    /// The thread blocked on the runtime (`block_on`).
    MainThread,
    /// A task of the runtime, as in most applications.
    Task,
}

/// Bare flume: one sender, `WORKERS` consumer tasks. Returns seconds.
async fn flume_floor(n: u64, len: usize, from: SendFrom) -> f64 {
    let (tx, rx) = flume::bounded::<Bytes>(BOUND);
    let counter = Counter::new(n);
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let rx = rx.clone();
        let c = counter.clone();
        tasks.push(tokio::spawn(async move {
            while let Ok(m) = rx.recv_async().await {
                std::hint::black_box(&m);
                c.hit();
            }
        }));
    }
    let data = payload(len);
    let started = Instant::now();
    let done = counter.done.notified();
    tokio::pin!(done);
    done.as_mut().enable();
    let send_all = async move {
        for _ in 0..n {
            tx.send_async(data.clone()).await.unwrap();
        }
    };
    match from {
        SendFrom::MainThread => send_all.await,
        SendFrom::Task => tokio::spawn(send_all).await.unwrap(),
    }
    done.await;
    let secs = started.elapsed().as_secs_f64();
    for t in tasks {
        let _ = t.await;
    }
    secs
}

async fn memory_bus(counter: &Arc<Counter>, topics: usize) -> EventBus {
    memory_bus_with(counter, topics, Observe::Default).await
}

/// How much observability a scenario turns on.
#[derive(Clone, Copy, PartialEq)]
enum Observe {
    /// The defaults: counters, latency histograms and the audit ring.
    Default,
    /// The defaults but the audit ring (`audit(0)`).
    NoAudit,
    /// Counters only: no latency histograms, no audit.
    Off,
}

/// A WAL that records nothing, only to measure what the real one costs (scenario
/// `memory_path_no_wal`). Not something the bus offers: without a log, nothing an accepted
/// send promised survives a failure.
struct NoWal;

#[async_trait]
impl Wal for NoWal {
    fn append(&self, _: &Arc<EMessage>) -> Result<WalCommit, WalError> {
        Ok(WalCommit::durable())
    }
    fn begin(&self, _: &str) -> Result<bool, WalError> {
        Ok(true)
    }
    fn complete(&self, _: &str) -> Result<(), WalError> {
        Ok(())
    }
    fn retry(&self, _: &Arc<EMessage>) -> Result<(), WalError> {
        Ok(())
    }
    fn append_unique(&self, _: &Arc<EMessage>) -> Result<Option<WalCommit>, WalError> {
        Ok(Some(WalCommit::durable()))
    }
    fn fail(&self, _: &Arc<EMessage>, _: &DeadReason, _: &[String]) -> Result<(), WalError> {
        Ok(())
    }
    fn cancel(&self, _: &str) -> Result<Option<WalCommit>, WalError> {
        Ok(None)
    }
    async fn pending(&self) -> Result<Vec<WalRecord>, WalError> {
        Ok(Vec::new())
    }
    async fn dead_letters(&self) -> Result<Vec<DeadLetterMessage>, WalError> {
        Ok(Vec::new())
    }
    async fn take_dead_letter(&self, _: &str) -> Result<Option<DeadLetterMessage>, WalError> {
        Ok(None)
    }
    async fn purge_dead_letters(&self) -> Result<usize, WalError> {
        Ok(0)
    }
    async fn flush(&self) -> Result<(), WalError> {
        Ok(())
    }
    fn stats(&self) -> WalStats {
        WalStats::default()
    }
}

async fn memory_bus_with(counter: &Arc<Counter>, topics: usize, observe: Observe) -> EventBus {
    memory_bus_on(MemoryWal::new(), counter, topics, observe).await
}

async fn memory_bus_on(
    wal: impl Wal,
    counter: &Arc<Counter>,
    topics: usize,
    observe: Observe,
) -> EventBus {
    let mut b = EventBus::builder()
        .wal(wal)
        .queue(FlumeQueueFactory::bounded(BOUND))
        .topic_log(topic_log())
        .latency_metrics(observe != Observe::Off);
    if observe != Observe::Default {
        b = b.audit(0);
    }
    // For measuring what idempotent sends cost: `EB_BENCH_DEDUP_OFF=1` turns the window off.
    if std::env::var_os("EB_BENCH_DEDUP_OFF").is_some() {
        b = b.dedup_window(Duration::ZERO);
    }
    if topics == 1 {
        b = b.handler(HandlerSpec::new("bench", "bench", counter.clone()).workers(WORKERS));
    } else {
        for t in 0..topics {
            b = b.handler(HandlerSpec::new(
                format!("h{t}"),
                format!("t{t}"),
                counter.clone(),
            ));
        }
    }
    b.build().await.unwrap()
}

/// Sends `n` messages from one sender over `topics` topics; returns (seconds, allocations).
async fn drive(
    bus: &EventBus,
    counter: &Arc<Counter>,
    n: u64,
    len: usize,
    topics: usize,
) -> (f64, u64) {
    drive_from(bus, counter, n, len, topics, SendFrom::MainThread).await
}

/// [`drive`], with the sending loop run `from` the main thread or a task.
async fn drive_from(
    bus: &EventBus,
    counter: &Arc<Counter>,
    n: u64,
    len: usize,
    topics: usize,
    from: SendFrom,
) -> (f64, u64) {
    counter.reset(n);
    let names: Vec<String> = if topics == 1 {
        vec!["bench".into()]
    } else {
        (0..topics).map(|t| format!("t{t}")).collect()
    };
    let router = bus.router();
    let data = payload(len);
    let done = counter.done.notified();
    tokio::pin!(done);
    done.as_mut().enable();
    let allocs = ALLOCS.load(Ordering::Relaxed);
    let started = Instant::now();
    let send_all = async move {
        for i in 0..n as usize {
            let topic = &names[i % names.len()];
            send_one(&router, topic, &data).await;
        }
    };
    match from {
        SendFrom::MainThread => send_all.await,
        SendFrom::Task => tokio::spawn(send_all).await.unwrap(),
    }
    done.await;
    let secs = started.elapsed().as_secs_f64();
    let allocs = ALLOCS.load(Ordering::Relaxed) - allocs;
    bus.wait_idle(Duration::from_secs(60)).await.unwrap();
    (secs, allocs)
}

/// The best (fastest) of several runs, and the CPU time it took.
#[derive(Default)]
struct Best {
    secs: f64,
    cpu: Duration,
}

impl Best {
    fn add(&mut self, secs: f64, cpu: Duration) {
        if self.secs == 0.0 || secs < self.secs {
            self.secs = secs;
            self.cpu = cpu;
        }
    }
}

fn line(name: &str, n: u64, secs: f64, floor_rate: f64, extra: &str) -> f64 {
    let rate = n as f64 / secs;
    println!(
        "scenario={name} msgs={n} secs={secs:.3} msgs_per_sec={rate:.0} floor_msgs_per_sec={floor_rate:.0} ratio={:.2}{extra}",
        rate / floor_rate
    );
    let _ = std::io::stdout().flush();
    rate
}

fn percentiles(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    let p = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    (p(0.50), p(0.99))
}

/// One message at a time through a bare channel to a consumer task, which answers through a
/// `Notify`: the floor of the latency scenario.
struct LatencyFloor {
    tx: flume::Sender<Bytes>,
    back: Arc<Notify>,
    data: Bytes,
}

impl LatencyFloor {
    fn new() -> LatencyFloor {
        let (tx, rx) = flume::bounded::<Bytes>(BOUND);
        let back = Arc::new(Notify::new());
        let b = back.clone();
        tokio::spawn(async move {
            while let Ok(m) = rx.recv_async().await {
                std::hint::black_box(&m);
                b.notify_one();
            }
        });
        LatencyFloor {
            tx,
            back,
            data: payload(PAYLOAD),
        }
    }

    async fn round_trip(&self) -> Duration {
        let started = Instant::now();
        self.tx.send_async(self.data.clone()).await.unwrap();
        self.back.notified().await;
        started.elapsed()
    }
}

/// One message through the bus, from `send` to its handler.
async fn bus_round_trip(bus: &EventBus, counter: &Counter, i: u64, data: &Bytes) -> Duration {
    counter.reset(i + 1);
    counter.seen.store(i, Ordering::Relaxed);
    let done = counter.done.notified();
    tokio::pin!(done);
    done.as_mut().enable();
    let started = Instant::now();
    send_one(&bus.router(), "bench", data).await;
    done.await;
    started.elapsed()
}

/// Raw `write` + `fdatasync` of a 128-byte record, one at a time, on the WAL's disk.
fn fsync_floor(dir: &std::path::Path, secs: f64) -> f64 {
    let path = dir.join("floor.bin");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let rec = [1u8; 128];
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed().as_secs_f64() < secs {
        f.write_all(&rec).unwrap();
        f.sync_data().unwrap();
        n += 1;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    rate
}

/// One durable run: wall time, CPU time of every thread, and `fdatasync` calls made.
struct DurableRun {
    secs: f64,
    cpu: Duration,
    syncs: u64,
}

/// `senders` tasks each sending `per_sender` messages through a `PersistentWal` bus
/// (`overlap`: with `overlap_syncs(true)`).
async fn durable(policy: SyncPolicy, overlap: bool, senders: usize, per_sender: u64) -> DurableRun {
    let dir = tempdir();
    let counter = Counter::new(senders as u64 * per_sender);
    let mut wal = PersistentWal::builder(&dir)
        .sync_policy(policy)
        .overlap_syncs(overlap);
    // `EB_BENCH_WRITER_SPIN_US=n` sets `writer_spin` (default: the builder's), so one binary
    // can compare spins in one sitting.
    if let Some(us) = std::env::var("EB_BENCH_WRITER_SPIN_US")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        wal = wal.writer_spin(Duration::from_micros(us));
    }
    let bus = EventBus::builder()
        .wal(wal.open().unwrap())
        .queue(FlumeQueueFactory::bounded(BOUND))
        .handler(HandlerSpec::new("bench", "bench", counter.clone()).workers(WORKERS))
        .build()
        .await
        .unwrap();
    let data = payload(PAYLOAD);
    let syncs_before = bus.wal_stats().syncs;
    let cpu = CpuMark::now();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..senders {
        let router = bus.router();
        let data = data.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..per_sender {
                send_one(&router, "bench", &data).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu = cpu.since();
    let syncs = bus.wal_stats().syncs - syncs_before;
    bus.wait_idle(Duration::from_secs(60)).await.unwrap();
    drop(bus);
    let _ = std::fs::remove_dir_all(&dir);
    DurableRun { secs, cpu, syncs }
}

fn tempdir() -> std::path::PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let base = std::env::var_os("EB_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::current_dir().unwrap().join("target"));
    let dir = base.join(format!(
        "eb-bench-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The CPU time each thread of this process has run so far (Linux
/// `/proc/self/task/*/schedstat`, in ns), to measure a stretch of a run with [`CpuMark::since`].
/// Kept per thread because threads come and go during a run (the runtime's blocking pool
/// retires idle threads): a plain sum would drop an exited thread's whole time and could go
/// backwards.
struct CpuMark(Vec<(u64, u64)>);

impl CpuMark {
    fn now() -> Self {
        let threads = std::fs::read_dir("/proc/self/task")
            .map(|tasks| {
                tasks
                    .filter_map(|t| {
                        let t = t.ok()?;
                        let tid = t.file_name().to_str()?.parse::<u64>().ok()?;
                        let text = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
                        Some((tid, text.split_whitespace().next()?.parse::<u64>().ok()?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        CpuMark(threads)
    }

    /// CPU time run since this mark by the threads alive now: each one's time since the mark,
    /// or all of it for a thread started since. (A thread that ended in between is missed:
    /// so far only idle pool threads end mid-run.)
    fn since(&self) -> Duration {
        let ns: u64 = CpuMark::now()
            .0
            .iter()
            .map(|&(tid, ns)| {
                let before = self
                    .0
                    .iter()
                    .find(|&&(t, _)| t == tid)
                    .map_or(0, |&(_, b)| b);
                ns.saturating_sub(before)
            })
            .sum();
        Duration::from_nanos(ns)
    }
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// CPU time this thread has run, in seconds (Linux `/proc/thread-self/schedstat`; 0
/// elsewhere): the open's own cost, apart from the time other processes took the cores.
fn thread_cpu_secs() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0.0, |ns| ns as f64 / 1e9)
}

/// Which scenarios to run and at what size, from the command line (`--quick`, `--only NAME`).
struct Opts {
    quick: bool,
    only: Option<String>,
    /// `--peers DIR`: where the peer programs' binaries are (scenario group `peers`).
    peers: Option<std::path::PathBuf>,
}

impl Opts {
    fn from_args() -> Opts {
        let args: Vec<String> = std::env::args().collect();
        Opts {
            quick: args.iter().any(|a| a == "--quick"),
            only: args
                .iter()
                .position(|a| a == "--only")
                .and_then(|i| args.get(i + 1).cloned()),
            peers: args
                .iter()
                .position(|a| a == "--peers")
                .and_then(|i| args.get(i + 1).map(std::path::PathBuf::from)),
        }
    }

    /// Whether scenario `name` runs: `--only wal` runs every durable scenario;
    /// `--only wal_always_64` runs that one (and the blocks that lead to it).
    fn run(&self, name: &str) -> bool {
        self.only
            .as_deref()
            .is_none_or(|o| name.starts_with(o) || o.starts_with(name))
    }

    /// `full` normally, `q` with `--quick`.
    fn scale(&self, full: u64, q: u64) -> u64 {
        if self.quick {
            q
        } else {
            full
        }
    }
}

fn main() {
    let opts = Opts::from_args();
    if let Some(child) = BacklogChild::from_args() {
        child.run();
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let n = opts.scale(1_000_000, 20_000);
        if opts.run("memory") {
            memory_path(&opts, n).await;
        }
        if opts.run("observability") {
            observability(&opts).await;
        }
        if opts.run("topics") {
            topics(&opts, n).await;
        }
        if opts.run("payload") {
            payload_64k(&opts).await;
        }
        if opts.run("latency") {
            latency(&opts).await;
        }
        if opts.run("wal") {
            wal_policies(&opts).await;
        }
        if opts.run("wal") || opts.run("send_batch") {
            send_batch(&opts).await;
        }
        if opts.run("idle") {
            idle(&opts).await;
        }
        if opts.run("memory_flat") {
            memory_flat(&opts).await;
        }
        if opts.run("fan_out") {
            fan_out(&opts).await;
        }
        if opts.run("competing") {
            competing(&opts).await;
        }
        if opts.run("keyed") {
            keyed(&opts).await;
        }
        if opts.run("peers") {
            peers(&opts).await;
        }
    });
    // Its own processes: resident memory after an open must not count what writing cost.
    if opts.run("backlog") {
        backlog(&opts);
    }
}

/// The single-topic memory path against bare flume, with and without a WAL, and with the
/// sender as a task.
async fn memory_path(opts: &Opts, n: u64) {
    // Warm up every path once, then take the best of a few interleaved rounds: on a
    // shared machine other load only ever slows a run down.
    flume_floor(n / 10, PAYLOAD, SendFrom::MainThread).await;
    let counter = Counter::new(0);
    // At least two queues' worth: a burst the size of a queue fills the message pool, whose
    // allocations the measured rounds then reuse as a long-running bus does.
    let warm = (n / 10).max(2 * BOUND as u64);
    let bus = memory_bus(&counter, 1).await;
    drive(&bus, &counter, warm, PAYLOAD, 1).await;
    let no_wal = memory_bus_on(NoWal, &counter, 1, Observe::Default).await;
    drive(&no_wal, &counter, warm, PAYLOAD, 1).await;

    // CPU time (all threads) per message beside wall time: it shows what the bus
    // costs even where a spare core hides it.
    let mut floor = Best::default();
    let mut with_wal = Best::default();
    let mut without_wal = Best::default();
    let mut allocs = 0;
    for _ in 0..opts.scale(3, 1) {
        let cpu = CpuMark::now();
        let secs = flume_floor(n, PAYLOAD, SendFrom::MainThread).await;
        floor.add(secs, cpu.since());
        let cpu = CpuMark::now();
        let (secs, a) = drive(&bus, &counter, n, PAYLOAD, 1).await;
        with_wal.add(secs, cpu.since());
        allocs = a;
        let cpu = CpuMark::now();
        let (secs, _) = drive(&no_wal, &counter, n, PAYLOAD, 1).await;
        without_wal.add(secs, cpu.since());
    }
    // The same with the sender as a runtime task: sender and workers then share the
    // runtime's two threads, and a hand-off to a task on the same thread needs no
    // wake-up at all.
    let (mut task_floor, mut task_bus) = (Best::default(), Best::default());
    for _ in 0..opts.scale(3, 1) {
        task_floor.add(
            flume_floor(n, PAYLOAD, SendFrom::Task).await,
            Duration::ZERO,
        );
        task_bus.add(
            drive_from(&bus, &counter, n, PAYLOAD, 1, SendFrom::Task)
                .await
                .0,
            Duration::ZERO,
        );
    }
    drop(no_wal);
    let floor_rate = n as f64 / floor.secs;
    let cpu_ns = |d: Duration| d.as_nanos() as f64 / n as f64;
    let allocs = allocs as f64 / n as f64;
    // The count per message does not vary: a few thousand say it, and keep it out of the
    // instruction counts of the run.
    let new_allocs = new_allocs_per_msg(2_000);
    let handler_allocs = handler_allocs_per_msg(2_000);
    line(
        "memory_path",
        n,
        with_wal.secs,
        floor_rate,
        &format!(
            " allocs_per_msg={allocs:.2} new_allocs_per_msg={new_allocs:.2} bus_allocs_per_msg={:.2} target_bus_allocs_per_msg=1 handler_future_allocs_per_msg={handler_allocs:.2} cpu_ns_per_msg={:.0} floor_cpu_ns_per_msg={:.0}",
            allocs - new_allocs,
            cpu_ns(with_wal.cpu),
            cpu_ns(floor.cpu)
        ),
    );
    line(
        "memory_path_no_wal",
        n,
        without_wal.secs,
        floor_rate,
        &format!(
            " cpu_ns_per_msg={:.0} (diagnostic: a WAL that records nothing)",
            cpu_ns(without_wal.cpu)
        ),
    );
    line(
        "memory_path_task_sender",
        n,
        task_bus.secs,
        n as f64 / task_floor.secs,
        " floor=bare_flume_task_sender",
    );
}

/// Sends `n` messages to the one-topic memory bus, each with the key `keys[i % len]` (the
/// key text cloned into the message, as an application's `with_key(id.clone())` does), or
/// none; returns the seconds until all were handled.
async fn drive_keyed(bus: &EventBus, counter: &Arc<Counter>, n: u64, keys: &[String]) -> f64 {
    counter.reset(n);
    let router = bus.router();
    let data = payload(PAYLOAD);
    let done = counter.done.notified();
    tokio::pin!(done);
    done.as_mut().enable();
    let started = Instant::now();
    for i in 0..n as usize {
        let mut msg = EMessage::standard("bench", data.clone());
        if !keys.is_empty() {
            msg = msg.with_key(keys[i % keys.len()].clone());
        }
        router.send("bench", msg, None, None).await.unwrap();
    }
    done.await;
    let secs = started.elapsed().as_secs_f64();
    bus.wait_idle(Duration::from_secs(60)).await.unwrap();
    secs
}

/// Order per key (issue 34): the memory path with every message keyed (1,000 keys, 4
/// workers) against the same bus with no keys, in interleaved rounds.
async fn keyed(opts: &Opts) {
    let n = opts.scale(500_000, 10_000);
    let counter = Counter::new(0);
    let bus = memory_bus(&counter, 1).await;
    let keys: Vec<String> = (0..1000).map(|k| format!("customer-{k}")).collect();
    drive_keyed(&bus, &counter, n / 10, &[]).await;
    drive_keyed(&bus, &counter, n / 10, &keys).await;
    let (mut plain, mut with_keys) = (Best::default(), Best::default());
    for _ in 0..opts.scale(5, 1) {
        let cpu = CpuMark::now();
        plain.add(drive_keyed(&bus, &counter, n, &[]).await, cpu.since());
        let cpu = CpuMark::now();
        with_keys.add(drive_keyed(&bus, &counter, n, &keys).await, cpu.since());
    }
    let cpu_ns = |d: Duration| d.as_nanos() as f64 / n as f64;
    line(
        "keyed_1000_keys",
        n,
        with_keys.secs,
        n as f64 / plain.secs,
        &format!(
            " floor=same_bus_unkeyed_same_rounds target_ratio=0.8 cpu_ns_per_msg={:.0} floor_cpu_ns_per_msg={:.0}",
            cpu_ns(with_keys.cpu),
            cpu_ns(plain.cpu)
        ),
    );
}

/// The defaults (audit ring and latency histograms on) against the audit ring off, and
/// against both off.
async fn observability(opts: &Opts) {
    let m = opts.scale(500_000, 10_000);
    let counter = Counter::new(0);
    let off = memory_bus_with(&counter, 1, Observe::Off).await;
    let no_audit = memory_bus_with(&counter, 1, Observe::NoAudit).await;
    let all = memory_bus_with(&counter, 1, Observe::Default).await;
    for bus in [&off, &no_audit, &all] {
        drive(bus, &counter, m / 10, PAYLOAD, 1).await;
    }
    // Interleaved rounds, best of each.
    let (mut off_best, mut no_audit_best, mut all_best) =
        (Best::default(), Best::default(), Best::default());
    let mut allocs = 0;
    for _ in 0..opts.scale(5, 1) {
        off_best.add(drive(&off, &counter, m, PAYLOAD, 1).await.0, Duration::ZERO);
        no_audit_best.add(
            drive(&no_audit, &counter, m, PAYLOAD, 1).await.0,
            Duration::ZERO,
        );
        let (secs, a) = drive(&all, &counter, m, PAYLOAD, 1).await;
        all_best.add(secs, Duration::ZERO);
        allocs = a;
    }
    line(
        "audit_default",
        m,
        all_best.secs,
        m as f64 / no_audit_best.secs,
        &format!(
            " floor=audit_off allocs_per_msg={:.2} target_ratio=0.85",
            allocs as f64 / m as f64
        ),
    );
    line(
        "audit_metrics_on",
        m,
        all_best.secs,
        m as f64 / off_best.secs,
        " floor=audit_metrics_off",
    );
}

/// 1,000 topics against the single-topic memory path, in interleaved rounds: each round
/// drives the one-topic bus and then the 1,000-topic bus, and each reports its best, so both
/// see the same machine.
///
/// For profiling (`docs/benchmarks.md`, sixth round): `EB_BENCH_TOPICS_MSGS=n` sets both
/// shapes' counts (so two runs of different sizes cancel start-up and warm-up),
/// `EB_BENCH_TOPICS_SHAPE=x1` or `fan_out4` runs one shape, and `EB_BENCH_TOPICS_SIDE=one` or
/// `many` drives only the one-topic or only the 1,000-topic bus (its line then has no ratio).
async fn topics(opts: &Opts, n: u64) {
    let env = |name: &str| std::env::var(name).ok();
    let sized = env("EB_BENCH_TOPICS_MSGS").and_then(|v| v.parse::<u64>().ok());
    let shape = env("EB_BENCH_TOPICS_SHAPE");
    let side = env("EB_BENCH_TOPICS_SIDE");
    let runs = |s: &str| shape.as_deref().is_none_or(|x| x == s);
    let (drive_one, drive_many) = match side.as_deref() {
        Some("one") => (true, false),
        Some("many") => (false, true),
        _ => (true, true),
    };
    let counter = Counter::new(0);
    if runs("x1") {
        let n = sized.unwrap_or(n);
        let reference = memory_bus(&counter, 1).await;
        let bus = memory_bus(&counter, 1000).await;
        if drive_one {
            drive(&reference, &counter, n / 10, PAYLOAD, 1).await;
        }
        if drive_many {
            drive(&bus, &counter, n / 10, PAYLOAD, 1000).await;
        }
        let (mut one, mut many) = (Best::default(), Best::default());
        for _ in 0..opts.scale(3, 1) {
            if drive_one {
                let secs = drive(&reference, &counter, n, PAYLOAD, 1).await.0;
                one.add(secs, Duration::ZERO);
            }
            if drive_many {
                let secs = drive(&bus, &counter, n, PAYLOAD, 1000).await.0;
                many.add(secs, Duration::ZERO);
            }
        }
        if drive_one && drive_many {
            line(
                "topics_1000x1",
                n,
                many.secs,
                n as f64 / one.secs,
                " floor=memory_path_same_rounds shape=one_handler_per_topic target_ratio=0.8",
            );
        } else {
            side_line("topics_1000x1", n, one.secs.max(many.secs), drive_one);
        }
        drop((reference, bus));
    }

    // The shape: 4 handlers on each topic, each receiving every message, over 1,000
    // topics (4,000 workers) against the same on one topic.
    if runs("fan_out4") {
        let m = sized.unwrap_or_else(|| opts.scale(200_000, 4_000));
        let one = fan_out_bus(&counter, 1).await;
        let many = fan_out_bus(&counter, 1000).await;
        if drive_one {
            drive_fan_out(&one, &counter, m / 10, 1, PAYLOAD).await;
        }
        if drive_many {
            drive_fan_out(&many, &counter, m / 10, 1000, PAYLOAD).await;
        }
        let (mut one_best, mut many_best) = (Best::default(), Best::default());
        for _ in 0..opts.scale(3, 1) {
            if drive_one {
                let secs = drive_fan_out(&one, &counter, m, 1, PAYLOAD).await;
                one_best.add(secs, Duration::ZERO);
            }
            if drive_many {
                let secs = drive_fan_out(&many, &counter, m, 1000, PAYLOAD).await;
                many_best.add(secs, Duration::ZERO);
            }
        }
        if drive_one && drive_many {
            fan_out_line(
                "topics_1000_fan_out4",
                m,
                many_best.secs,
                one_best.secs,
                " floor=fan_out4_one_topic_same_rounds target_ratio=0.8",
            );
        } else {
            let secs = one_best.secs.max(many_best.secs);
            side_line("topics_1000_fan_out4", m, secs, drive_one);
        }
    }
}

/// A topics scenario run with one side only (`EB_BENCH_TOPICS_SIDE`): its rate, no ratio.
fn side_line(name: &str, n: u64, secs: f64, one_topic: bool) {
    let side = if one_topic { "one" } else { "many" };
    println!(
        "scenario={name} msgs={n} secs={secs:.3} msgs_per_sec={:.0} side={side} (profiling run: no ratio)",
        n as f64 / secs
    );
    let _ = std::io::stdout().flush();
}

/// A fan-out scenario's line: deliveries per second (4 per message) against its floor's.
fn fan_out_line(name: &str, n: u64, secs: f64, floor_secs: f64, extra: &str) {
    let (rate, floor) = (4.0 * n as f64 / secs, 4.0 * n as f64 / floor_secs);
    println!(
        "scenario={name} msgs={n} secs={secs:.3} deliveries_per_sec={rate:.0} floor_deliveries_per_sec={floor:.0} ratio={:.2}{extra}",
        rate / floor
    );
    let _ = std::io::stdout().flush();
}

/// 64 KiB payloads against 64-byte ones on the same bus, in interleaved rounds.
async fn payload_64k(opts: &Opts) {
    let n64k = opts.scale(200_000, 5_000);
    let counter = Counter::new(0);
    let bus = memory_bus(&counter, 1).await;
    drive(&bus, &counter, n64k / 10, PAYLOAD, 1).await;
    drive(&bus, &counter, n64k / 10, 64 << 10, 1).await;
    let (mut small, mut large) = (Best::default(), Best::default());
    for _ in 0..opts.scale(3, 1) {
        small.add(
            drive(&bus, &counter, n64k, PAYLOAD, 1).await.0,
            Duration::ZERO,
        );
        large.add(
            drive(&bus, &counter, n64k, 64 << 10, 1).await.0,
            Duration::ZERO,
        );
    }
    line(
        "payload_64k",
        n64k,
        large.secs,
        n64k as f64 / small.secs,
        " floor=payload_64b_same_rounds shape=one_handler_4_workers target_ratio=0.9",
    );
    drop(bus);

    // The shape: 4 handlers each receiving every 64 KiB message (one shared buffer,
    // never copied) against the same with 64 bytes.
    let fan = fan_out_bus(&counter, 1).await;
    drive_fan_out(&fan, &counter, n64k / 10, 1, PAYLOAD).await;
    drive_fan_out(&fan, &counter, n64k / 10, 1, 64 << 10).await;
    let (mut small, mut large) = (Best::default(), Best::default());
    for _ in 0..opts.scale(3, 1) {
        let secs = drive_fan_out(&fan, &counter, n64k, 1, PAYLOAD).await;
        small.add(secs, Duration::ZERO);
        let secs = drive_fan_out(&fan, &counter, n64k, 1, 64 << 10).await;
        large.add(secs, Duration::ZERO);
    }
    fan_out_line(
        "payload_64k_fan_out4",
        n64k,
        large.secs,
        small.secs,
        " floor=fan_out4_64b_same_rounds target_ratio=0.9",
    );
}

/// Round-trip latency through the bus against a bare channel round trip.
async fn latency(opts: &Opts) {
    // Alternating message by message, so both see the same machine: how fast a
    // parked thread wakes here changes from one minute to the next.
    // `EB_BENCH_LATENCY_MSGS=n` sets the count, so two profiled runs cancel start-up.
    let m = std::env::var("EB_BENCH_LATENCY_MSGS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or_else(|| opts.scale(20_000, 1_000) as usize);
    let counter = Counter::new(u64::MAX);
    let bus = memory_bus(&counter, 1).await;
    let bare = LatencyFloor::new();
    let data = payload(PAYLOAD);
    let (mut floor, mut through_bus) = (Vec::with_capacity(m), Vec::with_capacity(m));
    for i in 0..m as u64 {
        floor.push(bare.round_trip().await);
        through_bus.push(bus_round_trip(&bus, &counter, i, &data).await);
    }
    drop(bus);
    let (f50, f99) = percentiles(floor);
    let (b50, b99) = percentiles(through_bus);
    println!(
        "scenario=latency msgs={m} p50_us={:.1} p99_us={:.1} floor_p50_us={:.1} floor_p99_us={:.1} ratio_p50={:.2} ratio_p99={:.2} target_ratio_p50=1.2 target_ratio_p99=1.5",
        b50.as_secs_f64() * 1e6,
        b99.as_secs_f64() * 1e6,
        f50.as_secs_f64() * 1e6,
        f99.as_secs_f64() * 1e6,
        b50.as_secs_f64() / f50.as_secs_f64(),
        b99.as_secs_f64() / f99.as_secs_f64()
    );
}

/// Durable sends under each sync policy and sender count, against write + fdatasync.
async fn wal_policies(opts: &Opts) {
    // Interleaved rounds, best of each: the disk's speed drifts with other load.
    let batch = SyncPolicy::Batch {
        max_records: 256,
        max_delay: Duration::from_millis(2),
    };
    let mut cases = Vec::new();
    // `always_overlap`: the same as `always` with `overlap_syncs(true)`, in the same rounds
    // (one sender syncs inline either way, so it has no line of its own).
    for (label, policy, overlap) in [
        ("always", SyncPolicy::Always, false),
        ("always_overlap", SyncPolicy::Always, true),
        ("batch", batch, false),
    ] {
        for senders in [1usize, 8, 64] {
            let name = format!("wal_{label}_{senders}");
            if opts.run(&name) && !(overlap && senders == 1) {
                let per = opts.scale(if senders == 1 { 2_000 } else { 16_000 }, 20);
                let per = (per / senders as u64).max(10);
                cases.push((name, (policy, overlap), senders, per, Best::default(), 0u64));
            }
        }
    }
    let mut floor: f64 = 0.0;
    for _ in 0..opts.scale(5, 1) {
        let dir = tempdir();
        floor = floor.max(fsync_floor(&dir, if opts.quick { 0.1 } else { 0.5 }));
        let _ = std::fs::remove_dir_all(&dir);
        for (_, (policy, overlap), senders, per, best, syncs) in &mut cases {
            let run = durable(*policy, *overlap, *senders, *per).await;
            if best.secs == 0.0 || run.secs < best.secs {
                *syncs = run.syncs;
            }
            best.add(run.secs, run.cpu);
        }
    }
    let one_sender = |label: &str| {
        cases
            .iter()
            .find(|c| c.0 == format!("wal_{label}_1"))
            .map(|c| (c.2 as u64 * c.3) as f64 / c.4.secs)
    };
    for (name, _, senders, per, best, syncs) in &cases {
        let n = *per * *senders as u64;
        // What bounds the rate: how many messages share a sync, and the CPU a message costs
        // (all threads: senders, workers, the WAL writer) in the best round.
        let shape = format!(
            " syncs={syncs} msgs_per_sync={:.1} cpu_us_per_msg={:.1}",
            n as f64 / (*syncs).max(1) as f64,
            best.cpu.as_secs_f64() * 1e6 / n as f64
        );
        let label = name.split('_').nth(1).unwrap_or("");
        // The targets: `Always` with one sender at 0.85 of the raw loop, with 64
        // senders at 40 times one sender.
        let target = match (label, *senders) {
            ("always", 1) => " target_ratio=0.85",
            ("always", 64) => " target_vs_1_sender=40",
            _ => "",
        };
        let extra = match one_sender(label) {
            Some(one) if *senders > 1 => format!(
                " floor=write+fdatasync vs_1_sender={:.1}x{target}",
                n as f64 / best.secs / one
            ),
            _ => format!(" floor=write+fdatasync{target}"),
        };
        line(name, n, best.secs, floor, &format!("{extra}{shape}"));
    }
}

/// What one batch of 1,000 costs the disk alone: one `write` of 1,000 records of 128 bytes
/// and one `fdatasync`, on the WAL's disk. Returns batches per second over `batches` batches.
fn batch_fsync_floor(dir: &std::path::Path, batches: u64) -> f64 {
    let path = dir.join("floor.bin");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let batch = vec![1u8; 1000 * 128];
    let started = Instant::now();
    for _ in 0..batches {
        f.write_all(&batch).unwrap();
        f.sync_data().unwrap();
    }
    let rate = batches as f64 / started.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    rate
}

/// `batches` calls of `send_batch` with 1,000 messages each on a `PersistentWal`
/// (`SyncPolicy::Always`: one fdatasync per batch), from the first call until every message
/// was handled. Returns seconds.
async fn send_batches(dir: &std::path::Path, batches: u64) -> f64 {
    let counter = Counter::new(batches * 1000);
    let bus = EventBus::builder()
        .wal(PersistentWal::open(dir).unwrap())
        .queue(FlumeQueueFactory::bounded(BOUND))
        .handler(HandlerSpec::new("bench", "bench", counter.clone()).workers(WORKERS))
        .build()
        .await
        .unwrap();
    let data = payload(PAYLOAD);
    let done = counter.done.notified();
    tokio::pin!(done);
    done.as_mut().enable();
    let started = Instant::now();
    for _ in 0..batches {
        let batch = (0..1000)
            .map(|_| EMessage::standard("bench", data.clone()))
            .collect();
        bus.send_batch("bench", batch).await.unwrap();
    }
    done.await;
    let secs = started.elapsed().as_secs_f64();
    bus.wait_idle(Duration::from_secs(60)).await.unwrap();
    secs
}

/// `send_batch` of 1,000 messages on a `PersistentWal` against its floor, the disk's cost
/// of a batch (one write of 1,000 records and one fdatasync), in interleaved rounds.
async fn send_batch(opts: &Opts) {
    let batches = opts.scale(20, 2);
    let (mut bus, mut floor) = (Best::default(), 0.0f64);
    for _ in 0..opts.scale(5, 1) {
        let dir = tempdir();
        floor = floor.max(batch_fsync_floor(&dir, batches) * 1000.0);
        let _ = std::fs::remove_dir_all(&dir);
        let dir = tempdir();
        bus.add(send_batches(&dir, batches).await, Duration::ZERO);
        let _ = std::fs::remove_dir_all(&dir);
    }
    line(
        "send_batch_1000",
        batches * 1000,
        bus.secs,
        floor,
        " floor=write+fdatasync_per_1000 target_msgs_per_sec=100000",
    );
}

/// A handler that waits until released: holds its worker so a backlog builds up.
struct Stuck(tokio::sync::watch::Sender<bool>);

#[async_trait]
impl EHandler for Stuck {
    async fn handler(&self, _msg: &EMessage) -> Ack {
        let _ = self.0.subscribe().wait_for(|released| *released).await;
        Ack::Ack
    }
}

/// CPU used over `window` of real time.
async fn cpu_over(window: Duration) -> Duration {
    let before = CpuMark::now();
    tokio::time::sleep(window).await;
    before.since()
}

fn idle_line(name: &str, window: Duration, used: Duration) {
    println!(
        "scenario={name} secs={} cpu_ms={} cpu_percent_of_one_core={:.2} target_cpu_percent=0",
        window.as_secs(),
        used.as_millis(),
        used.as_secs_f64() / window.as_secs_f64() * 100.0
    );
}

/// CPU used by an idle bus, and by one whose only worker is stuck with 500 messages
/// waiting for it (the tests count wake-ups on a paused clock; this is the real cost).
async fn idle(opts: &Opts) {
    let window = Duration::from_secs(if opts.quick { 1 } else { 5 });
    let counter = Counter::new(0);
    let bus = memory_bus(&counter, 10).await;
    idle_line("idle", window, cpu_over(window).await);
    drop(bus);

    let stuck = Arc::new(Stuck(tokio::sync::watch::channel(false).0));
    let bus = EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::bounded(BOUND))
        .handler(HandlerSpec::new("stuck", "stuck", stuck.clone()))
        .build()
        .await
        .unwrap();
    for _ in 0..500 {
        send_one(&bus.router(), "stuck", &payload(PAYLOAD)).await;
    }
    idle_line("idle_backlog", window, cpu_over(window).await);
    stuck.0.send_replace(true);
    bus.wait_idle(Duration::from_secs(60)).await.unwrap();
}

/// Resident memory before and after many messages: it must stay flat.
async fn memory_flat(opts: &Opts) {
    let total = opts.scale(5_000_000, 50_000);
    let counter = Counter::new(0);
    let bus = memory_bus(&counter, 1).await;
    drive(&bus, &counter, total / 10, PAYLOAD, 1).await;
    let before = rss_kib();
    drive(&bus, &counter, total, PAYLOAD, 1).await;
    let after = rss_kib();
    println!(
        "scenario=memory_flat msgs={total} rss_before_kib={before} rss_after_kib={after} growth_mib={:.1} target_growth_mib=0",
        (after as f64 - before as f64) / 1024.0
    );
}

/// A backlog of `n` pending 64-byte messages (no handlers while it was written): the WAL's
/// size, how fast it reopens, the resident memory it then holds, and how long until a bus
/// started on it has handled every one. Written by this process; reopened in a fresh one
/// (this binary again, `--backlog-child DIR N`), so its memory is the open's alone.
fn backlog(opts: &Opts) {
    let sizes: &[u64] = if opts.quick {
        &[20_000]
    } else {
        match std::env::var("EB_BACKLOG_SIZES") {
            Ok(list) => &*Box::leak(
                list.split(',')
                    .filter_map(|s| s.trim().parse().ok())
                    .collect::<Vec<u64>>()
                    .into_boxed_slice(),
            ),
            Err(_) => &[1_000_000, 10_000_000],
        }
    };
    for &n in sizes {
        let dir = tempdir();
        {
            let wal = PersistentWal::builder(&dir)
                .sync_policy(SyncPolicy::Never)
                .open()
                .unwrap();
            let data = payload(PAYLOAD);
            let mut batch = Vec::with_capacity(1024);
            for i in 0..n {
                batch.push(Arc::new(EMessage::standard("backlog", data.clone())));
                if batch.len() == 1024 || i + 1 == n {
                    drop(wal.append_batch(&batch).unwrap());
                    batch.clear();
                }
            }
        }
        if std::env::var_os("EB_BACKLOG_WRITE_ONLY").is_some() {
            // To reopen it with another build: `throughput --backlog-child DIR N`.
            println!("backlog of {n} written to {}", dir.display());
            continue;
        }
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .arg("--backlog-child")
            .arg(&dir)
            .arg(n.to_string())
            .status()
            .unwrap();
        assert!(status.success(), "the backlog reopen failed: {status}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The reopening half of [`backlog`], in a process of its own.
struct BacklogChild {
    dir: std::path::PathBuf,
    n: u64,
}

impl BacklogChild {
    fn from_args() -> Option<BacklogChild> {
        let args: Vec<String> = std::env::args().collect();
        let at = args.iter().position(|a| a == "--backlog-child")?;
        Some(BacklogChild {
            dir: args.get(at + 1)?.into(),
            n: args.get(at + 2)?.parse().ok()?,
        })
    }

    fn run(self) {
        let wal_bytes: u64 = std::fs::read_dir(&self.dir)
            .unwrap()
            .filter_map(|e| e.ok()?.metadata().ok())
            .map(|m| m.len())
            .sum();
        let before = rss_kib();
        let cpu_before = thread_cpu_secs();
        let started = Instant::now();
        let wal = PersistentWal::builder(&self.dir)
            .sync_policy(SyncPolicy::Never)
            .open()
            .unwrap();
        let open_secs = started.elapsed().as_secs_f64();
        let open_cpu_secs = thread_cpu_secs() - cpu_before;
        let after = rss_kib();
        assert_eq!(wal.stats().live, self.n, "the reopened WAL lost records");
        if std::env::var_os("EB_BACKLOG_OPEN_ONLY").is_some() {
            // The open alone (to profile it, or to reopen one log again and again: the
            // handling below would complete the messages).
            let grown = after.saturating_sub(before);
            println!(
                "scenario=backlog_{n}_open msgs={n} reopen_secs={open_secs:.3} reopen_records_per_sec={:.0} reopen_cpu_secs={open_cpu_secs:.3} rss_after_open_mib={:.1} rss_growth_mib={:.1} rss_bytes_per_record={:.0}",
                self.n as f64 / open_secs,
                after as f64 / 1024.0,
                grown as f64 / 1024.0,
                grown as f64 * 1024.0 / self.n as f64,
                n = self.n,
            );
            return;
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let n = self.n;
        let handled_secs = rt.block_on(async move {
            let counter = Counter::new(n);
            let done = counter.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            let started = Instant::now();
            let bus = EventBus::builder()
                .wal(wal)
                .queue(FlumeQueueFactory::bounded(BOUND))
                .handler(HandlerSpec::new("backlog", "backlog", counter.clone()).workers(WORKERS))
                .build()
                .await
                .unwrap();
            done.await;
            let secs = started.elapsed().as_secs_f64();
            bus.wait_idle(Duration::from_secs(600)).await.unwrap();
            secs
        });
        let peak = std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
            .unwrap_or(0u64);
        let grown = after.saturating_sub(before);
        println!(
            "scenario=backlog_{n} msgs={n} wal_mib={:.1} reopen_secs={open_secs:.3} reopen_records_per_sec={:.0} reopen_cpu_secs={open_cpu_secs:.3} rss_after_open_mib={:.1} rss_growth_mib={:.1} rss_bytes_per_record={:.0} handled_secs={handled_secs:.3} peak_rss_mib={:.1}",
            wal_bytes as f64 / (1 << 20) as f64,
            n as f64 / open_secs,
            after as f64 / 1024.0,
            grown as f64 / 1024.0,
            grown as f64 * 1024.0 / n as f64,
            peak as f64 / 1024.0,
        );
    }
}

/// A scenario line of a peer program (`scenario=<name> … <field>=<value> …`): the value.
fn peer_field(output: &str, scenario: &str, field: &str) -> Option<f64> {
    let line = output
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&format!("scenario={scenario}")))?;
    let prefix = format!("{field}=");
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
}

/// Runs a peer program once with `env`, returns its output (or why it could not run).
fn run_peer(bin: &std::path::Path, env: &[(&str, String)]) -> Result<String, String> {
    let out = std::process::Command::new(bin)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(format!("{} exited with {}", bin.display(), out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The fan-out topics' names: `fan`, or `fan0` … for several.
fn fan_topics(topics: usize) -> Vec<String> {
    if topics == 1 {
        vec!["fan".into()]
    } else {
        (0..topics).map(|t| format!("fan{t}")).collect()
    }
}

/// Four handlers on each of `topics` topics, each handler with one worker and each receiving
/// every message of its topic (the peers' `b3_fanout4` on one topic).
async fn fan_out_bus(counter: &Arc<Counter>, topics: usize) -> EventBus {
    fan_out_bus_with(counter, topics, topic_log()).await
}

/// Whether buses keep their topics in the topic log (the default); `EB_BENCH_TOPIC_LOG=0`
/// gives each handler a queue of its own instead, to profile one path against the other.
fn topic_log() -> bool {
    std::env::var("EB_BENCH_TOPIC_LOG").map_or(true, |v| v != "0")
}

/// [`fan_out_bus`] with the topic log on or off.
async fn fan_out_bus_with(counter: &Arc<Counter>, topics: usize, log: bool) -> EventBus {
    let mut b = EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::bounded(BOUND))
        .topic_log(log);
    for topic in fan_topics(topics) {
        for h in ["a", "b", "c", "d"] {
            b = b.handler(HandlerSpec::new(
                format!("{topic}_{h}"),
                topic.clone(),
                counter.clone(),
            ));
        }
    }
    b.build().await.unwrap()
}

/// Sends `n` messages of `len` bytes from a task, round-robin over the `topics` fan-out
/// topics; returns the seconds until all `4n` deliveries were made.
async fn drive_fan_out(
    bus: &EventBus,
    counter: &Arc<Counter>,
    n: u64,
    topics: usize,
    len: usize,
) -> f64 {
    counter.reset(4 * n);
    let router = bus.router();
    let data = payload(len);
    let names = fan_topics(topics);
    let done = counter.done.notified();
    tokio::pin!(done);
    done.as_mut().enable();
    let started = Instant::now();
    tokio::spawn(async move {
        for i in 0..n as usize {
            send_one(&router, &names[i % names.len()], &data).await;
        }
    })
    .await
    .unwrap();
    done.await;
    let secs = started.elapsed().as_secs_f64();
    bus.wait_idle(Duration::from_secs(60)).await.unwrap();
    secs
}

/// The message count a profiled scenario runs: `var` if set, else 200,000 (20,000 with
/// `--quick`).
fn count_from_env(var: &str, opts: &Opts) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| opts.scale(200_000, 20_000))
}

/// The fan-out alone (no peer programs needed, so a profiler can run it): 4 handlers on one
/// topic, each receiving every message, with the CPU time per message.
async fn fan_out(opts: &Opts) {
    // `EB_BENCH_FAN_OUT_MSGS=n` sets the count, so that the difference of two profiled runs
    // cancels the start-up and the warm-up (`docs/benchmarks.md`, fifth round).
    let n = count_from_env("EB_BENCH_FAN_OUT_MSGS", opts);
    let counter = Counter::new(0);
    let fan = fan_out_bus(&counter, 1).await;
    drive_fan_out(&fan, &counter, n / 10, 1, PAYLOAD).await;
    // Without `EB_BENCH_TOPIC_LOG`, the same bus with a queue per handler runs in the same
    // rounds, interleaved: what the topic log changes.
    let queues = match std::env::var_os("EB_BENCH_TOPIC_LOG") {
        Some(_) => None,
        None => {
            let bus = fan_out_bus_with(&counter, 1, false).await;
            drive_fan_out(&bus, &counter, n / 10, 1, PAYLOAD).await;
            Some(bus)
        }
    };
    let (mut best, mut best_queues) = (Best::default(), Best::default());
    for _ in 0..opts.scale(3, 1) {
        let cpu = CpuMark::now();
        let secs = drive_fan_out(&fan, &counter, n, 1, PAYLOAD).await;
        best.add(secs, cpu.since());
        if let Some(bus) = &queues {
            let cpu = CpuMark::now();
            let secs = drive_fan_out(bus, &counter, n, 1, PAYLOAD).await;
            best_queues.add(secs, cpu.since());
        }
    }
    println!(
        "scenario=fan_out4 msgs={n} secs={:.3} deliveries_per_sec={:.0} cpu_ns_per_msg={:.0} topic_log={} (the peers group compares it with ruststream's b3_fanout4)",
        best.secs,
        4.0 * n as f64 / best.secs,
        best.cpu.as_nanos() as f64 / n as f64,
        topic_log(),
    );
    if queues.is_some() {
        println!(
            "scenario=fan_out4_queue_per_handler msgs={n} secs={:.3} deliveries_per_sec={:.0} cpu_ns_per_msg={:.0} topic_log_ratio={:.2} (the topic log's deliveries/s over these)",
            best_queues.secs,
            4.0 * n as f64 / best_queues.secs,
            best_queues.cpu.as_nanos() as f64 / n as f64,
            best_queues.secs / best.secs,
        );
    }
    let _ = std::io::stdout().flush();
}

/// Competing workers alone (no peer programs needed, so a profiler can run it): the peers'
/// workload of 4 workers on one topic, one sender task, with the CPU time per message.
async fn competing(opts: &Opts) {
    // `EB_BENCH_COMPETING_MSGS=n` sets the count, as `EB_BENCH_FAN_OUT_MSGS` does for the
    // fan-out: the difference of two profiled runs is what a message costs.
    let n = count_from_env("EB_BENCH_COMPETING_MSGS", opts);
    let counter = Counter::new(0);
    let bus = memory_bus(&counter, 1).await;
    drive_from(&bus, &counter, n / 10, PAYLOAD, 1, SendFrom::Task).await;
    let mut best = Best::default();
    for _ in 0..opts.scale(3, 1) {
        let cpu = CpuMark::now();
        let (secs, _) = drive_from(&bus, &counter, n, PAYLOAD, 1, SendFrom::Task).await;
        best.add(secs, cpu.since());
    }
    println!(
        "scenario=competing4 msgs={n} secs={:.3} msgs_per_sec={:.0} cpu_ns_per_msg={:.0} (the peers group compares it with ruststream's b1_workers4_competing)",
        best.secs,
        n as f64 / best.secs,
        best.cpu.as_nanos() as f64 / n as f64,
    );
    let _ = std::io::stdout().flush();
}

/// The peers' workload (one sender task, 64-byte payloads, one topic, 4 workers, 200,000
/// messages; and 4 handlers each receiving every message), run by event_base and by the peer
/// programs in `--peers DIR` (built by `event_base_test/compare-peers.sh`), interleaved in
/// rounds; each figure is the median of its rounds.
async fn peers(opts: &Opts) {
    let Some(dir) = opts.peers.clone() else {
        println!("scenario=peers skipped: no --peers DIR (run event_base_test/compare-peers.sh)");
        return;
    };
    let n = opts.scale(200_000, 20_000);
    let rounds = opts.scale(5, 1);
    let flume_bin = dir.join("flume_bench");
    let rust_bin = dir.join("ruststream_bench");
    let n_env = ("BENCH_N", n.to_string());
    let counter = Counter::new(0);
    let bus = memory_bus(&counter, 1).await;
    let fan = fan_out_bus(&counter, 1).await;
    drive_from(&bus, &counter, n / 10, PAYLOAD, 1, SendFrom::Task).await;
    drive_fan_out(&fan, &counter, n / 10, 1, PAYLOAD).await;
    let (mut eb, mut eb_fan, mut flume, mut rs, mut rs_fan) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let out = run_peer(&flume_bin, std::slice::from_ref(&n_env));
        let out = out.and_then(|o| {
            peer_field(&o, "a_memory", "msgs_per_sec").ok_or(format!("no a_memory line in {o}"))
        });
        match out {
            Ok(r) => flume.push(r),
            Err(e) => return println!("scenario=peers failed: {e}"),
        }
        let secs = drive_from(&bus, &counter, n, PAYLOAD, 1, SendFrom::Task)
            .await
            .0;
        eb.push(n as f64 / secs);
        let env = [
            n_env.clone(),
            ("BENCH_ROUNDS", "1".into()),
            ("BENCH_ONLY", "b".into()),
        ];
        let out = run_peer(&rust_bin, &env).and_then(|o| {
            let b1 = peer_field(&o, "b1_workers4_competing", "msgs_per_sec");
            let b3 = peer_field(&o, "b3_fanout4", "deliveries_per_sec");
            b1.zip(b3).ok_or(format!("no b1/b3 lines in {o}"))
        });
        match out {
            Ok((b1, b3)) => {
                rs.push(b1);
                rs_fan.push(b3);
            }
            Err(e) => return println!("scenario=peers failed: {e}"),
        }
        eb_fan.push(4.0 * n as f64 / drive_fan_out(&fan, &counter, n, 1, PAYLOAD).await);
    }
    let (eb, eb_fan, flume, rs, rs_fan) = (
        median(eb),
        median(eb_fan),
        median(flume),
        median(rs),
        median(rs_fan),
    );
    println!(
        "scenario=peers_memory_path msgs={n} rounds={rounds} msgs_per_sec={eb:.0} ruststream_b1_msgs_per_sec={rs:.0} flume_msgs_per_sec={flume:.0} ratio_ruststream={:.2} ratio_flume={:.2} target_ruststream=1.2 target_flume=0.45",
        eb / rs,
        eb / flume
    );
    println!(
        "scenario=peers_fan_out4 msgs={n} rounds={rounds} deliveries_per_sec={eb_fan:.0} ruststream_b3_deliveries_per_sec={rs_fan:.0} ratio_ruststream={:.2} target_ruststream=1.5",
        eb_fan / rs_fan
    );
    let _ = std::io::stdout().flush();
}
