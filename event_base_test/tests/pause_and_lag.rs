//! `EventBus::pause`/`resume` and `lag`: a paused handler starts nothing new while its
//! sibling on the same topic goes on, its messages wait (counted in its lag) and are
//! handled after `resume`; an unknown handler is a clear error.

use std::sync::Arc;

use event_base::prelude::*;
use event_base_test::{Probe, WAIT};

async fn two_handlers(probe: &Arc<Probe>) -> EventBus {
    EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::default())
        .handler(probe.handler("mailer", "signup", |_| Ack::Ack).workers(2))
        .handler(probe.handler("crm", "signup", |_| Ack::Ack))
        .build()
        .await
        .unwrap()
}

fn count(probe: &Probe, label: &str) -> usize {
    probe.seen().iter().filter(|s| s.label == label).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_handler_waits_while_its_sibling_goes_on_and_catches_up_on_resume() {
    let probe = Probe::new();
    let bus = two_handlers(&probe).await;
    bus.pause("signup", "mailer").unwrap();
    assert!(bus.is_paused("signup", "mailer").unwrap());
    assert!(!bus.is_paused("signup", "crm").unwrap());
    for i in 0..20u8 {
        bus.send("signup", vec![i]).await.unwrap();
    }
    // The sibling handles all twenty...
    probe
        .wait_until("crm's twenty", WAIT, |s| {
            s.iter().filter(|s| s.label == "crm").count() == 20
        })
        .await;
    // ...and once it has, nothing of the paused one has started, and all of it is lag.
    assert_eq!(
        count(&probe, "mailer"),
        0,
        "a paused handler starts nothing"
    );
    assert_eq!(bus.lag("signup", "mailer").unwrap(), 20);
    probe
        .wait_until("crm's lag at zero", WAIT, |_| {
            bus.lag("signup", "crm").unwrap() == 0
        })
        .await;

    bus.resume("signup", "mailer").unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(count(&probe, "mailer"), 20);
    assert_eq!(bus.lag("signup", "mailer").unwrap(), 0);
    // Pausing twice, resuming twice: no error, no change.
    bus.resume("signup", "mailer").unwrap();
    bus.pause("signup", "crm").unwrap();
    bus.pause("signup", "crm").unwrap();
    bus.resume("signup", "crm").unwrap();
    bus.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_handler_with_one_worker_still_shuts_down() {
    let probe = Probe::new();
    let bus = EventBus::builder()
        .wal(MemoryWal::new())
        .queue(FlumeQueueFactory::default())
        .handler(probe.handler("h", "jobs", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    bus.pause("jobs", "h").unwrap();
    bus.send("jobs", b"x".to_vec()).await.unwrap();
    assert_eq!(bus.lag("jobs", "h").unwrap(), 1);
    let report = tokio::time::timeout(WAIT, bus.shutdown(ShutdownStrategy::Force))
        .await
        .expect("shutdown does not hang on a paused handler")
        .unwrap();
    assert_eq!(
        report.left_for_replay, 1,
        "the waiting message stays for replay"
    );
    assert_eq!(count(&probe, "h"), 0);
}

#[tokio::test]
async fn an_unknown_topic_or_handler_is_a_clear_error() {
    let probe = Probe::new();
    let bus = two_handlers(&probe).await;
    match bus.pause("signup", "nobody").unwrap_err() {
        CoreError::UnknownHandler {
            topic,
            handler,
            handlers,
        } => {
            assert_eq!((topic.as_str(), handler.as_str()), ("signup", "nobody"));
            assert_eq!(handlers, vec!["mailer".to_owned(), "crm".to_owned()]);
        }
        other => panic!("{other}"),
    }
    let err = bus.lag("nowhere", "mailer").unwrap_err();
    assert!(err.to_string().contains("no handler `mailer`"), "{err}");
    assert!(bus.resume("nowhere", "x").is_err());
    bus.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_snapshot_shows_each_subscriptions_lag_and_pause() {
    let probe = Probe::new();
    let bus = two_handlers(&probe).await;
    bus.pause("signup", "mailer").unwrap();
    for i in 0..5u8 {
        bus.send("signup", vec![i]).await.unwrap();
    }
    probe
        .wait_until("crm's five", WAIT, |s| {
            s.iter().filter(|s| s.label == "crm").count() == 5
        })
        .await;
    probe
        .wait_until("crm's lag at zero", WAIT, |_| {
            bus.lag("signup", "crm").unwrap() == 0
        })
        .await;

    let snap = bus.metrics();
    let mailer = snap.subscription("signup", "mailer").unwrap();
    assert_eq!((mailer.lag, mailer.paused), (5, true));
    assert_eq!(mailer.lag, bus.lag("signup", "mailer").unwrap());
    assert_eq!(
        mailer.lag,
        snap.handler("mailer").unwrap().in_flight,
        "the handler's in flight is its lag"
    );
    let crm = snap.subscription("signup", "crm").unwrap();
    assert_eq!((crm.lag, crm.paused), (0, false));
    // Sorted by topic, then handler; the bus's own topics are there too.
    let signup: Vec<&str> = snap
        .subscriptions_of("signup")
        .map(|s| s.handler.as_str())
        .collect();
    assert_eq!(signup, ["crm", "mailer"]);
    let keys: Vec<(&str, &str)> = snap
        .subscriptions
        .iter()
        .map(|s| (s.topic.as_str(), s.handler.as_str()))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(keys, sorted);
    assert!(
        keys.iter().any(|(t, _)| t.starts_with("_system.")),
        "{keys:?}"
    );
    assert!(snap.subscription("signup", "nobody").is_none());

    bus.resume("signup", "mailer").unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let after = bus.metrics();
    let mailer = after.subscription("signup", "mailer").unwrap();
    assert_eq!((mailer.lag, mailer.paused), (0, false));
    bus.close().await.unwrap();
}
