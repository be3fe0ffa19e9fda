//! A handler's rate holds across nodes on Redis (`HandlerSpec::rate`): two nodes run the same
//! rated handler, and their starts together keep to the one rate (a script on the server's
//! clock paces every node), where two local limiters would allow twice as many.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use event_base::handler_fn;
use event_base::prelude::*;
use event_base::RedisQueueFactory;
use event_base_test::redis_cluster::{node, registered};
use event_base_test::redis_server::RedisServer;
use tokio::sync::Notify;

const BEAT: Duration = Duration::from_millis(100);

/// The start of every delivery, on either node, with the node that made it; `added` is
/// rung at each.
#[derive(Default)]
struct Starts(Mutex<Vec<(Instant, &'static str)>>, Notify);

impl Starts {
    /// Waits until `n` starts are recorded, failing after 20 s.
    async fn reach(&self, n: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let added = self.1.notified();
            tokio::pin!(added);
            // Listening before the look, so a start in between is not missed.
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

fn mailer(starts: &Arc<Starts>, node: &'static str) -> HandlerSpec {
    let starts = starts.clone();
    HandlerSpec::new(
        "mailer",
        "mail",
        handler_fn(move |_m: EMessage| {
            let starts = starts.clone();
            async move {
                starts.0.lock().unwrap().push((Instant::now(), node));
                starts.1.notify_waiters();
                Ack::Ack
            }
        }),
    )
    .workers(2)
    .rate("50/s".parse().unwrap())
}

/// A node claiming one message at a time, so that a rated (slow) handler leaves the rest of
/// the stream to the other node.
async fn rated_node(queue: RedisQueueFactory, handler: HandlerSpec) -> EventBus {
    EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .batch_size(1)
        .handler(handler)
        .build()
        .await
        .expect("build the bus")
}

/// 50/s is a slot every 20 ms, across both nodes. Tolerance: a start runs at its slot or
/// later (the server's clock decides the slot; a timer never fires early); lateness can only
/// bunch starts already reserved, one per worker (4 in all): no 250 ms holds more than its
/// 13 slots and 4 late starts, and with 100 ms allowed for the first start's lateness, 48
/// starts span at least 47 × 20 - 100 ms. Two nodes pacing themselves apart would take
/// about half that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_one_rate() {
    let server = RedisServer::start();
    let starts = Arc::new(Starts::default());
    let a_queue = node(&server, BEAT).await;
    let a = rated_node(a_queue.clone(), mailer(&starts, "a")).await;
    let b_queue = node(&server, BEAT).await;
    let b = rated_node(b_queue.clone(), mailer(&starts, "b")).await;
    registered(&a_queue, "mail", "mailer").await;
    for i in 0..48u32 {
        a.send("mail", i.to_le_bytes().to_vec()).await.unwrap();
    }
    starts.reach(48).await;
    let mut taken = starts.0.lock().unwrap().clone();
    taken.sort();
    assert_eq!(taken.len(), 48, "every message once");
    // Both nodes took a share, so the pace held across nodes, not within one.
    let on_b = taken.iter().filter(|(_, n)| *n == "b").count();
    assert!((1..48).contains(&on_b), "node b handled {on_b} of 48");
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
    let waited: Duration = [&a, &b]
        .iter()
        .flat_map(|bus| bus.metrics().subscriptions)
        .filter(|s| s.handler == "mailer")
        .map(|s| s.rate_limited)
        .sum();
    assert!(waited > Duration::ZERO, "the waits are counted");
    a.close().await.unwrap();
    b.close().await.unwrap();
}
