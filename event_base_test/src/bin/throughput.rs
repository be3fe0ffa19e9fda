//! Throughput and latency of the bus beside the bare-channel floor, measured in the same run.
//!
//! `cargo run --release -p event_base_test --bin throughput [-- --quick]`
//!
//! Each scenario prints one line:
//! `scenario=<name> msgs=<n> secs=<t> msgs_per_sec=<r> floor_msgs_per_sec=<f> ratio=<r/f>`.
//! The floor is a bare bounded `flume` channel feeding the same number of consumer tasks, so
//! the ratio says what the bus costs on top of the channel it sits on. Absolute figures move
//! with the machine's load; ratios from one run are comparable.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use event_base::{async_trait, Ack, EHandler, EMessage, HandlerSpec};
use tokio::sync::Notify;

const PAYLOAD: usize = 64;
const WORKERS: usize = 4;
const BOUND: usize = 8192;

struct Counter {
    seen: AtomicU64,
    target: u64,
    done: Notify,
}

impl Counter {
    fn new(target: u64) -> Arc<Counter> {
        Arc::new(Counter {
            seen: AtomicU64::new(0),
            target,
            done: Notify::new(),
        })
    }

    fn hit(&self) {
        if self.seen.fetch_add(1, Ordering::Relaxed) + 1 == self.target {
            self.done.notify_one();
        }
    }
}

#[async_trait]
impl EHandler for Counter {
    async fn handler(&self, _msg: &EMessage) -> Ack {
        self.hit();
        Ack::Ack
    }
}

/// Bare flume: one sender, `WORKERS` consumer tasks.
async fn floor(n: u64, payload: usize) -> f64 {
    let (tx, rx) = flume::bounded::<Vec<u8>>(BOUND);
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
    let started = Instant::now();
    let done = counter.done.notified();
    tokio::pin!(done);
    done.as_mut().enable();
    for _ in 0..n {
        tx.send_async(vec![0u8; payload]).await.unwrap();
    }
    done.await;
    let secs = started.elapsed().as_secs_f64();
    drop(tx);
    for t in tasks {
        let _ = t.await;
    }
    secs
}

/// The bus with MemoryWal and flume queues.
async fn memory_bus(n: u64, payload: usize) -> f64 {
    let counter = Counter::new(n);
    let bus = event_base::builder()
        .handler(HandlerSpec::new("bench", "bench", counter.clone()).workers(WORKERS))
        .build()
        .await
        .unwrap();
    let router = bus.router();
    let started = Instant::now();
    let done = counter.done.notified();
    tokio::pin!(done);
    done.as_mut().enable();
    for _ in 0..n {
        router
            .send(
                "bench",
                EMessage::standard("bench", vec![0u8; payload]),
                None,
                None,
            )
            .await
            .unwrap();
    }
    done.await;
    let secs = started.elapsed().as_secs_f64();
    bus.wait_idle(Duration::from_secs(30)).await.unwrap();
    secs
}

fn line(name: &str, n: u64, secs: f64, floor_secs: f64) {
    let rate = n as f64 / secs;
    let floor_rate = n as f64 / floor_secs;
    println!(
        "scenario={name} msgs={n} secs={secs:.3} msgs_per_sec={rate:.0} floor_msgs_per_sec={floor_rate:.0} ratio={:.2}",
        rate / floor_rate
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let n: u64 = if quick { 20_000 } else { 1_000_000 };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Warm up both paths once.
        floor(n / 10, PAYLOAD).await;
        memory_bus(n / 10, PAYLOAD).await;
        let f = floor(n, PAYLOAD).await;
        let b = memory_bus(n, PAYLOAD).await;
        line("memory_path", n, b, f);
    });
}
