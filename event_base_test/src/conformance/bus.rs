//! The bus's behaviour (delivery modes, retries with backoff, dead letters, delayed delivery,
//! backpressure, `Drain`), case by case, for any backend: the same cases over the in-memory
//! queues, the file WAL and Redis.
//!
//! A backend is a [`BusBackend`]: it takes a builder holding the case's handlers and builds
//! the bus over its WAL and queues, bounded as the case asks. Each case is a public
//! `async fn` that panics on the first broken promise; none sleeps to synchronise, it awaits
//! a [`Probe`] count, a [`Gate`], `wait_idle` or the bus's own answers.
//!
//! Run them all over a backend with [`bus_conformance!`](crate::bus_conformance).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use event_base::{
    Ack, CoreError, DeadReason, DeliveryMode, EMessage, EventBus, EventBusBuilder, SendOptions,
    ShutdownStrategy,
};

use super::finishes_at_once;
use crate::{Gate, Probe, Seen, WAIT};

/// A backend the bus runs over.
pub trait BusBackend {
    /// Builds the bus of `builder` (which holds the case's handlers and settings) over this
    /// backend's WAL and queue factory, its queues bounded to `bound` messages.
    fn build(&self, builder: EventBusBuilder, bound: usize) -> impl Future<Output = EventBus>;
}

/// The bound of the cases that do not fill their queues.
pub const ROOMY: usize = 1024;

/// The attempts of the deliveries of `id` to handler `label`, in order.
pub fn attempts_of(seen: &[Seen], label: &str, id: &str) -> Vec<u32> {
    seen.iter()
        .filter(|s| s.label == label && s.id == id)
        .map(|s| s.attempts)
        .collect()
}

/// How many deliveries of `id` handler `label` had.
fn times(seen: &[Seen], label: &str, id: &str) -> usize {
    attempts_of(seen, label, id).len()
}

/// A `Standard` message gives each handler of its topic one copy, handled by one of its
/// workers: two handlers of two workers each, 50 messages, each handled once per handler.
pub async fn standard_is_handled_once_per_handler(b: &impl BusBackend) {
    const N: usize = 50;
    let probe = Probe::new();
    let bus = b
        .build(
            EventBus::builder()
                .handler(probe.handler("billing", "orders", |_| Ack::Ack).workers(2))
                .handler(probe.handler("notify", "orders", |_| Ack::Ack).workers(2)),
            ROOMY,
        )
        .await;
    let mut ids = Vec::new();
    for i in 0..N as u32 {
        ids.push(bus.send("orders", i.to_be_bytes().to_vec()).await.unwrap());
    }
    probe.wait_for(2 * N, WAIT).await;
    bus.wait_idle(WAIT).await.unwrap();
    let seen = probe.seen();
    assert_eq!(seen.len(), 2 * N, "one copy per handler, no more");
    for id in &ids {
        assert_eq!(times(&seen, "billing", id), 1, "billing handles {id} once");
        assert_eq!(times(&seen, "notify", id), 1, "notify handles {id} once");
    }
}

/// `Broadcast` reaches every worker of the handler once; `Repeated(3)` is handled three
/// times in all.
pub async fn broadcast_reaches_every_worker_and_repeated_counts(b: &impl BusBackend) {
    const WORKERS: usize = 3;
    let probe = Probe::new();
    let bus = b
        .build(
            EventBus::builder().handler(
                probe
                    .handler("cache", "cache", |_| Ack::Ack)
                    .workers(WORKERS),
            ),
            ROOMY,
        )
        .await;
    assert_eq!(bus.workers("cache").len(), WORKERS);
    let everyone = EMessage::new("cache", b"all".to_vec(), DeliveryMode::Broadcast, None);
    let everyone = bus.send("cache", everyone).await.unwrap();
    let thrice = EMessage::new("cache", b"3".to_vec(), DeliveryMode::Repeated(3), None);
    let thrice = bus.send("cache", thrice).await.unwrap();
    probe.wait_for(WORKERS + 3, WAIT).await;
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&everyone), WORKERS, "once per worker");
    assert_eq!(probe.count_of(&thrice), 3, "Repeated(3) is handled 3 times");
    assert_eq!(probe.count(), WORKERS + 3, "nothing else was delivered");
}

/// The handling times of each delivery, by handler answer, in order: `(attempts, when)`.
type Times = Arc<Mutex<Vec<(u32, SystemTime)>>>;

/// A handler that fails its first two deliveries with a retry after `backoff`, then
/// succeeds: it is delivered three times, `attempts` counted, each retry no sooner than its
/// backoff after the failed delivery.
pub async fn a_failed_delivery_is_retried_after_its_backoff(b: &impl BusBackend) {
    let backoff = Duration::from_millis(100);
    let probe = Probe::new();
    let times: Times = Arc::default();
    let handler = {
        let times = times.clone();
        probe.handler("work", "jobs", move |m: &EMessage| {
            times.lock().unwrap().push((m.attempts, SystemTime::now()));
            if m.attempts < 3 {
                Ack::NoAck {
                    retry_after: Some(backoff),
                    max_retries: 5,
                }
            } else {
                Ack::Ack
            }
        })
    };
    let bus = b.build(EventBus::builder().handler(handler), ROOMY).await;
    let id = bus.send("jobs", b"flaky".to_vec()).await.unwrap();
    probe.wait_for(3, WAIT).await;
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        attempts_of(&probe.seen(), "work", &id),
        vec![1, 2, 3],
        "retried until it succeeded, each attempt counted"
    );
    let times = times.lock().unwrap().clone();
    for pair in times.windows(2) {
        let (failed, retry) = (pair[0].1, pair[1].1);
        // The retry is due `backoff` after the failed delivery answered, which was after
        // `failed` was read: an ordering of clock readings, not a speed.
        assert!(
            retry >= failed + backoff,
            "attempt {} came before its backoff: {:?} after attempt {}",
            pair[1].0,
            retry.duration_since(failed).unwrap_or_default(),
            pair[0].0
        );
    }
    assert!(bus.dead_letters().await.unwrap().is_empty());
}

/// Past its retries a message is a dead letter, listed with its reason and handler;
/// replayed once the handler is fixed, it is delivered again (from attempt 1) and leaves
/// the list.
pub async fn past_its_retries_a_message_is_a_dead_letter_and_replays(b: &impl BusBackend) {
    let probe = Probe::new();
    let fixed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handler = {
        let fixed = fixed.clone();
        probe.handler("work", "jobs", move |_: &EMessage| {
            if fixed.load(std::sync::atomic::Ordering::SeqCst) {
                Ack::Ack
            } else {
                Ack::NoAck {
                    retry_after: None,
                    max_retries: 1,
                }
            }
        })
    };
    let bus = b.build(EventBus::builder().handler(handler), ROOMY).await;
    let id = bus.send("jobs", b"doomed".to_vec()).await.unwrap();
    probe.wait_for(2, WAIT).await;
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        attempts_of(&probe.seen(), "work", &id),
        vec![1, 2],
        "1 + max_retries deliveries"
    );
    let dead = bus.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].message.id, id.to_string());
    assert_eq!(dead[0].reason, DeadReason::MaxRetriesExceeded);
    assert_eq!(dead[0].handlers, vec!["work".to_owned()]);

    fixed.store(true, std::sync::atomic::Ordering::SeqCst);
    bus.replay_dead_letter(&id).await.unwrap();
    probe.wait_for(3, WAIT).await;
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        attempts_of(&probe.seen(), "work", &id),
        vec![1, 2, 1],
        "replayed from the first attempt"
    );
    assert!(
        bus.dead_letters().await.unwrap().is_empty(),
        "a replayed dead letter leaves the list"
    );
}

/// A message due 200 ms after it is sent is not handled before it is due.
pub async fn a_delayed_message_is_not_handled_before_it_is_due(b: &impl BusBackend) {
    let probe = Probe::new();
    let handled: Arc<Mutex<Vec<SystemTime>>> = Arc::default();
    let handler = {
        let handled = handled.clone();
        probe.handler("later", "later", move |_: &EMessage| {
            handled.lock().unwrap().push(SystemTime::now());
            Ack::Ack
        })
    };
    let bus = b.build(EventBus::builder().handler(handler), ROOMY).await;
    let at = SystemTime::now() + Duration::from_millis(200);
    let msg = EMessage::standard("later", b"x".to_vec()).with_deliver_at(at);
    let id = bus.send("later", msg).await.unwrap();
    probe.wait_for(1, WAIT).await;
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count_of(&id), 1, "delivered once");
    let handled = handled.lock().unwrap().clone();
    assert_eq!(handled.len(), 1);
    assert!(
        handled[0] >= at,
        "handled {:?} before it was due",
        at.duration_since(handled[0]).unwrap_or_default()
    );
}

/// With a small bound and its handler held, the bus refuses `try_send` once full and a plain
/// `send` waits; once the handler is released the waiting send completes and every accepted
/// message is delivered once.
pub async fn a_full_bus_makes_a_send_wait_until_released(b: &impl BusBackend) {
    const BOUND: usize = 4;
    // Far more than the queue and the pipeline after it hold: a bus that accepts this many
    // with its handler held is not bounded.
    const AT_MOST: usize = 64;
    let probe = Probe::new();
    let gate = Gate::new();
    let bus = b
        .build(
            EventBus::builder()
                .batch_size(1)
                .handler(probe.gated_handler("slow", "slow", &gate, |_| Ack::Ack)),
            BOUND,
        )
        .await;
    // The handler holds one first: a worker that had not yet claimed when the queue filled
    // would free a place later, and the waiting send would then go through.
    let first = bus
        .send("slow", b"first".to_vec())
        .await
        .unwrap()
        .to_string();
    probe.wait_for(1, WAIT).await;
    let mut accepted = vec![first];
    let refused = || SendOptions::new().try_send();
    let (mut blocked, last) = loop {
        // Fill until the bus refuses.
        loop {
            let msg = EMessage::standard("slow", b"fill".to_vec());
            match bus.send_with("slow", msg, refused()).await {
                Ok(id) => accepted.push(id.to_string()),
                Err(CoreError::QueueFull { topic }) => {
                    assert_eq!(topic, "slow");
                    break;
                }
                Err(e) => panic!("unexpected {e:?}"),
            }
            assert!(
                accepted.len() <= AT_MOST,
                "a held bus bounded to {BOUND} accepted {} messages",
                accepted.len()
            );
        }
        let msg = EMessage::standard("slow", b"last".to_vec());
        let id = msg.id.clone();
        let mut send = Box::pin(bus.send("slow", msg));
        match finishes_at_once(&mut send).await {
            None => break (send, id),
            // The pipeline moved one on meanwhile and freed a place: fill again.
            Some(done) => {
                done.unwrap();
                accepted.push(id);
            }
        }
    };
    // The send is waiting, and not for the wire: the bus is still full.
    match bus
        .send_with("slow", EMessage::standard("slow", b"x".to_vec()), refused())
        .await
    {
        Err(CoreError::QueueFull { .. }) => {}
        other => panic!("expected the bus to be still full, got {other:?}"),
    }
    assert!(
        finishes_at_once(&mut blocked).await.is_none(),
        "a send into a full bus waits while the handler is held"
    );
    gate.open();
    let id = tokio::time::timeout(WAIT, &mut blocked)
        .await
        .expect("the send finished once the handler made room")
        .unwrap();
    assert_eq!(id, last);
    accepted.push(last);
    probe.wait_for(accepted.len(), WAIT).await;
    bus.wait_idle(WAIT).await.unwrap();
    let seen = probe.seen();
    assert_eq!(seen.len(), accepted.len(), "nothing delivered twice");
    for id in &accepted {
        assert_eq!(probe.count_of(id), 1, "{id} delivered once");
    }
}

/// `Drain` with the handler held waits; released, it handles every message the node holds
/// and reports `drained`, with nothing left for replay.
pub async fn drain_handles_what_the_node_holds(b: &impl BusBackend) {
    const N: usize = 3;
    let probe = Probe::new();
    let gate = Gate::new();
    let bus = b
        .build(
            EventBus::builder().handler(probe.gated_handler("work", "jobs", &gate, |_| Ack::Ack)),
            ROOMY,
        )
        .await;
    let mut ids = Vec::new();
    for i in 0..N {
        ids.push(
            bus.send("jobs", format!("job {i}").into_bytes())
                .await
                .unwrap(),
        );
    }
    probe.wait_for(1, WAIT).await;
    // The node holds all of them (one in the handler, the rest claimed with it); a backend
    // whose queue is elsewhere counts them once claimed, which there is nothing to await.
    crate::redis_cluster::until("the node holds every message", async || {
        bus.in_flight() == N as u64
    })
    .await;
    let drain = bus.shutdown(ShutdownStrategy::Drain { timeout: WAIT });
    tokio::pin!(drain);
    assert!(
        still_pending(&mut drain).await,
        "the drain waits for the held handler"
    );
    gate.open();
    let report = drain.await.expect("drained");
    assert!(report.drained, "{report:?}");
    assert_eq!(report.left_for_replay, 0, "{report:?}");
    let finished = probe.finished();
    assert_eq!(
        finished.len(),
        N,
        "every held message handled before it stopped"
    );
    for id in &ids {
        assert_eq!(probe.count_of(id), 1, "{id} handled once");
    }
}

/// Polls a pinned future once: `true` if it has not finished.
async fn still_pending<F: Future + Unpin>(f: &mut F) -> bool {
    tokio::select! {
        biased;
        _ = f => false,
        _ = std::future::ready(()) => true,
    }
}

/// One `#[tokio::test]` per bus case for each backend: `name => expression making a
/// [`BusBackend`]`, evaluated afresh in each case.
///
/// ```ignore
/// event_base_test::bus_conformance! {
///     memory => Memory,
/// }
/// ```
#[macro_export]
macro_rules! bus_conformance {
    ($($backend:ident => $make:expr),* $(,)?) => {
        $(
            $crate::__conformance_cases!(bus, $backend => $make;
                standard_is_handled_once_per_handler,
                broadcast_reaches_every_worker_and_repeated_counts,
                a_failed_delivery_is_retried_after_its_backoff,
                past_its_retries_a_message_is_a_dead_letter_and_replays,
                a_delayed_message_is_not_handled_before_it_is_due,
                a_full_bus_makes_a_send_wait_until_released,
                drain_handles_what_the_node_holds,
            );
        )*
    };
}
