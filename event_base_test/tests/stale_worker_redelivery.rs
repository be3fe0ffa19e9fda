//! A worker stuck on a message past the stale limit is declared dead (and announced so on
//! `_system.worker_discovery`); its message is handled by another worker, and a replacement
//! worker takes its place.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_base::constant::WORKER_DISCOVERY;
use event_base::{
    async_trait, Ack, AuditEvent, DiscoveryEvent, EHandler, EMessage, HandlerSpec, WorkerDiscovery,
    WorkerStatus,
};
use event_base_test::{decode, Probe, WAIT};
use tokio::sync::Notify;

/// The first delivery hangs forever; later ones succeed and are recorded.
struct HangsOnce {
    hung: AtomicBool,
    /// (id, attempts) of every delivery that returned.
    handled: Mutex<Vec<(String, u32)>>,
    done: Notify,
}

#[async_trait]
impl EHandler for HangsOnce {
    async fn handler(&self, msg: &EMessage) -> Ack {
        if !self.hung.swap(true, Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.handled
            .lock()
            .unwrap()
            .push((msg.id.clone(), msg.attempts));
        self.done.notify_one();
        Ack::Ack
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_workers_message_is_delivered_again() {
    let handler = Arc::new(HangsOnce {
        hung: AtomicBool::new(false),
        handled: Mutex::default(),
        done: Notify::new(),
    });
    let watch = Probe::new();
    let bus = event_base::builder()
        .heartbeat(Duration::from_millis(20), Duration::from_millis(100))
        .handler(HandlerSpec::new("job", "job", handler.clone()).workers(2))
        .handler(watch.handler("discovery", WORKER_DISCOVERY, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let id = bus.send("job", b"x".to_vec()).await.unwrap();
    tokio::time::timeout(WAIT, handler.done.notified())
        .await
        .expect("redelivered and handled");
    bus.wait_idle(WAIT).await.unwrap();

    // The message handled is the one that was stuck, on its second delivery.
    assert_eq!(
        *handler.handled.lock().unwrap(),
        vec![(id.to_string(), 2)],
        "the stuck message, delivered again"
    );
    // The worker that had it first is the one declared dead; another one finished it.
    let starts: Vec<(u32, String)> = bus
        .audit()
        .for_message(&id)
        .into_iter()
        .filter(|r| matches!(r.event, AuditEvent::Started))
        .map(|r| (r.attempt, r.worker.to_string()))
        .collect();
    assert_eq!(starts.len(), 2, "{starts:?}");
    let stuck = &starts[0].1;
    assert_ne!(&starts[1].1, stuck, "{starts:?}");
    let workers = bus.registry().list();
    let dead: Vec<&str> = workers
        .iter()
        .filter(|w| w.status == WorkerStatus::Dead)
        .map(|w| w.name.as_str())
        .collect();
    assert_eq!(dead, vec![stuck.as_str()], "{workers:?}");
    assert_eq!(
        bus.workers("job").len(),
        2,
        "a replacement keeps the worker count"
    );
    assert!(bus.workers("job").contains(&"job-2".to_owned()));
    assert!(bus.dead_letters().await.unwrap().is_empty());
    let m = bus.metrics().topic("job").unwrap();
    assert_eq!((m.acked, m.dead), (1, 0));

    // Both are announced: the stuck worker dead (with the message it held), its
    // replacement joined.
    watch
        .wait_until("the death and the replacement announced", WAIT, |seen| {
            let events: Vec<WorkerDiscovery> = seen.iter().map(|s| decode(&s.payload)).collect();
            events
                .iter()
                .any(|d| d.event == DiscoveryEvent::Dead && &d.worker.name == stuck)
                && events
                    .iter()
                    .any(|d| d.event == DiscoveryEvent::Joined && d.worker.name == "job-2")
        })
        .await;
    let events: Vec<WorkerDiscovery> = watch.seen().iter().map(|s| decode(&s.payload)).collect();
    let deaths: Vec<&WorkerDiscovery> = events
        .iter()
        .filter(|d| d.event == DiscoveryEvent::Dead)
        .collect();
    assert_eq!(deaths.len(), 1, "{events:?}");
    assert_eq!(deaths[0].worker.status, WorkerStatus::Dead);
}
