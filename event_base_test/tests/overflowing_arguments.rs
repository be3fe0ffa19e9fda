//! Arguments at the edge of `Duration` (issue 33, finding 4): `Duration::MAX` as a send
//! timeout, a delay, a `wait_idle` timeout, a shutdown strategy's durations, a retry's delay,
//! a handler's timeouts and a batch's linger; a replay rate of `1e-300` per second. Each is
//! clamped to `constant::MAX_WAIT` or refused with a typed error, never a panic, and nothing
//! is left in flight behind the caller's back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use event_base::async_trait;
use event_base::backend::{EProducer, QueueFactory, TopicQueue, TrySendError};
use event_base::constant::MAX_WAIT;
use event_base::{
    batch_fn, Ack, CoreError, EMessage, FlumeQueueFactory, HandlerSpec, MemoryWal, MessageTopic,
    QueueError, SendOptions, ShutdownStrategy,
};
use event_base_test::{Gate, Probe, WAIT};

/// A send whose timeout is `Duration::MAX` and that has to wait (its message is due later)
/// used to panic after the WAL append, leaving the message in flight for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_timeout_of_duration_max_is_no_timeout() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "t", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let message = EMessage::standard("t", b"x".to_vec()).with_delay(Duration::from_millis(100));
    let id = bus
        .send_with("t", message, SendOptions::new().timeout(Duration::MAX))
        .await
        .unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&id), 1);
}

/// `with_delay(Duration::MAX)` used to panic in `SystemTime::now() + delay`; it is clamped to
/// `MAX_WAIT` and the message waits (in flight, and left in the WAL by a shutdown).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_of_duration_max_is_clamped_to_max_wait() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "t", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let before = SystemTime::now();
    let message = EMessage::standard("t", b"x".to_vec()).with_delay(Duration::MAX);
    let at = message.deliver_at.unwrap();
    assert!(at >= before + MAX_WAIT && at <= SystemTime::now() + MAX_WAIT);
    bus.send("t", message).await.unwrap();
    // A time past any clock is clamped the same way at send.
    let far = SystemTime::UNIX_EPOCH + Duration::from_secs(i64::MAX as u64);
    let message = EMessage::standard("t", b"y".to_vec()).with_deliver_at(far);
    bus.send("t", message).await.unwrap();
    match bus.wait_idle(Duration::from_millis(50)).await {
        Err(CoreError::IdleTimeout { in_flight: 2, .. }) => {}
        other => panic!("expected both messages waiting, got {other:?}"),
    }
    let report = bus
        .shutdown(ShutdownStrategy::Drain {
            timeout: Duration::from_millis(200),
        })
        .await
        .unwrap();
    assert_eq!(report.left_for_replay, 2);
    assert_eq!(probe.count(), 0);
}

/// `wait_idle(Duration::MAX)` while a message is in flight used to panic in
/// `Instant::now() + timeout`; it waits as long as it takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_idle_with_duration_max_waits_until_idle() {
    let probe = Probe::new();
    let gate = Gate::new();
    let bus = event_base::builder()
        .handler(probe.gated_handler("h", "t", &gate, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    bus.send("t", b"x".to_vec()).await.unwrap();
    probe.wait_for(1, WAIT).await;
    let waiting = {
        let bus = bus.clone();
        tokio::spawn(async move { bus.wait_idle(Duration::MAX).await })
    };
    gate.open();
    tokio::time::timeout(WAIT, waiting)
        .await
        .expect("wait_idle returns once idle")
        .unwrap()
        .unwrap();
    assert_eq!(bus.in_flight(), 0);
}

/// Shutdown strategies and a handler's `shutdown_timeout` of `Duration::MAX` used to panic
/// in `started + duration`; they mean "no time limit".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_strategies_with_duration_max_stop_the_bus() {
    let strategies = [
        ShutdownStrategy::TwoStage {
            poll_interval: Duration::MAX,
            force_timeout: Duration::MAX,
        },
        ShutdownStrategy::Timeout {
            total: Duration::MAX,
        },
        ShutdownStrategy::Drain {
            timeout: Duration::MAX,
        },
        ShutdownStrategy::Batched {
            batch_size: 1,
            interval: Duration::MAX,
        },
        ShutdownStrategy::StateBasedIdle,
    ];
    for strategy in strategies {
        let name = strategy.name();
        let probe = Probe::new();
        let bus = event_base::builder()
            .handler(
                probe
                    .handler("h", "t", |_| Ack::Ack)
                    .shutdown_timeout(Duration::MAX),
            )
            .build()
            .await
            .unwrap();
        bus.send("t", b"x".to_vec()).await.unwrap();
        bus.wait_idle(WAIT).await.unwrap();
        let report = tokio::time::timeout(WAIT, bus.shutdown(strategy))
            .await
            .unwrap_or_else(|_| panic!("{name}: the shutdown did not end"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(report.drained, "{name}: {report:?}");
        assert_eq!(probe.count(), 1, "{name}");
    }
    // Graceful stops one worker; the bus keeps running until closed.
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "t", |_| Ack::Ack).workers(2))
        .build()
        .await
        .unwrap();
    let graceful = ShutdownStrategy::Graceful {
        worker_name: "h-0".into(),
        poll_interval: Duration::MAX,
    };
    tokio::time::timeout(WAIT, bus.shutdown(graceful))
        .await
        .expect("a graceful stop of an idle worker ends")
        .unwrap();
    bus.send("t", b"x".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}

/// A replay rate of `1e-300` a second (a gap of `1e300` seconds, past `Duration`) is refused
/// before anything is replayed, as are `NaN`, infinite, zero and negative rates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_rate_of_1e_minus_300_is_refused() {
    let probe = Probe::new();
    let healthy = Arc::new(AtomicBool::new(false));
    let h = healthy.clone();
    let bus = event_base::builder()
        .handler(probe.handler("h", "t", move |_| {
            if h.load(Ordering::Acquire) {
                Ack::Ack
            } else {
                Ack::dead()
            }
        }))
        .build()
        .await
        .unwrap();
    bus.send("t", b"a".to_vec()).await.unwrap();
    bus.send("t", b"b".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    healthy.store(true, Ordering::Release);
    for rate in [1e-300, f64::NAN, f64::INFINITY, 0.0, -1.0] {
        match bus.replay_dead_letters_paced(rate).await {
            Err(CoreError::InvalidParameter { name, reason, .. }) => {
                assert_eq!(name, "max_per_second");
                assert!(reason.contains("per second"), "{reason}");
            }
            other => panic!("rate {rate}: expected InvalidParameter, got {other:?}"),
        }
    }
    assert_eq!(
        bus.dead_letters().await.unwrap().len(),
        2,
        "nothing replayed"
    );
    let replayed = bus.replay_dead_letters_paced(1000.0).await.unwrap();
    assert_eq!(replayed.len(), 2);
    bus.wait_idle(WAIT).await.unwrap();
    assert!(bus.dead_letters().await.unwrap().is_empty());
    assert_eq!(probe.count(), 4);
}

/// `Ack::NoAck { retry_after: Some(Duration::MAX) }` used to panic the worker in
/// `Instant::now() + delay`; the retry waits `MAX_WAIT` and the worker goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_duration_max_waits_without_killing_the_worker() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "t", |m| {
            if m.payload.0.as_ref() == b"later" {
                Ack::NoAck {
                    retry_after: Some(Duration::MAX),
                    max_retries: 1,
                }
            } else {
                Ack::Ack
            }
        }))
        .build()
        .await
        .unwrap();
    let later = bus.send("t", b"later".to_vec()).await.unwrap();
    probe.wait_for(1, WAIT).await;
    let now = bus.send("t", b"now".to_vec()).await.unwrap();
    probe.wait_for(2, WAIT).await;
    assert_eq!(probe.count_of(&later), 1);
    assert_eq!(probe.count_of(&now), 1);
    match bus.wait_idle(Duration::from_millis(50)).await {
        Err(CoreError::IdleTimeout { in_flight: 1, .. }) => {}
        other => panic!("expected the retry waiting, got {other:?}"),
    }
    let report = bus.shutdown(ShutdownStrategy::Force).await.unwrap();
    assert_eq!(report.left_for_replay, 1);
}

/// Builder and handler settings of `Duration::MAX` (the dedup window used to panic the build
/// in `now - window`) and a batch's linger of `Duration::MAX`: the bus runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builder_and_handler_settings_of_duration_max_run() {
    let probe = Probe::new();
    let batches = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = batches.clone();
    let store = HandlerSpec::batch(
        "store",
        "points",
        batch_fn(move |batch: Vec<EMessage>| {
            seen.lock().unwrap().push(batch.len());
            async { Ack::Ack }
        }),
        2,
        Duration::MAX,
    )
    .timeout(Duration::MAX)
    .backoff(event_base::Backoff::exponential(Duration::MAX).max_delay(Duration::MAX));
    let bus = event_base::builder()
        .dedup_window(Duration::MAX)
        .heartbeat(Duration::MAX, Duration::MAX)
        .export_metrics(Duration::MAX)
        .handler(probe.handler("h", "t", |_| Ack::Ack).timeout(Duration::MAX))
        .handler(store)
        .build()
        .await
        .unwrap();
    let id = bus.send("t", b"x".to_vec()).await.unwrap();
    bus.send_batch(
        "points",
        vec![
            EMessage::standard("points", b"1".to_vec()),
            EMessage::standard("points", b"2".to_vec()),
        ],
    )
    .await
    .unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&id), 1);
    assert_eq!(batches.lock().unwrap().iter().sum::<usize>(), 2);
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}

/// A queue whose producer panics on the message with id `boom`: a bug in a queue backend.
struct PanickyQueue(FlumeQueueFactory);

impl QueueFactory for PanickyQueue {
    fn create(&self, topic: &MessageTopic) -> Result<TopicQueue, QueueError> {
        let queue = self.0.create(topic)?;
        Ok(TopicQueue {
            producer: Arc::new(PanickyProducer(queue.producer)),
            consumer: queue.consumer,
        })
    }

    fn name(&self) -> &'static str {
        "panicky"
    }
}

struct PanickyProducer(Arc<dyn EProducer>);

#[async_trait]
impl EProducer for PanickyProducer {
    fn try_send(&self, message: Arc<EMessage>) -> Result<(), TrySendError> {
        assert_ne!(message.id, "boom", "a queue backend's bug");
        self.0.try_send(message)
    }

    async fn send(&self, message: Arc<EMessage>) -> Result<(), QueueError> {
        self.0.send(message).await
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// A send that panics after the WAL append (here, in the queue backend) withdraws its
/// message: `wait_idle` does not count it in flight for ever, and no restart delivers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_that_panics_after_the_wal_append_strands_nothing() {
    let probe = Probe::new();
    let wal = MemoryWal::new();
    let bus = event_base::EventBus::builder()
        .wal(wal)
        .queue(PanickyQueue(FlumeQueueFactory::unbounded()))
        .handler(probe.handler("h", "t", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let send = bus.router().send(
        "t",
        EMessage::standard("t", b"x".to_vec()).with_id("boom"),
        None,
        None,
    );
    let panicked = tokio::spawn(send).await.unwrap_err();
    assert!(panicked.is_panic());
    bus.wait_idle(Duration::from_secs(2)).await.unwrap();
    let ok = bus.send("t", b"y".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&ok), 1);
    assert_eq!(probe.count_of("boom"), 0);
    let report = bus.shutdown(ShutdownStrategy::Force).await.unwrap();
    assert_eq!(report.left_for_replay, 0, "the WAL keeps no record of it");
}

/// The file WAL's own settings: a `Batch` delay, an idle sync and a writer spin of
/// `Duration::MAX` used to panic the writer thread at its first batch (`Instant::now() +
/// max_delay`), after which every append failed. They are taken as `MAX_WAIT`.
#[tokio::test]
async fn the_file_wals_durations_of_duration_max_are_taken_as_max_wait() {
    use event_base::backend::Wal;
    use event_base::{PersistentWal, SyncPolicy};
    let dir = tempfile::tempdir().unwrap();
    let wal = PersistentWal::builder(dir.path())
        .sync_policy(SyncPolicy::Batch {
            max_records: 1,
            max_delay: Duration::MAX,
        })
        .idle_sync(Duration::MAX)
        .writer_spin(Duration::MAX)
        .open()
        .unwrap();
    for _ in 0..3 {
        let msg = Arc::new(EMessage::standard("t", b"x".to_vec()));
        wal.append(&msg).unwrap().wait().await.unwrap();
    }
    wal.flush().await.unwrap();
    assert_eq!(wal.stats().live, 3);
    assert!(!wal.stats().failed);
}
