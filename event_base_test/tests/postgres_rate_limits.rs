//! A handler's rate holds across processes on PostgreSQL (`HandlerSpec::rate`): two buses,
//! each with its own factory (its own connections, as two processes have), run the same
//! rated handler, and their starts together keep to the one rate (one row on the server's
//! clock paces both), where two local limiters would allow twice as many.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use event_base::handler_fn;
use event_base::prelude::*;
use event_base::PostgresQueueFactory;
use event_base_test::postgres_server::PostgresServer;
use tokio::sync::Notify;

/// The start of every delivery, with the bus that made it; the `Notify` is rung at each.
#[derive(Default)]
struct Starts(Mutex<Vec<(Instant, &'static str)>>, Notify);

impl Starts {
    /// Waits until `n` starts are recorded, failing after 20 s.
    async fn reach(&self, n: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let added = self.1.notified();
            tokio::pin!(added);
            added.as_mut().enable();
            let have = self.0.lock().unwrap().len();
            if have >= n {
                return;
            }
            if tokio::time::timeout_at(deadline, added).await.is_err() {
                panic!("{have} of {n} handled in 20 s");
            }
        }
    }
}

async fn rated_bus(server: &PostgresServer, starts: &Arc<Starts>, name: &'static str) -> EventBus {
    let starts = starts.clone();
    let handler = HandlerSpec::new(
        "mailer",
        "mail",
        handler_fn(move |_m: EMessage| {
            let starts = starts.clone();
            async move {
                starts.0.lock().unwrap().push((Instant::now(), name));
                starts.1.notify_waiters();
                Ack::Ack
            }
        }),
    )
    .workers(2)
    .rate("50/s".parse().unwrap());
    let queue = PostgresQueueFactory::connect(&server.url()).await.unwrap();
    // One message a claim, so that a rated (slow) bus leaves the rest to the other.
    EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .batch_size(1)
        .handler(handler)
        .build()
        .await
        .unwrap()
}

/// 50/s is a slot every 20 ms across both buses. Tolerance as on Redis
/// (`redis_rate_limits.rs`): a start runs at its slot or later; lateness only bunches starts
/// already reserved, one a worker (4 in all): no 250 ms holds more than its 13 slots and 4
/// late starts, and with 100 ms for the first start's lateness, 48 starts span at least
/// 47 × 20 − 100 ms. Two buses pacing themselves apart would take about half that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_share_one_rate() {
    let server = PostgresServer::start();
    let starts = Arc::new(Starts::default());
    let a = rated_bus(&server, &starts, "a").await;
    let b = rated_bus(&server, &starts, "b").await;
    for i in 0..48u32 {
        a.send("mail", i.to_le_bytes().to_vec()).await.unwrap();
    }
    starts.reach(48).await;
    let mut taken = starts.0.lock().unwrap().clone();
    taken.sort();
    assert_eq!(taken.len(), 48, "every message once");
    let on_b = taken.iter().filter(|(_, n)| *n == "b").count();
    assert!((1..48).contains(&on_b), "bus b handled {on_b} of 48");
    let span = taken[47].0 - taken[0].0;
    assert!(
        span >= Duration::from_millis(47 * 20 - 100),
        "48 starts in {span:?}"
    );
    for (i, (first, _)) in taken.iter().enumerate() {
        let within = taken[i..]
            .iter()
            .take_while(|(t, _)| *t - *first < Duration::from_millis(250))
            .count();
        assert!(within <= 17, "{within} starts within 250 ms");
    }
    a.close().await.unwrap();
    b.close().await.unwrap();
}
