//! Property (issue 33, finding 4): no numeric argument of the public API panics, whatever
//! its value. Arbitrary durations (weighted to the edges: zero, `MAX_WAIT` ± 1 ns,
//! `Duration::MAX`, any `u64` of seconds) and rates (`NaN`, infinities, zero, negatives,
//! subnormals, `1e-300`, `f64::MAX`, any `f64`) go to a send's timeout, `with_delay`,
//! `deliver_at` far in the past and the future, a retry's `retry_after`, `wait_idle`, the
//! paced dead-letter replay, every shutdown strategy, and the builder and handler settings
//! (dedup window, heartbeat, metrics export, handler timeouts, backoff, batch linger).
//!
//! Every call returns `Ok` or a typed error; no thread panics (a panic hook counts them, so a
//! panic in a background task fails the case too); and nothing is stranded: every message
//! due within the run is delivered and `wait_idle` succeeds, and the messages due in
//! `MAX_WAIT` are exactly what a `Drain` shutdown leaves in the WAL.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use event_base::constant::MAX_WAIT;
use event_base::{
    batch_fn, Ack, Backoff, CoreError, EMessage, HandlerSpec, SendOptions, ShutdownStrategy,
};
use event_base_test::{Probe, WAIT};
use proptest::prelude::*;

/// Panics seen by any thread of the process since the hook was set.
static PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            default(info);
        }));
    });
}

/// Any duration, the edges often.
fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        (0u64..20).prop_map(Duration::from_millis),
        Just(MAX_WAIT - Duration::from_nanos(1)),
        Just(MAX_WAIT),
        Just(Duration::MAX),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

/// A wait that ends within the run, or one that never does in practice.
#[derive(Debug, Clone, Copy)]
enum Wait {
    /// Under 20 ms.
    Near(Duration),
    /// An hour or more.
    Far(Duration),
}

impl Wait {
    fn duration(self) -> Duration {
        match self {
            Wait::Near(d) | Wait::Far(d) => d,
        }
    }
}

fn near_or_far() -> impl Strategy<Value = Wait> {
    prop_oneof![
        (0u64..20).prop_map(|ms| Wait::Near(Duration::from_millis(ms))),
        Just(Wait::Far(MAX_WAIT)),
        Just(Wait::Far(Duration::MAX)),
        (3600u64..=u64::MAX, 0u32..1_000_000_000).prop_map(|(s, n)| Wait::Far(Duration::new(s, n))),
    ]
}

/// Any rate, the edges often.
fn any_rate() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(0.0),
        Just(-1.0),
        Just(1e-300),
        Just(5e-324),
        Just(f64::MIN_POSITIVE),
        Just(1e300),
        Just(f64::MAX),
        any::<f64>(),
        1e-9f64..1e9,
    ]
}

/// When a message is due.
#[derive(Debug, Clone, Copy)]
enum When {
    Now,
    /// `with_delay`.
    After(Wait),
    /// `with_deliver_at`, this long ago (before the Unix epoch, for a long time).
    Ago(Duration),
    /// `with_deliver_at` ahead of now.
    Ahead(Wait),
    /// `with_deliver_at`, the latest time the wall clock holds.
    Latest,
}

/// One send and what its handler answers.
#[derive(Debug, Clone, Copy)]
struct Send {
    try_send: bool,
    timeout: Option<Duration>,
    when: When,
    /// The first delivery answers `NoAck { retry_after }`, the second acks.
    retry_after: Option<Wait>,
}

impl Send {
    /// Due after the run (so it is left in flight, in the WAL).
    fn far(&self) -> bool {
        let far_when = matches!(
            self.when,
            When::After(Wait::Far(_)) | When::Ahead(Wait::Far(_)) | When::Latest
        );
        far_when || matches!(self.retry_after, Some(Wait::Far(_)))
    }

    fn message(&self) -> EMessage {
        let payload = match self.retry_after {
            Some(w) => format!(
                "retry {} {}",
                w.duration().as_secs(),
                w.duration().subsec_nanos()
            ),
            None => "ack".to_owned(),
        };
        let message = EMessage::standard("t", payload.into_bytes());
        let now = SystemTime::now();
        match self.when {
            When::Now => message,
            When::After(w) => message.with_delay(w.duration()),
            When::Ago(d) => message.with_deliver_at(now.checked_sub(d).unwrap_or(UNIX_EPOCH)),
            When::Ahead(w) => {
                message.with_deliver_at(now.checked_add(w.duration()).unwrap_or_else(latest_time))
            }
            When::Latest => message.with_deliver_at(latest_time()),
        }
    }

    fn options(&self) -> SendOptions {
        let mut options = SendOptions::new();
        if self.try_send {
            options = options.try_send();
        }
        if let Some(t) = self.timeout {
            options = options.timeout(t);
        }
        options
    }
}

/// The latest time the wall clock can hold (on Linux, `i64::MAX` seconds after the epoch).
fn latest_time() -> SystemTime {
    [i64::MAX as u64, u64::from(u32::MAX), 0]
        .into_iter()
        .find_map(|s| UNIX_EPOCH.checked_add(Duration::from_secs(s)))
        .unwrap_or(UNIX_EPOCH)
}

fn any_send() -> impl Strategy<Value = Send> {
    let when = prop_oneof![
        Just(When::Now),
        near_or_far().prop_map(When::After),
        any_duration().prop_map(When::Ago),
        near_or_far().prop_map(When::Ahead),
        Just(When::Latest),
    ];
    (
        any::<bool>(),
        proptest::option::of(any_duration()),
        when,
        proptest::option::of(near_or_far()),
    )
        .prop_map(|(try_send, timeout, when, retry_after)| Send {
            try_send,
            timeout,
            when,
            retry_after,
        })
}

fn any_backoff() -> impl Strategy<Value = Backoff> {
    (any_duration(), any_duration(), any::<f64>(), any::<f64>())
        .prop_map(|(b, m, f, j)| Backoff::exponential(b).max_delay(m).factor(f).jitter(j))
}

fn any_strategy() -> impl Strategy<Value = ShutdownStrategy> {
    prop_oneof![
        (any_duration(), any_duration()).prop_map(|(poll_interval, force_timeout)| {
            ShutdownStrategy::TwoStage {
                poll_interval,
                force_timeout,
            }
        }),
        Just(ShutdownStrategy::Force),
        any_duration().prop_map(|total| ShutdownStrategy::Timeout { total }),
        any_duration().prop_map(|poll_interval| ShutdownStrategy::Graceful {
            worker_name: "store-0".into(),
            poll_interval,
        }),
        Just(ShutdownStrategy::StateBasedIdle),
        (0usize..3, any_duration()).prop_map(|(batch_size, interval)| {
            ShutdownStrategy::Batched {
                batch_size,
                interval,
            }
        }),
        any_duration().prop_map(|timeout| ShutdownStrategy::Drain { timeout }),
    ]
}

/// The settings of a bus.
#[derive(Debug, Clone)]
struct Settings {
    dedup_window: Duration,
    heartbeat: Duration,
    stale_after: Duration,
    export_every: Duration,
    timeout: Duration,
    shutdown_timeout: Duration,
    linger: Duration,
    backoff: Backoff,
}

fn any_settings() -> impl Strategy<Value = Settings> {
    (
        (
            any_duration(),
            any_duration(),
            any_duration(),
            any_duration(),
        ),
        (
            any_duration(),
            any_duration(),
            any_duration(),
            any_backoff(),
        ),
    )
        .prop_map(
            |(
                (dedup_window, heartbeat, stale_after, export_every),
                (timeout, shutdown_timeout, linger, backoff),
            )| Settings {
                dedup_window,
                heartbeat,
                stale_after,
                export_every,
                timeout,
                shutdown_timeout,
                linger,
                backoff,
            },
        )
}

fn builder(s: &Settings) -> event_base::EventBusBuilder {
    event_base::builder()
        .dedup_window(s.dedup_window)
        .heartbeat(s.heartbeat, s.stale_after)
        .export_metrics(s.export_every)
}

/// The first delivery of a `retry <secs> <nanos>` message asks for a retry after that long.
fn answer(message: &EMessage) -> Ack {
    let text = String::from_utf8_lossy(&message.payload.0).into_owned();
    let mut words = text.split(' ');
    if words.next() != Some("retry") || message.attempts > 1 {
        return Ack::Ack;
    }
    let secs = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
    let nanos = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
    Ack::NoAck {
        retry_after: Some(Duration::new(secs, nanos)),
        max_retries: 1,
    }
}

/// A result that is `Ok` or one of the typed errors `allowed` names.
fn ok_or<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, CoreError>,
    allowed: fn(&CoreError) -> bool,
) -> Option<T> {
    match result {
        Ok(v) => Some(v),
        Err(e) if allowed(&e) => None,
        Err(e) => panic!("{what}: unexpected error {e:?}"),
    }
}

/// Sends, waits and replays on one bus with arbitrary arguments; then drains it.
async fn sends_waits_and_replays(
    settings: Settings,
    sends: Vec<Send>,
    wait: Duration,
    rate: f64,
    attempts: u32,
) {
    let _ = settings.backoff.delay(attempts);
    let probe = Probe::new();
    let handler = probe
        .handler("h", "t", answer)
        .timeout(settings.timeout)
        .shutdown_timeout(settings.shutdown_timeout)
        .backoff(settings.backoff);
    let dead = probe.handler("d", "dead", |_| Ack::dead());
    let bus = builder(&settings)
        .handler(handler)
        .handler(dead)
        .build()
        .await
        .unwrap();
    // What is due within the run first: it must all be delivered.
    let (far, near): (Vec<Send>, Vec<Send>) = sends.into_iter().partition(Send::far);
    let mut delivered = Vec::new();
    for send in &near {
        let sent = bus.send_with("t", send.message(), send.options()).await;
        if let Some(id) = ok_or("a send due within the run", sent, |e| {
            matches!(e, CoreError::Timeout { .. })
        }) {
            delivered.push((id, 1 + usize::from(send.retry_after.is_some())));
        }
    }
    bus.send("dead", b"x".to_vec()).await.unwrap();
    ok_or("wait_idle", bus.wait_idle(wait).await, |e| {
        matches!(e, CoreError::IdleTimeout { .. })
    });
    bus.wait_idle(WAIT).await.unwrap();
    for (id, times) in &delivered {
        assert!(probe.count_of(id) >= *times, "{id} delivered too few times");
    }
    let replayed = bus.replay_dead_letters_paced(rate).await;
    if let Some(ids) = ok_or("a paced replay", replayed, |e| {
        matches!(e, CoreError::InvalidParameter { .. })
    }) {
        assert_eq!(ids.len(), 1);
    }
    bus.wait_idle(WAIT).await.unwrap();
    // Then what is due in `MAX_WAIT`: in flight, and left in the WAL by a drain.
    let mut waiting = 0;
    for send in &far {
        let sent = bus.send_with("t", send.message(), send.options()).await;
        if ok_or("a send due after the run", sent, |e| {
            matches!(e, CoreError::Timeout { .. })
        })
        .is_some()
        {
            waiting += 1;
        }
    }
    let drain = ShutdownStrategy::Drain {
        timeout: Duration::from_millis(300),
    };
    let report = bus.shutdown(drain).await.unwrap();
    assert_eq!(report.left_for_replay, waiting, "{report:?}");
}

/// Shuts a bus with arbitrary settings (a batch handler: its linger) down with an
/// arbitrary strategy, once idle.
async fn shuts_down(settings: Settings, strategy: ShutdownStrategy) {
    let handled = Arc::new(AtomicUsize::new(0));
    let counted = handled.clone();
    let store = HandlerSpec::batch(
        "store",
        "points",
        batch_fn(move |batch: Vec<EMessage>| {
            counted.fetch_add(batch.len(), Ordering::SeqCst);
            async { Ack::Ack }
        }),
        2,
        settings.linger,
    )
    .timeout(settings.timeout)
    .shutdown_timeout(settings.shutdown_timeout)
    .backoff(settings.backoff);
    let bus = builder(&settings).handler(store).build().await.unwrap();
    let points = vec![
        EMessage::standard("points", b"1".to_vec()),
        EMessage::standard("points", b"2".to_vec()),
    ];
    bus.send_batch("points", points).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert!(handled.load(Ordering::SeqCst) >= 2);
    let graceful = matches!(strategy, ShutdownStrategy::Graceful { .. });
    let report = bus.shutdown(strategy).await.unwrap();
    assert!(graceful || report.drained, "{report:?}");
    if graceful {
        bus.shutdown(ShutdownStrategy::Force).await.unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        max_shrink_iters: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn no_numeric_argument_panics_or_strands_a_message(
        bus_a in any_settings(),
        sends in proptest::collection::vec(any_send(), 0..6),
        wait in any_duration(),
        rate in any_rate(),
        attempts in any::<u32>(),
        bus_b in any_settings(),
        strategy in any_strategy(),
    ) {
        count_panics();
        let before = PANICS.load(Ordering::SeqCst);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let run = async {
                sends_waits_and_replays(bus_a, sends, wait, rate, attempts).await;
                shuts_down(bus_b, strategy).await;
            };
            tokio::time::timeout(Duration::from_secs(60), run)
                .await
                .expect("the case ended within a minute");
        });
        drop(runtime);
        prop_assert_eq!(PANICS.load(Ordering::SeqCst), before, "a thread panicked");
    }
}
