//! Recurring schedules: one message per slot with the id `<name>:<slot time>`, also with two
//! buses (nodes) sharing the WAL and across a restart; the missed-slot policies; upsert,
//! unschedule, the list; schedules kept by a file WAL.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use event_base::backend::Wal;
use event_base::prelude::*;
use event_base::{handler_fn, SLOT_HEADER};
use event_base_test::WAIT;

/// A firing as a handler saw it: the bus's label, the message id, the slot (ms since epoch).
type Fired = (String, String, u64);

/// A handler on `tick` that reports each firing on `tx`.
fn ticks(label: &str, tx: &flume::Sender<Fired>) -> HandlerSpec {
    let tx = tx.clone();
    let label = label.to_owned();
    HandlerSpec::new(
        "ticks",
        "tick",
        handler_fn(move |msg: EMessage| {
            let tx = tx.clone();
            let label = label.clone();
            async move {
                let slot = msg.headers.get(SLOT_HEADER).unwrap().parse().unwrap();
                let _ = tx.send((label, msg.id.clone(), slot));
                Ack::Ack
            }
        }),
    )
}

async fn bus_on(wal: &Arc<MemoryWal>, label: &str, tx: &flume::Sender<Fired>) -> EventBus {
    EventBus::builder()
        .wal(wal.clone())
        .queue(FlumeQueueFactory::default())
        .handler(ticks(label, tx))
        .build()
        .await
        .unwrap()
}

async fn next(rx: &flume::Receiver<Fired>) -> Fired {
    tokio::time::timeout(Duration::from_secs(600), rx.recv_async())
        .await
        .expect("no firing in time")
        .unwrap()
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

#[tokio::test(start_paused = true)]
async fn every_200ms_with_two_nodes_fires_once_per_slot() {
    let wal = Arc::new(MemoryWal::new());
    let (tx, rx) = flume::unbounded();
    let a = bus_on(&wal, "a", &tx).await;
    let b = bus_on(&wal, "b", &tx).await;
    // Both nodes register the same schedule, as every node of a deployment does at start.
    for bus in [&a, &b] {
        bus.schedule(
            "tick",
            Schedule::every(Duration::from_millis(200)),
            "tick",
            b"t".to_vec(),
        )
        .await
        .unwrap();
    }
    let mut fired = Vec::new();
    for _ in 0..10 {
        fired.push(next(&rx).await);
    }
    // Let both nodes finish whatever slot they were on, then look for a second firing.
    a.wait_idle(WAIT).await.unwrap();
    b.wait_idle(WAIT).await.unwrap();
    fired.extend(rx.drain());
    fired.sort_by_key(|f| f.2);
    for pair in fired.windows(2) {
        assert_eq!(
            pair[1].2 - pair[0].2,
            200,
            "a slot fired twice or was skipped: {pair:?}"
        );
    }
    for (_, id, slot) in &fired {
        assert!(id.starts_with("tick:"), "{id}");
        assert_eq!(
            slot % 200,
            0,
            "slots are multiples of the period since the epoch"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_schedule_goes_on_after_a_restart_without_registering_it_again() {
    let wal = Arc::new(MemoryWal::new());
    let (tx, rx) = flume::unbounded();
    let first = bus_on(&wal, "first", &tx).await;
    first
        .schedule(
            "tick",
            Schedule::every(Duration::from_millis(200)),
            "tick",
            Vec::new(),
        )
        .await
        .unwrap();
    let mut before = Vec::new();
    for _ in 0..3 {
        before.push(next(&rx).await);
    }
    first.close().await.unwrap();
    before.extend(rx.drain());
    let last_before = before.iter().map(|f| f.2).max().unwrap();

    let second = bus_on(&wal, "second", &tx).await;
    let listed = second.schedules();
    assert_eq!(listed.len(), 1, "taken up from the WAL");
    assert_eq!(listed[0].name, "tick");
    assert_eq!(
        listed[0].schedule,
        Schedule::every(Duration::from_millis(200))
    );
    let mut after = Vec::new();
    for _ in 0..3 {
        after.push(next(&rx).await);
    }
    assert!(
        after.iter().all(|f| f.0 == "second" && f.2 > last_before),
        "a slot fired again after the restart: {before:?} then {after:?}"
    );
    assert_eq!(after[0].2, last_before + 200, "the next slot, none skipped");
}

/// Registers `tick` every 100 ms with `policy` on a bus, waits for one firing, stops the
/// bus, stays down for `down`, and starts a bus on the same WAL. Returns the last slot
/// fired before, the time the second bus started, and the second bus's receiver.
async fn down_and_up(
    policy: CatchUp,
    down: Duration,
) -> (
    u64,
    SystemTime,
    SystemTime,
    EventBus,
    flume::Receiver<Fired>,
) {
    let wal = Arc::new(MemoryWal::new());
    let (tx, rx) = flume::unbounded();
    let first = bus_on(&wal, "first", &tx).await;
    first
        .schedule(
            "tick",
            Schedule::every(Duration::from_millis(100)).catch_up(policy),
            "tick",
            Vec::new(),
        )
        .await
        .unwrap();
    next(&rx).await;
    first.close().await.unwrap();
    let last = wal.stored_schedules().await.unwrap()[0].last_slot.unwrap();
    // The downtime under test: wall-clock time passes with no bus running the schedule.
    tokio::time::sleep(down).await;
    let _ = rx.drain().count();
    let (tx2, rx2) = flume::unbounded();
    let up_from = SystemTime::now();
    let second = bus_on(&wal, "second", &tx2).await;
    let up_to = SystemTime::now();
    drop(tx);
    (last, up_from, up_to, second, rx2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_all_fires_every_missed_slot() {
    let (last, up_from, _up_to, _bus, rx) =
        down_and_up(CatchUp::All, Duration::from_millis(600)).await;
    let missed = (ms(up_from) - last) / 100;
    assert!(missed >= 5, "the downtime spans {missed} slots");
    for k in 1..=missed {
        let (_, _, slot) = next(&rx).await;
        assert_eq!(slot, last + 100 * k, "missed slot {k} of {missed}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_one_fires_the_latest_missed_slot_once() {
    let (last, up_from, up_to, _bus, rx) =
        down_and_up(CatchUp::One, Duration::from_millis(600)).await;
    let (_, _, first) = next(&rx).await;
    assert!(
        first <= ms(up_to) + 100 && first + 100 > ms(up_from),
        "the first firing after the restart is the latest missed slot: {first}, up from {} to {}",
        ms(up_from),
        ms(up_to)
    );
    assert!(first >= last + 500, "older missed slots are skipped");
    let (_, _, second) = next(&rx).await;
    assert_eq!(second, first + 100, "then the slots go on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_none_fires_no_missed_slot() {
    let (_last, up_from, _up_to, _bus, rx) =
        down_and_up(CatchUp::None, Duration::from_millis(600)).await;
    let (_, _, first) = next(&rx).await;
    assert!(
        first > ms(up_from),
        "a missed slot fired: {first} <= {}",
        ms(up_from)
    );
}

#[tokio::test(start_paused = true)]
async fn registering_a_name_again_updates_it_and_unschedule_removes_it() {
    let wal = Arc::new(MemoryWal::new());
    let (tx, rx) = flume::unbounded();
    let bus = bus_on(&wal, "a", &tx).await;
    let every = Schedule::every(Duration::from_millis(100));
    bus.schedule("tick", every.clone(), "tick", b"old".to_vec())
        .await
        .unwrap();
    let (_, _, first) = next(&rx).await;
    bus.schedule("tick", every.clone(), "tick", b"new".to_vec())
        .await
        .unwrap();
    assert_eq!(bus.schedules().len(), 1, "one schedule of that name");
    assert_eq!(bus.schedules()[0].payload.as_bytes(), b"new");
    let (_, _, second) = next(&rx).await;
    assert_eq!(
        second,
        first + 100,
        "an update neither repeats nor skips a slot"
    );
    assert_eq!(wal.stored_schedules().await.unwrap().len(), 1);

    assert!(bus.unschedule("tick").await.unwrap());
    assert!(!bus.unschedule("tick").await.unwrap());
    assert!(bus.schedules().is_empty());
    assert!(wal.stored_schedules().await.unwrap().is_empty());
    bus.wait_idle(WAIT).await.unwrap();
    let _ = rx.drain().count();
    // Ten periods on the paused clock: nothing fires any more.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(rx.is_empty(), "an unscheduled schedule fired");
}

#[tokio::test]
async fn bad_schedules_are_refused() {
    let wal = Arc::new(MemoryWal::new());
    let (tx, _rx) = flume::unbounded();
    let bus = bus_on(&wal, "a", &tx).await;
    assert!(matches!(
        Schedule::cron("*/5 * * * *"),
        Err(CoreError::InvalidParameter { .. })
    ));
    assert!(Schedule::cron("0 */5 * * * *").is_ok());
    let zero = bus
        .schedule("z", Schedule::every(Duration::ZERO), "tick", Vec::new())
        .await;
    assert!(
        matches!(zero, Err(CoreError::InvalidParameter { .. })),
        "{zero:?}"
    );
    let nobody = bus
        .schedule(
            "n",
            Schedule::every(Duration::from_secs(1)),
            "nobody",
            Vec::new(),
        )
        .await;
    assert!(
        matches!(nobody, Err(CoreError::NoHandler { .. })),
        "{nobody:?}"
    );
    let long = bus
        .schedule(
            "x".repeat(201),
            Schedule::every(Duration::from_secs(1)),
            "tick",
            Vec::new(),
        )
        .await;
    assert!(
        matches!(long, Err(CoreError::InvalidParameter { .. })),
        "{long:?}"
    );
    assert!(bus.schedules().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_wal_keeps_schedules_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, rx) = flume::unbounded();
    let start = |label: &'static str| {
        let tx = tx.clone();
        let path = dir.path().to_owned();
        async move {
            EventBus::builder()
                .wal(PersistentWal::open(&path).unwrap())
                .queue(FlumeQueueFactory::default())
                .handler(ticks(label, &tx))
                .build()
                .await
                .unwrap()
        }
    };
    let first = start("first").await;
    first
        .schedule(
            "tick",
            Schedule::every(Duration::from_millis(100)).catch_up(CatchUp::None),
            "tick",
            Vec::new(),
        )
        .await
        .unwrap();
    let (_, _, fired) = next(&rx).await;
    first.close().await.unwrap();
    let _ = rx.drain().count();

    let second = start("second").await;
    assert_eq!(second.schedules().len(), 1, "kept in the WAL's directory");
    let (label, id, slot) = next(&rx).await;
    assert_eq!(label, "second");
    assert!(slot > fired);
    assert!(id.starts_with("tick:20"), "the slot's time in the id: {id}");
}
