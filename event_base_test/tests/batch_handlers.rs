//! Batch handlers: a worker hands its handler up to `batch` ready messages per call, waiting at
//! most the linger for more (never while the bus shuts down), and every message keeps its own
//! life: its own answer (`Vec<Ack>`), attempts, retry delay and dead letter, also when the
//! call panics, times out or answers a list of the wrong length.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_base::prelude::*;
use event_base::{batch_fn, Backoff, BatchAck, PersistentWal};
use event_base_test::WAIT;

/// One call of a batch handler: when (on tokio's clock) and what it got.
#[derive(Debug, Clone)]
struct Call {
    at: tokio::time::Instant,
    /// `(payload, attempts)` of each message, in the batch's order.
    messages: Vec<(String, u32)>,
}

/// Records every call of a batch handler.
#[derive(Debug, Default)]
struct Calls(Mutex<Vec<Call>>);

impl Calls {
    fn record(&self, batch: &[EMessage]) {
        let messages = batch
            .iter()
            .map(|m| {
                (
                    String::from_utf8_lossy(&m.payload.0).into_owned(),
                    m.attempts,
                )
            })
            .collect();
        self.0.lock().unwrap().push(Call {
            at: tokio::time::Instant::now(),
            messages,
        });
    }

    fn all(&self) -> Vec<Call> {
        self.0.lock().unwrap().clone()
    }

    fn sizes(&self) -> Vec<usize> {
        self.all().iter().map(|c| c.messages.len()).collect()
    }

    /// How many times each payload was handed over, and the attempts it had each time.
    fn attempts_by_payload(&self) -> HashMap<String, Vec<u32>> {
        let mut by: HashMap<String, Vec<u32>> = HashMap::new();
        for call in self.all() {
            for (payload, attempts) in call.messages {
                by.entry(payload).or_default().push(attempts);
            }
        }
        by
    }
}

/// A batch handler on `points` that records each call, then answers `answer(batch)`.
fn recording(
    calls: &Arc<Calls>,
    max: usize,
    linger: Duration,
    answer: impl Fn(&[EMessage]) -> BatchAck + Send + Sync + 'static,
) -> HandlerSpec {
    let (calls, answer) = (calls.clone(), Arc::new(answer));
    HandlerSpec::batch(
        "store",
        "points",
        batch_fn(move |batch: Vec<EMessage>| {
            let (calls, answer) = (calls.clone(), answer.clone());
            async move {
                calls.record(&batch);
                answer(&batch)
            }
        }),
        max,
        linger,
    )
}

fn points(payloads: &[&str]) -> Vec<EMessage> {
    payloads
        .iter()
        .map(|p| EMessage::standard("points", p.as_bytes().to_vec()))
        .collect()
}

fn numbered(n: usize) -> Vec<EMessage> {
    (0..n)
        .map(|i| EMessage::standard("points", format!("p{i}").into_bytes()))
        .collect()
}

async fn start(spec: HandlerSpec) -> EventBus {
    event_base::builder().handler(spec).build().await.unwrap()
}

/// Dead letters as `(payload, attempts, reason)`, sorted.
async fn dead_of(bus: &EventBus) -> Vec<(String, u32, String)> {
    let mut v: Vec<(String, u32, String)> = bus
        .dead_letters()
        .await
        .unwrap()
        .into_iter()
        .map(|d| {
            (
                String::from_utf8_lossy(&d.message.payload.0).into_owned(),
                d.attempts,
                d.reason.to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

// The paused clock: time moves only when every task waits, so a linger either ends by its
// timer (the clock jumps to it exactly) or by the work that filled the batch.

#[tokio::test(start_paused = true)]
async fn ready_messages_are_handed_over_up_to_the_batch_size() {
    let calls = Arc::new(Calls::default());
    let linger = Duration::from_secs(30);
    let bus = start(recording(&calls, 4, linger, |_| Ack::Ack.into())).await;
    let t0 = tokio::time::Instant::now();
    // Ten ready at once (the worker runs only when this task waits): 4, 4, then 2 after the
    // linger found no more.
    bus.send_batch("points", numbered(10)).await.unwrap();
    bus.wait_idle(Duration::from_secs(120)).await.unwrap();
    assert_eq!(calls.sizes(), [4, 4, 2]);
    let all = calls.all();
    assert_eq!(all[0].at, t0, "a full batch does not wait");
    assert_eq!(all[1].at, t0, "a full batch does not wait");
    assert_eq!(all[2].at, t0 + linger, "a short batch waits the linger out");
    let order: Vec<String> = all
        .iter()
        .flat_map(|c| c.messages.iter().map(|(p, _)| p.clone()))
        .collect();
    let sent: Vec<String> = (0..10).map(|i| format!("p{i}")).collect();
    assert_eq!(order, sent, "in the order sent, each once");
    assert_eq!(bus.metrics().topic("points").unwrap().acked, 10);
    assert_eq!(bus.wal_stats().live, 0);
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_linger_ends_when_the_batch_fills() {
    let calls = Arc::new(Calls::default());
    let bus = start(recording(&calls, 3, Duration::from_secs(30), |_| {
        Ack::Ack.into()
    }))
    .await;
    let t0 = tokio::time::Instant::now();
    bus.send("points", b"a".to_vec()).await.unwrap();
    // The clock moves to 10 s only once the worker waits (lingers) with its one message.
    tokio::time::sleep(Duration::from_secs(10)).await;
    bus.send_batch("points", points(&["b", "c"])).await.unwrap();
    bus.wait_idle(Duration::from_secs(120)).await.unwrap();
    let all = calls.all();
    assert_eq!(calls.sizes(), [3], "{all:?}");
    assert_eq!(
        all[0].at,
        t0 + Duration::from_secs(10),
        "called when the batch filled, before the linger ran out"
    );
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn no_linger_while_the_bus_shuts_down() {
    let calls = Arc::new(Calls::default());
    let linger = Duration::from_secs(3600);
    let bus = start(recording(&calls, 100, linger, |_| Ack::Ack.into())).await;
    let t0 = tokio::time::Instant::now();
    bus.send_batch("points", points(&["a", "b"])).await.unwrap();
    tokio::task::yield_now().await; // the worker takes both and lingers
    bus.shutdown(ShutdownStrategy::Drain { timeout: WAIT })
        .await
        .unwrap();
    let all = calls.all();
    assert_eq!(calls.sizes(), [2]);
    assert!(
        all[0].at < t0 + linger,
        "the shutdown ended the linger: called at {:?}",
        all[0].at - t0
    );
    assert_eq!(bus.wal_stats().live, 0, "drained");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vec_of_acks_answers_each_message() {
    let calls = Arc::new(Calls::default());
    // "retry" is retried once (then acked), "dead" dies at once, the rest are acked.
    let spec = recording(&calls, 8, Duration::from_millis(20), |batch| {
        batch
            .iter()
            .map(|m| match (&m.payload.0[..], m.attempts) {
                (b"retry", 1) => Ack::retry(),
                (b"dead", _) => Ack::dead(),
                _ => Ack::Ack,
            })
            .collect::<Vec<_>>()
            .into()
    });
    let bus = start(spec).await;
    bus.send_batch("points", points(&["a", "retry", "dead", "b"]))
        .await
        .unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let by = calls.attempts_by_payload();
    assert_eq!(by["a"], [1]);
    assert_eq!(by["b"], [1]);
    assert_eq!(by["dead"], [1]);
    assert_eq!(by["retry"], [1, 2], "retried on its own, in a later batch");
    assert_eq!(
        dead_of(&bus).await,
        [("dead".to_owned(), 1, DeadReason::Explicit.to_string())]
    );
    let m = bus.metrics().topic("points").unwrap();
    assert_eq!((m.acked, m.retried, m.dead), (3, 1, 1));
    assert_eq!(bus.wal_stats().live, 0);
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_batch_handler_fails_each_message_on_its_own_count() {
    let calls = Arc::new(Calls::default());
    let spec = recording(&calls, 3, Duration::from_millis(5), |batch| {
        if batch.iter().any(|m| &m.payload.0[..] == b"poison") {
            panic!("poisoned batch");
        }
        Ack::Ack.into()
    })
    .retries(2)
    .backoff(Backoff::fixed(Duration::from_millis(5)));
    let bus = start(spec).await;
    bus.send_batch("points", points(&["poison", "x", "y", "z", "w"]))
        .await
        .unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let by = calls.attempts_by_payload();
    // The poison is handed over 3 times (1 + 2 retries), counting its own attempts, then dies.
    assert_eq!(by["poison"], [1, 2, 3]);
    let dead = dead_of(&bus).await;
    assert!(
        dead.iter()
            .any(|(p, a, r)| p == "poison" && *a == 3 && r.contains("poisoned batch")),
        "{dead:?}"
    );
    // Every other message is acked or dead-lettered after its own three attempts; none lost,
    // none handled more often than its retries allow.
    let mut accounted = 0;
    for p in ["x", "y", "z", "w"] {
        let attempts = &by[p];
        assert_eq!(
            attempts,
            &(1..=attempts.len() as u32).collect::<Vec<_>>(),
            "{p}: its own count"
        );
        assert!(attempts.len() <= 3, "{p}: {attempts:?}");
        // Dead only after its own three attempts (each in a poisoned batch); a message whose
        // retry landed in a batch without the poison was acked then.
        if let Some((_, a, r)) = dead.iter().find(|(d, _, _)| d == p) {
            assert_eq!(
                (*a, attempts.len()),
                (3, 3),
                "{p}: dead only after 3 attempts"
            );
            assert!(r.contains("poisoned batch"), "{p}: {r}");
        }
        accounted += 1;
    }
    assert_eq!(accounted, 4);
    let m = bus.metrics().topic("points").unwrap();
    assert_eq!(m.acked + m.dead, 5, "every message ended once: {m:?}");
    assert_eq!(bus.wal_stats().live, 0);
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_call_past_its_timeout_is_a_failed_attempt_of_each_message() {
    let calls = Arc::new(Calls::default());
    let recorder = calls.clone();
    let spec = HandlerSpec::batch(
        "store",
        "points",
        batch_fn(move |batch: Vec<EMessage>| {
            let calls = recorder.clone();
            async move {
                calls.record(&batch);
                std::future::pending::<()>().await;
                Ack::Ack
            }
        }),
        10,
        Duration::ZERO,
    )
    .timeout(Duration::from_millis(20))
    .retries(1)
    .backoff(Backoff::fixed(Duration::from_millis(1)));
    let bus = start(spec).await;
    bus.send_batch("points", points(&["a", "b", "c"]))
        .await
        .unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let dead = dead_of(&bus).await;
    let timeout = DeadReason::Timeout.to_string();
    assert_eq!(
        dead,
        ["a", "b", "c"].map(|p| (p.to_owned(), 2, timeout.clone()))
    );
    for (p, attempts) in calls.attempts_by_payload() {
        assert_eq!(attempts, [1, 2], "{p}");
    }
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vec_of_the_wrong_length_fails_the_whole_batch() {
    let calls = Arc::new(Calls::default());
    // One answer too many, whatever the batch: which answer is whose cannot be known.
    let spec = recording(&calls, 10, Duration::from_millis(5), |batch| {
        vec![Ack::Ack; batch.len() + 1].into()
    })
    .retries(0);
    let bus = start(spec).await;
    bus.send_batch("points", points(&["a", "b"])).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let dead = dead_of(&bus).await;
    assert_eq!(dead.len(), 2, "{dead:?}");
    for (_, attempts, reason) in &dead {
        assert_eq!(*attempts, 1);
        assert!(
            reason.starts_with("batch handler answered ") && reason.contains(" acks for "),
            "{reason}"
        );
    }
    assert_eq!(bus.metrics().topic("points").unwrap().acked, 0);
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_handlers_are_checked_at_build() {
    let ack = |_: &[EMessage]| BatchAck::All(Ack::Ack);
    let calls = Arc::new(Calls::default());
    let zero = recording(&calls, 0, Duration::ZERO, ack);
    let e = event_base::builder()
        .handler(zero)
        .build()
        .await
        .unwrap_err();
    assert!(e.to_string().contains("batch = 0"), "{e}");
    let outbox = recording(&calls, 2, Duration::ZERO, ack).outbox(true);
    let e = event_base::builder()
        .handler(outbox)
        .build()
        .await
        .unwrap_err();
    assert!(e.to_string().contains("has an outbox"), "{e}");
}

// The macro: `batch = n, linger_ms = ms` on an `async fn(batch: &[EMessage])`.

/// Dead for the payloads "bad", acked otherwise.
#[handler(topic = "macro.points", batch = 16, linger_ms = 5, retries = 0)]
async fn store_points(batch: &[EMessage]) -> Vec<Ack> {
    batch
        .iter()
        .map(|m| {
            if &m.payload.0[..] == b"bad" {
                Ack::dead()
            } else {
                Ack::Ack
            }
        })
        .collect()
}

/// `Err` for every batch: each message dead-lettered with the text.
#[handler(topic = "macro.failing", batch = 4, retries = 0)]
async fn failing_points(_batch: &[EMessage]) -> Result<(), String> {
    Err("db down".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_macro_makes_a_batch_handler() {
    let spec = __EVENT_BASE_HANDLER_STORE_POINTS.to_spec();
    assert_eq!(
        spec.batch.as_ref().map(|b| (b.max, b.linger)),
        Some((16, Duration::from_millis(5)))
    );
    let answer = StorePointsHandler
        .handle_batch(&[
            EMessage::standard("macro.points", b"ok".to_vec()),
            EMessage::standard("macro.points", b"bad".to_vec()),
        ])
        .await;
    assert_eq!(answer, BatchAck::Each(vec![Ack::Ack, Ack::dead()]));

    let bus = event_base::builder()
        .with_registered_handlers()
        .build()
        .await
        .unwrap();
    let mut msgs = Vec::new();
    for p in ["ok", "bad", "fine"] {
        msgs.push(EMessage::standard("macro.points", p.as_bytes().to_vec()));
    }
    bus.send_batch("macro.points", msgs).await.unwrap();
    let mut failing = Vec::new();
    for p in ["f1", "f2"] {
        failing.push(EMessage::standard("macro.failing", p.as_bytes().to_vec()));
    }
    bus.send_batch("macro.failing", failing).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        dead_of(&bus).await,
        [
            ("bad".to_owned(), 1, DeadReason::Explicit.to_string()),
            ("f1".to_owned(), 1, "db down".to_owned()),
            ("f2".to_owned(), 1, "db down".to_owned()),
        ]
    );
    assert_eq!(bus.metrics().topic("macro.points").unwrap().acked, 2);
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_handler_over_a_file_wal_completes_and_replays() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(tokio::sync::Notify::new());
    let calls = Arc::new(Calls::default());
    {
        // First run: six messages acked in batches, then two whose handler never returns.
        let wal = PersistentWal::builder(dir.path())
            .sync_policy(SyncPolicy::Always)
            .open()
            .unwrap();
        let (recorder, stuck) = (calls.clone(), gate.clone());
        let spec = HandlerSpec::batch(
            "store",
            "points",
            batch_fn(move |batch: Vec<EMessage>| {
                let (calls, stuck) = (recorder.clone(), stuck.clone());
                async move {
                    calls.record(&batch);
                    if batch.iter().any(|m| m.payload.0.starts_with(b"late")) {
                        stuck.notify_one();
                        std::future::pending::<()>().await;
                    }
                    Ack::Ack
                }
            }),
            4,
            Duration::from_millis(5),
        );
        let bus = EventBus::builder()
            .wal(wal)
            .queue(FlumeQueueFactory::default())
            .handler(spec)
            .build()
            .await
            .unwrap();
        bus.send_batch("points", numbered(6)).await.unwrap();
        bus.wait_idle(WAIT).await.unwrap();
        bus.send_batch("points", points(&["late1", "late2"]))
            .await
            .unwrap();
        gate.notified().await;
        // Stopped mid-batch: the two stay in the WAL (as a crash would leave them).
        let _ = bus
            .shutdown(ShutdownStrategy::Drain {
                timeout: Duration::from_millis(50),
            })
            .await;
    }
    let replayed = Arc::new(Calls::default());
    let wal = PersistentWal::open(dir.path()).unwrap();
    let bus = EventBus::builder()
        .wal(wal)
        .queue(FlumeQueueFactory::default())
        .handler(recording(&replayed, 4, Duration::from_millis(5), |_| {
            Ack::Ack.into()
        }))
        .build()
        .await
        .unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let mut again: Vec<String> = replayed.attempts_by_payload().into_keys().collect();
    again.sort();
    assert_eq!(
        again,
        ["late1", "late2"],
        "the acked batches completed in the WAL"
    );
    bus.shutdown(ShutdownStrategy::Drain { timeout: WAIT })
        .await
        .unwrap();
    assert_eq!(bus.wal_stats().live, 0);
}
