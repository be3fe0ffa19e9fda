//! Criterion micro-benchmarks of the hot path's parts (the record codec, the WAL, a message's
//! dispatch), each beside a baseline measured in the same run: a bare copy of the same bytes,
//! a bare channel (compare the lines of a group, not absolute times). The file WAL has a
//! group of its own, timed until its writer has written.
//!
//! `cargo bench -p event_base_test --bench micro`

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, SamplingMode};
use event_base::backend::Wal;
use event_base::{
    async_trait, Ack, EHandler, EMessage, EventBus, FlumeQueueFactory, HandlerSpec, MemoryWal,
    PersistentWal, SyncPolicy,
};
use tokio::sync::Notify;

/// WAL append + complete of one message, beside a bare channel send + receive.
fn wal(c: &mut Criterion) {
    let mut g = c.benchmark_group("wal_append_complete");
    let (tx, rx) = flume::unbounded::<Arc<EMessage>>();
    g.bench_function("baseline_flume_send_recv", |b| {
        b.iter_batched(
            || Arc::new(EMessage::standard("t", b"x".to_vec())),
            |m| {
                tx.send(m).unwrap();
                rx.recv().unwrap()
            },
            BatchSize::SmallInput,
        )
    });
    let mem = MemoryWal::new();
    g.bench_function("memory_wal", |b| {
        b.iter_batched(
            || Arc::new(EMessage::standard("t", b"x".to_vec())),
            |m| {
                let _ = mem.append(&m).unwrap();
                mem.begin(&m.id).unwrap();
                mem.complete(&m.id).unwrap();
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();

    // The file WAL hands every record to its writer thread; timing `append` alone would time
    // that hand-off. Each sample here ends with `flush`, which returns once the writer has
    // written (and synced) everything before it, so the time covers the writes. With linear
    // sampling the per-iteration figure is the slope over samples of growing size: the one
    // fdatasync per sample lands in the intercept, not in the time per message.
    let mut g = c.benchmark_group("wal_append_complete_written");
    g.sampling_mode(SamplingMode::Linear);
    let dir = std::env::temp_dir().join(format!("eb-bench-micro-{}", std::process::id()));
    let file = PersistentWal::builder(&dir)
        .sync_policy(SyncPolicy::Never)
        .open()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // The floor: the same message's append record, encoded once, copied `iters` times into
    // a buffer and written to a file in the same directory with one write and one sync.
    let mut frame = Vec::new();
    event_base::wal::codec_bench::encode_append(
        &Arc::new(EMessage::standard("t", b"x".to_vec())),
        &mut frame,
    );
    let mut plain = std::fs::File::create(dir.join("baseline.bin")).unwrap();
    g.bench_function("baseline_write_sync_same_bytes", |b| {
        b.iter_custom(|iters| {
            let started = Instant::now();
            let mut out = Vec::with_capacity(frame.len() * iters as usize);
            for _ in 0..iters {
                out.extend_from_slice(std::hint::black_box(&frame));
            }
            plain.write_all(&out).unwrap();
            plain.sync_data().unwrap();
            started.elapsed()
        })
    });
    g.bench_function("persistent_wal_no_sync", |b| {
        b.iter_custom(|iters| {
            let messages: Vec<Arc<EMessage>> = (0..iters)
                .map(|_| Arc::new(EMessage::standard("t", b"x".to_vec())))
                .collect();
            let started = Instant::now();
            for m in &messages {
                let _ = file.append(m).unwrap();
                file.begin(&m.id).unwrap();
                file.complete(&m.id).unwrap();
            }
            rt.block_on(file.flush()).unwrap();
            started.elapsed()
        })
    });
    g.finish();
    drop(file);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Encoding and decoding one `Append` record (64-byte payload), beside copying the same
/// number of bytes into a buffer.
fn codec(c: &mut Criterion) {
    use event_base::wal::codec_bench::{decode, encode_append};
    let mut g = c.benchmark_group("record_codec");
    let message = Arc::new(EMessage::standard("orders.created", vec![7u8; 64]));
    let mut frame = Vec::new();
    encode_append(&message, &mut frame);
    let mut out = Vec::with_capacity(4096);
    g.bench_function("baseline_copy_same_bytes", |b| {
        b.iter(|| {
            out.clear();
            out.extend_from_slice(std::hint::black_box(&frame));
            out.len()
        })
    });
    g.bench_function("encode_append", |b| {
        b.iter(|| {
            out.clear();
            encode_append(std::hint::black_box(&message), &mut out);
            out.len()
        })
    });
    g.bench_function("decode_append", |b| {
        b.iter(|| decode(std::hint::black_box(&frame)).unwrap())
    });
    g.finish();
}

struct Done(Notify);

#[async_trait]
impl EHandler for Done {
    async fn handler(&self, _msg: &EMessage) -> Ack {
        self.0.notify_one();
        Ack::Ack
    }
}

/// One message from send to handled, beside a bare channel hop to a task and back.
fn dispatch(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("dispatch_round_trip");
    g.measurement_time(Duration::from_secs(3));
    let (tx, rx) = flume::bounded::<Arc<EMessage>>(64);
    let back = Arc::new(Notify::new());
    let b2 = back.clone();
    rt.spawn(async move {
        while let Ok(m) = rx.recv_async().await {
            std::hint::black_box(&m);
            b2.notify_one();
        }
    });
    g.bench_function("baseline_flume_hop", |b| {
        b.to_async(&rt).iter(|| async {
            tx.send_async(Arc::new(EMessage::standard("t", b"x".to_vec())))
                .await
                .unwrap();
            back.notified().await;
        })
    });
    let done = Arc::new(Done(Notify::new()));
    let bus: EventBus = rt.block_on(async {
        EventBus::builder()
            .wal(MemoryWal::new())
            .queue(FlumeQueueFactory::default())
            .handler(HandlerSpec::new("bench", "bench", done.clone()))
            .build()
            .await
            .unwrap()
    });
    g.bench_function("bus_send_to_handled", |b| {
        b.to_async(&rt).iter(|| async {
            bus.send("bench", EMessage::standard("bench", b"x".to_vec()))
                .await
                .unwrap();
            done.0.notified().await;
        })
    });
    g.finish();
}

criterion_group!(benches, codec, wal, dispatch);
criterion_main!(benches);
