//! A backlog waiting for a stuck worker, and an idle bus, do no work: every loop waits on a
//! channel, a notify or a timer.
//!
//! Measured without a clock. On a paused tokio clock time moves only when every task waits,
//! so a minute passes only if nothing is left to run; the runtime's park count then says how
//! many times the bus woke up in that minute. The monitor's heartbeat (once a second) is the
//! only timer the bus may keep: a loop that polls (sleep, retry) wakes it thousands of times,
//! and one that spins never lets the minute pass at all, which the watchdog reports. How much
//! CPU an idle bus burns on a real clock is the throughput binary's `idle` scenario.

use std::sync::mpsc;
use std::time::Duration;

use event_base::Ack;
use event_base_test::{Gate, Probe, WAIT};

/// How long the bus is watched, on the paused clock.
const WINDOW: Duration = Duration::from_secs(60);
/// The monitor's interval (the default).
const HEARTBEAT: Duration = Duration::from_secs(1);
/// Parks allowed in `WINDOW`: a few per heartbeat (a paused runtime parks about three times
/// to let a timer fire and go idle again), and a few to settle. A loop that polls every
/// millisecond would park some 60,000 times.
const ALLOWED: u64 = 4 * (WINDOW.as_secs() / HEARTBEAT.as_secs()) + 10;

/// Fails the test if it has not finished after a long while of real time: a spinning task
/// keeps the paused clock from ever moving, and the test would otherwise hang. Dropped with
/// the test, it lets the thread go.
struct Watchdog {
    _alive: mpsc::Sender<()>,
}

impl Watchdog {
    fn start() -> Watchdog {
        let (tx, rx) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_secs(60)) {
                eprintln!("no_busy_wait: the runtime never went idle: something spins");
                std::process::abort();
            }
        });
        Watchdog { _alive: tx }
    }
}

/// How often this (current-thread) runtime has parked, waiting for something to do.
fn parks() -> u64 {
    tokio::runtime::Handle::current()
        .metrics()
        .worker_park_count(0)
}

/// Parks of the runtime while `WINDOW` passes on the paused clock.
async fn wake_ups_in_a_window() -> u64 {
    let before = parks();
    tokio::time::sleep(WINDOW).await;
    parks() - before
}

#[tokio::test(start_paused = true)]
async fn messages_waiting_for_a_busy_worker_do_not_spin() {
    let _watchdog = Watchdog::start();
    let probe = Probe::new();
    let gate = Gate::new();
    let bus = event_base::builder()
        // Stuck is what the test wants: the worker is not to be declared dead meanwhile.
        .heartbeat(HEARTBEAT, Duration::from_secs(3600))
        .handler(probe.gated_handler("one", "busy", &gate, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    for _ in 0..500 {
        bus.send("busy", b"x".to_vec()).await.unwrap();
    }
    probe.wait_for(1, WAIT).await;

    let woke = wake_ups_in_a_window().await;
    assert!(
        woke <= ALLOWED,
        "a bus waiting for a stuck worker woke {woke} times in {WINDOW:?}"
    );
    assert_eq!(probe.count(), 1, "still stuck on the first message");

    gate.open();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count(), 500);
}

#[tokio::test(start_paused = true)]
async fn an_idle_bus_does_not_spin() {
    let _watchdog = Watchdog::start();
    let probe = Probe::new();
    let bus = event_base::builder()
        .heartbeat(HEARTBEAT, Duration::from_secs(60))
        .handler(probe.handler("h", "t", |_| Ack::Ack).workers(4))
        .build()
        .await
        .unwrap();
    for _ in 0..100 {
        bus.send("t", b"x".to_vec()).await.unwrap();
    }
    bus.wait_idle(WAIT).await.unwrap();

    let woke = wake_ups_in_a_window().await;
    assert!(
        woke <= ALLOWED,
        "an idle bus woke {woke} times in {WINDOW:?}"
    );
    // And it still works.
    bus.send("t", b"x".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count(), 101);
}

#[tokio::test(start_paused = true)]
async fn a_lingering_batch_worker_does_not_spin() {
    let _watchdog = Watchdog::start();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    // A linger far past the window: the worker holds one message and waits for more.
    let spec = event_base::HandlerSpec::batch(
        "store",
        "points",
        event_base::batch_fn(move |batch: Vec<event_base::EMessage>| {
            counted.fetch_add(batch.len(), std::sync::atomic::Ordering::SeqCst);
            async { Ack::Ack }
        }),
        100,
        Duration::from_secs(3600),
    );
    let bus = event_base::builder()
        .heartbeat(HEARTBEAT, Duration::from_secs(7200))
        .handler(spec)
        .build()
        .await
        .unwrap();
    bus.send("points", b"x".to_vec()).await.unwrap();

    let woke = wake_ups_in_a_window().await;
    assert!(
        woke <= ALLOWED,
        "a lingering batch worker woke {woke} times in {WINDOW:?}"
    );
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "still lingering"
    );
    // Shutting down ends the linger at once.
    bus.shutdown(event_base::ShutdownStrategy::Drain { timeout: WAIT })
        .await
        .unwrap();
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}
