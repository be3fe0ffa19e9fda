//! Order per key (`EMessage::with_key`): for each handler, messages with the same key are
//! handled one at a time, in send order, across its workers, across retries and across a
//! restart; different keys run in parallel.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use event_base::prelude::*;
use event_base::PersistentWal;
use event_base_test::{Gate, Probe, WAIT};
use tokio::sync::Notify;

const KEYS: u32 = 8;
const PER_KEY: u32 = 40;

/// What an ordered handler saw.
#[derive(Default)]
struct Seen {
    /// Keys being handled now.
    busy: Mutex<HashSet<String>>,
    /// Deliveries, in the order they started: (key, sequence number, attempts).
    log: Mutex<Vec<(String, u32, u32)>>,
    /// A delivery started while another of its key was being handled.
    overlaps: AtomicUsize,
    /// Most deliveries under way at once (any keys).
    running: AtomicUsize,
    most_running: AtomicUsize,
    acked: AtomicUsize,
    changed: Notify,
}

impl Seen {
    async fn wait_acked(&self, n: usize) {
        tokio::time::timeout(WAIT, async {
            loop {
                let changed = self.changed.notified();
                if self.acked.load(Ordering::Acquire) >= n {
                    return;
                }
                changed.await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} of {n} acked in time",
                self.acked.load(Ordering::Acquire)
            )
        });
    }

    /// Each key's sequence numbers in the order their deliveries started.
    fn per_key(&self) -> HashMap<String, Vec<u32>> {
        let mut out: HashMap<String, Vec<u32>> = HashMap::new();
        for (key, seq, _) in self.log.lock().unwrap().iter() {
            out.entry(key.clone()).or_default().push(*seq);
        }
        out
    }
}

/// Records each delivery, yields so the other workers run meanwhile, and fails the first
/// delivery of every message whose sequence number is `fail_every`-th (retried after 1 ms).
struct Ordered {
    seen: Arc<Seen>,
    fail_every: Option<u32>,
}

#[async_trait]
impl EHandler for Ordered {
    async fn handler(&self, msg: &EMessage) -> Ack {
        let key = msg.key().expect("every message here has a key").to_owned();
        let seq = u32::from_be_bytes(msg.payload.0[..4].try_into().unwrap());
        if !self.seen.busy.lock().unwrap().insert(key.clone()) {
            self.seen.overlaps.fetch_add(1, Ordering::AcqRel);
        }
        let now = self.seen.running.fetch_add(1, Ordering::AcqRel) + 1;
        self.seen.most_running.fetch_max(now, Ordering::AcqRel);
        self.seen
            .log
            .lock()
            .unwrap()
            .push((key.clone(), seq, msg.attempts));
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        self.seen.running.fetch_sub(1, Ordering::AcqRel);
        self.seen.busy.lock().unwrap().remove(&key);
        let fail = self
            .fail_every
            .is_some_and(|n| seq % n == n - 1 && msg.attempts == 1);
        if fail {
            return Ack::NoAck {
                retry_after: Some(std::time::Duration::from_millis(1)),
                max_retries: 3,
            };
        }
        self.seen.acked.fetch_add(1, Ordering::AcqRel);
        self.seen.changed.notify_waiters();
        Ack::Ack
    }
}

/// The `ledger` handler of `accounts`, 4 workers, recording into `seen`.
fn ledger(seen: &Arc<Seen>, fail_every: Option<u32>) -> HandlerSpec {
    HandlerSpec::new(
        "ledger",
        "accounts",
        Ordered {
            seen: seen.clone(),
            fail_every,
        },
    )
    .workers(4)
}

/// A bus on `server`'s Redis queues (and its WAL) running `handler`.
async fn on_redis(
    server: &event_base_test::redis_server::RedisServer,
    handler: HandlerSpec,
) -> EventBus {
    let queue = event_base::RedisQueueFactory::connect(&server.url())
        .await
        .unwrap();
    EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(handler)
        .build()
        .await
        .unwrap()
}

fn keyed(key: u32, seq: u32) -> EMessage {
    EMessage::standard("accounts", seq.to_be_bytes().to_vec()).with_key(format!("account-{key}"))
}

/// Sends `PER_KEY` messages for each of `KEYS` keys, interleaved: key 0's first, key 1's
/// first, ..., key 0's second, ...
async fn send_interleaved(bus: &EventBus) {
    for seq in 0..PER_KEY {
        for key in 0..KEYS {
            bus.send("accounts", keyed(key, seq)).await.unwrap();
        }
    }
}

fn assert_in_order(seen: &Seen) {
    assert_eq!(
        seen.overlaps.load(Ordering::Acquire),
        0,
        "two messages of one key were handled at once"
    );
    let per_key = seen.per_key();
    assert_eq!(per_key.len(), KEYS as usize);
    for (key, seqs) in per_key {
        // Non-decreasing: a retried message comes again before the next one of its key.
        assert!(
            seqs.windows(2).all(|w| w[0] <= w[1]),
            "key {key} handled out of order: {seqs:?}"
        );
        let distinct: HashSet<u32> = seqs.iter().copied().collect();
        assert_eq!(distinct.len(), PER_KEY as usize, "key {key}: {seqs:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_key_at_a_time_in_send_order_across_four_workers_and_retries() {
    let seen = Arc::new(Seen::default());
    let bus = EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::default())
        .handler(ledger(&seen, Some(7)))
        .build()
        .await
        .unwrap();
    send_interleaved(&bus).await;
    seen.wait_acked((KEYS * PER_KEY) as usize).await;
    bus.wait_idle(WAIT).await.unwrap();
    assert_in_order(&seen);
    // The retries happened, and different keys did run side by side (so the order above
    // is the keys' doing, not one worker handling everything).
    let retried = seen.log.lock().unwrap().iter().filter(|e| e.2 > 1).count();
    assert_eq!(retried, (KEYS * (PER_KEY / 7)) as usize);
    assert!(
        seen.most_running.load(Ordering::Acquire) > 1,
        "keys ran in parallel"
    );
    bus.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn messages_without_a_key_are_not_held_back_by_a_key() {
    // A keyed message whose handler is stuck holds its key only: unkeyed messages and
    // other keys go on.
    let probe = Probe::new();
    let gate = Gate::new();
    let bus = EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::default())
        .handler(
            probe
                .gated_handler("h", "jobs", &gate, |_| Ack::Ack)
                .workers(3),
        )
        .build()
        .await
        .unwrap();
    let stuck = bus
        .send(
            "jobs",
            EMessage::standard("jobs", b"a".to_vec()).with_key("k"),
        )
        .await
        .unwrap();
    let behind = bus
        .send(
            "jobs",
            EMessage::standard("jobs", b"b".to_vec()).with_key("k"),
        )
        .await
        .unwrap();
    let free = bus.send("jobs", b"c".to_vec()).await.unwrap();
    let other = bus
        .send(
            "jobs",
            EMessage::standard("jobs", b"d".to_vec()).with_key("other"),
        )
        .await
        .unwrap();
    gate.release([free.as_str(), other.as_str()]);
    probe
        .wait_until("the unkeyed and other-key messages", WAIT, |s| {
            s.iter()
                .filter(|s| s.id == free.as_str() || s.id == other.as_str())
                .count()
                == 2
        })
        .await;
    // Taken from the queue before the two above (first in, first out), yet not started.
    assert!(
        probe.seen().iter().all(|s| s.id != behind.as_str()),
        "the second message of key k waits for the first"
    );
    gate.open();
    bus.wait_idle(WAIT).await.unwrap();
    let order: Vec<String> = probe.seen().into_iter().map(|s| s.id).collect();
    let at = |id: &str| order.iter().position(|s| s == id).unwrap();
    assert!(at(stuck.as_str()) < at(behind.as_str()));
    bus.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_per_key_holds_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    // First life: the handler never finishes; everything is left for replay.
    let never = Gate::new();
    let probe = Probe::new();
    let bus = EventBus::builder()
        .wal(PersistentWal::open(dir.path()).unwrap())
        .queue(FlumeQueueFactory::default())
        .handler(
            probe
                .gated_handler("ledger", "accounts", &never, |_| Ack::Ack)
                .workers(4),
        )
        .build()
        .await
        .unwrap();
    send_interleaved(&bus).await;
    probe.wait_for(4, WAIT).await; // every worker holds one
    let report = bus.shutdown(ShutdownStrategy::Force).await.unwrap();
    assert_eq!(report.left_for_replay, u64::from(KEYS * PER_KEY));
    drop(bus);

    // Second life, on the same files: replay keeps each key's order.
    let seen = Arc::new(Seen::default());
    let bus = EventBus::builder()
        .wal(PersistentWal::open(dir.path()).unwrap())
        .queue(FlumeQueueFactory::default())
        .handler(ledger(&seen, Some(5)))
        .build()
        .await
        .unwrap();
    seen.wait_acked((KEYS * PER_KEY) as usize).await;
    bus.wait_idle(WAIT).await.unwrap();
    assert_in_order(&seen);
    bus.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_redis_one_process_keeps_each_keys_order_across_its_workers_and_retries() {
    // The router claims the stream's entries in order and puts keyed ones in their lines as
    // it claims them; a keyed retry stays here with its entry claimed.
    let server = event_base_test::redis_server::RedisServer::start();
    let seen = Arc::new(Seen::default());
    let bus = on_redis(&server, ledger(&seen, Some(6))).await;
    send_interleaved(&bus).await;
    seen.wait_acked((KEYS * PER_KEY) as usize).await;
    assert_in_order(&seen);
    let retried = seen.log.lock().unwrap().iter().filter(|e| e.2 > 1).count();
    assert_eq!(retried, (KEYS * (PER_KEY / 6)) as usize);
    assert!(seen.most_running.load(Ordering::Acquire) > 1);
    bus.close().await.unwrap();
}

#[tokio::test]
async fn a_key_that_is_empty_or_too_long_is_refused() {
    let bus = EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::default())
        .handler(Probe::new().handler("h", "jobs", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    for key in [String::new(), "k".repeat(256)] {
        let err = bus
            .send(
                "jobs",
                EMessage::standard("jobs", b"x".to_vec()).with_key(key),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, CoreError::InvalidParameter { name: "key", .. }),
            "{err}"
        );
    }
    bus.close().await.unwrap();
}

/// Records overlaps as [`Ordered`] does, but each delivery takes `work`.
struct Slow {
    seen: Arc<Seen>,
    work: std::time::Duration,
}

#[async_trait]
impl EHandler for Slow {
    async fn handler(&self, msg: &EMessage) -> Ack {
        let key = msg.key().expect("every message here has a key").to_owned();
        let seq = u32::from_be_bytes(msg.payload.0[..4].try_into().unwrap());
        if !self.seen.busy.lock().unwrap().insert(key.clone()) {
            self.seen.overlaps.fetch_add(1, Ordering::AcqRel);
        }
        self.seen
            .log
            .lock()
            .unwrap()
            .push((key.clone(), seq, msg.attempts));
        tokio::time::sleep(self.work).await;
        self.seen.busy.lock().unwrap().remove(&key);
        self.seen.acked.fetch_add(1, Ordering::AcqRel);
        self.seen.changed.notify_waiters();
        Ack::Ack
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_redis_a_delayed_keyed_message_waits_for_its_key_when_due() {
    // Redis keeps the delayed message and releases it when due (its `deliver_at` stays
    // set): it then takes its place in its key's line, behind the ones of its key still
    // queued or running (it is due mid-run), rather than run beside them.
    let server = event_base_test::redis_server::RedisServer::start();
    let seen = Arc::new(Seen::default());
    let slow = Slow {
        seen: seen.clone(),
        work: std::time::Duration::from_millis(20),
    };
    let bus = on_redis(
        &server,
        HandlerSpec::new("ledger", "accounts", slow).workers(4),
    )
    .await;
    let later = keyed(0, 1_000).with_delay(std::time::Duration::from_millis(150));
    bus.send("accounts", later).await.unwrap();
    // 400 ms of work in the key: the delayed one is due while they run.
    for seq in 0..20 {
        bus.send("accounts", keyed(0, seq)).await.unwrap();
    }
    seen.wait_acked(21).await;
    assert_eq!(
        seen.overlaps.load(Ordering::Acquire),
        0,
        "the delayed message ran beside another of its key: {:?}",
        seen.per_key()
    );
    // Every other one was sent (and queued) before it was due: it comes after them.
    let order = seen.per_key().remove("account-0").unwrap();
    assert_eq!(order.last(), Some(&1_000), "{order:?}");
    bus.close().await.unwrap();
}
