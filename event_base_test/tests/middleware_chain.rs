//! Middleware wraps the rest of the chain: global middleware outside the handler's own, in
//! declaration order, each acting before and after; a middleware can answer without calling
//! the handler; the built-in timeout, retry-policy and metrics middleware do what they say.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use event_base::{
    async_trait, Ack, Backoff, DeadReason, EMessage, HandlerSpec, MetricsMiddleware, Middleware,
    Next, RetryPolicyMiddleware, TimeoutMiddleware,
};
use event_base_test::{Probe, WAIT};

#[derive(Clone)]
struct Tag {
    name: &'static str,
    log: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl Middleware for Tag {
    async fn handle(&self, msg: &EMessage, next: Next<'_>) -> Ack {
        self.log
            .lock()
            .unwrap()
            .push(format!("{} before", self.name));
        let ack = next.run(msg).await;
        self.log
            .lock()
            .unwrap()
            .push(format!("{} after", self.name));
        ack
    }
}

struct RejectEmpty;

#[async_trait]
impl Middleware for RejectEmpty {
    async fn handle(&self, msg: &EMessage, next: Next<'_>) -> Ack {
        if msg.payload.0.is_empty() {
            return Ack::Dead {
                dead_reason: DeadReason::Other("empty payload".into()),
            };
        }
        next.run(msg).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn middleware_runs_in_order_around_the_handler_and_can_short_circuit() {
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let probe = Probe::new();
    let l = log.clone();
    let spec = probe
        .handler("h", "t", move |_| {
            l.lock().unwrap().push("handler".into());
            Ack::Ack
        })
        .middleware(Tag {
            name: "a",
            log: log.clone(),
        })
        .middleware(RejectEmpty)
        .middleware(Tag {
            name: "b",
            log: log.clone(),
        });
    let bus = event_base::builder()
        .middleware(Tag {
            name: "global",
            log: log.clone(),
        })
        .handler(spec)
        .build()
        .await
        .unwrap();
    bus.send("t", b"x".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        log.lock().unwrap().drain(..).collect::<Vec<_>>(),
        vec![
            "global before",
            "a before",
            "b before",
            "handler",
            "b after",
            "a after",
            "global after"
        ]
    );

    let id = bus.send("t", Vec::<u8>::new()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        log.lock().unwrap().drain(..).collect::<Vec<_>>(),
        vec!["global before", "a before", "a after", "global after"],
        "RejectEmpty answered; b and the handler never ran"
    );
    assert_eq!(probe.count_of(&id), 0);
    let dead = bus.dead_letters().await.unwrap();
    assert_eq!(dead[0].reason, DeadReason::Other("empty payload".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_retry_policy_and_metrics_middleware() {
    let metrics = MetricsMiddleware::new("slow");
    let slow = event_base::handler_fn(|m: EMessage| async move {
        if m.attempts == 1 {
            std::future::pending::<()>().await; // work that never ends, cut short by the timeout
        }
        Ack::Ack
    });
    let spec = HandlerSpec::new("slow", "slow", slow)
        .middleware(metrics.clone())
        .middleware(RetryPolicyMiddleware::new(Backoff::fixed(
            Duration::from_millis(40),
        )))
        .middleware(TimeoutMiddleware::new(Duration::from_millis(30)));
    let bus = event_base::builder().handler(spec).build().await.unwrap();
    let started = Instant::now();
    bus.send("slow", b"x".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    // 30 ms timeout, then the 40 ms backoff the retry policy gave the untimed NoAck.
    assert!(
        started.elapsed() >= Duration::from_millis(70),
        "{:?}",
        started.elapsed()
    );
    let m = metrics.snapshot();
    assert_eq!((m.calls, m.retried, m.acked, m.dead), (2, 1, 1, 0));
    assert!(m.latency.max >= Duration::from_millis(30));
    assert_eq!(bus.metrics().topic("slow").unwrap().retried, 1);
}
