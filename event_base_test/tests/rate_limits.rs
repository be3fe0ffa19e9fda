//! Rate limits per handler (`HandlerSpec::rate`, `#[handler(rate = "..")]`): starts are
//! spaced one interval apart across all the handler's workers, messages beyond the rate
//! wait (none dropped, none failed), the wait is in the metrics, and a handler without a
//! rate is not slowed by a rated sibling.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_base::handler_fn;
use event_base::prelude::*;
use tokio::time::Instant;

/// Records when each delivery started, on the runtime's clock.
#[derive(Default)]
struct Starts(Mutex<Vec<Instant>>);

impl Starts {
    fn handler(self: &Arc<Self>, name: &str, topic: &str, workers: usize) -> HandlerSpec {
        let starts = self.clone();
        HandlerSpec::new(
            name,
            topic,
            handler_fn(move |_m: EMessage| {
                let starts = starts.clone();
                async move {
                    starts.0.lock().unwrap().push(Instant::now());
                    // Handlers that take time: four workers could start far faster than
                    // the rate without it.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Ack::Ack
                }
            }),
        )
        .workers(workers)
    }

    fn taken(&self) -> Vec<Instant> {
        let mut v = self.0.lock().unwrap().clone();
        v.sort();
        v
    }
}

/// An in-memory bus with `handlers`.
async fn memory_bus(handlers: Vec<HandlerSpec>) -> EventBus {
    let mut builder = EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::default());
    for h in handlers {
        builder = builder.handler(h);
    }
    builder.build().await.unwrap()
}

/// On a paused clock the spacing is exact: 50/s over 4 workers is one start every 20 ms,
/// never two closer, and no window of one second holds more than 50.
#[tokio::test(start_paused = true)]
async fn fifty_a_second_over_four_workers_spaces_every_start_by_20_ms() {
    let starts = Arc::new(Starts::default());
    let bus = memory_bus(vec![starts
        .handler("mailer", "mail", 4)
        .rate("50/s".parse().unwrap())])
    .await;
    for i in 0..120u32 {
        bus.send("mail", i.to_le_bytes().to_vec()).await.unwrap();
    }
    bus.wait_idle(Duration::from_secs(60)).await.unwrap();
    let taken = starts.taken();
    assert_eq!(taken.len(), 120, "every message is handled, none dropped");
    for pair in taken.windows(2) {
        assert!(
            pair[1] - pair[0] >= Duration::from_millis(20),
            "two starts {:?} apart",
            pair[1] - pair[0]
        );
    }
    for (i, first) in taken.iter().enumerate() {
        let within = taken[i..]
            .iter()
            .take_while(|t| **t - *first < Duration::from_secs(1))
            .count();
        assert!(within <= 50, "{within} starts within one second");
    }
    let metrics = bus.metrics();
    let sub = metrics
        .subscriptions
        .iter()
        .find(|s| s.handler == "mailer")
        .unwrap();
    assert!(
        sub.rate_limited >= Duration::from_secs(1),
        "the wait is counted: {:?}",
        sub.rate_limited
    );
    let topic = &metrics.topics["mail"];
    assert_eq!((topic.acked, topic.retried, topic.dead), (120, 0, 0));
    bus.close().await.unwrap();
}

/// On the real clock, within a stated tolerance: 100/s, 60 messages over 4 workers. Each
/// start is reserved a slot 10 ms after the one before; the handler runs at its slot or
/// later, never before it (a timer does not fire early). Lateness (a loaded machine) can only
/// bunch starts that were reserved already, and each worker holds one reservation at a time:
/// no 100 ms holds more than its 10 slots, one at the edge, and 4 late starts. The test allows
/// 100 ms of lateness for the first start: the 60 starts span at least 590 - 100 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_a_second_holds_on_the_real_clock() {
    let starts = Arc::new(Starts::default());
    let bus = memory_bus(vec![starts
        .handler("mailer", "mail", 4)
        .rate(Rate::per_second(100).unwrap())])
    .await;
    for i in 0..60u32 {
        bus.send("mail", i.to_le_bytes().to_vec()).await.unwrap();
    }
    bus.wait_idle(Duration::from_secs(30)).await.unwrap();
    let taken = starts.taken();
    assert_eq!(taken.len(), 60);
    let span = taken[59] - taken[0];
    assert!(span >= Duration::from_millis(490), "60 starts in {span:?}");
    for (i, first) in taken.iter().enumerate() {
        let within = taken[i..]
            .iter()
            .take_while(|t| **t - *first < Duration::from_millis(100))
            .count();
        assert!(within <= 15, "{within} starts within 100 ms");
    }
    bus.close().await.unwrap();
}

/// A rated handler does not hold back its unrated sibling on the same topic.
#[tokio::test(start_paused = true)]
async fn an_unrated_sibling_is_not_slowed() {
    let rated = Arc::new(Starts::default());
    let free = Arc::new(Starts::default());
    let bus = memory_bus(vec![
        rated.handler("slow", "t", 1).rate("2/s".parse().unwrap()),
        free.handler("fast", "t", 1),
    ])
    .await;
    let began = Instant::now();
    for i in 0..10u32 {
        bus.send("t", i.to_le_bytes().to_vec()).await.unwrap();
    }
    bus.wait_idle(Duration::from_secs(60)).await.unwrap();
    let (rated, free) = (rated.taken(), free.taken());
    assert_eq!((rated.len(), free.len()), (10, 10));
    assert!(rated[9] - began >= Duration::from_millis(4500));
    assert!(
        free[9] - began < Duration::from_millis(500),
        "the unrated sibling took {:?}",
        free[9] - began
    );
    bus.close().await.unwrap();
}

#[handler(topic = "macro.rated", rate = "20/s")]
async fn rated_by_macro(_msg: &EMessage) -> Ack {
    Ack::Ack
}

/// `#[handler(rate = "..")]` records the rate the spec then carries.
#[test]
fn the_macro_records_the_rate() {
    let spec = event_base::HANDLER_REGISTRY
        .iter()
        .find(|r| r.name == "rated_by_macro")
        .expect("registered")
        .to_spec();
    assert_eq!(spec.rate, Some(Rate::per_second(20).unwrap()));
}
