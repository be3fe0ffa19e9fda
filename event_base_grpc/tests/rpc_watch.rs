//! Watch streams dead-letter, worker and lifecycle events as they happen, in order; a
//! watcher that reads too slowly gets a `lagged { skipped }` event and its stream goes on.

// A test's unwrap is its assertion (as in event_base_test); helpers here too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ack, dead, start, Probe};
use event_base_core::EMessage;
use event_base_grpc::pb;
use pb::watch_response::Event;
use tokio_stream::StreamExt;

type Events = tonic::Streaming<pb::WatchResponse>;

async fn next(events: &mut Events) -> pb::WatchResponse {
    tokio::time::timeout(common::WAIT, events.next())
        .await
        .expect("an event in time")
        .expect("the stream goes on")
        .expect("an event, not an error")
}

fn kinds(k: &[pb::WatchEventKind]) -> pb::WatchRequest {
    pb::WatchRequest {
        kinds: k.iter().map(|k| *k as i32).collect(),
        topics: vec![],
        metrics_interval: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_arrive_in_order_then_worker_and_lifecycle_events() {
    let probe = Probe::new();
    let s = start(vec![
        probe.handler("bad", "bad", dead),
        probe.handler("jobs", "jobs", ack),
    ])
    .await;
    let mut c = s.client(Some(common::READ)).await;
    let mut events = c
        .watch(pb::WatchRequest::default())
        .await
        .unwrap()
        .into_inner();

    let mut sent = Vec::new();
    for i in 0..5u8 {
        sent.push(s.bus.send("bad", vec![i]).await.unwrap().to_string());
        // One at a time, so the order of dying is the order of sending.
        s.bus.wait_idle(common::WAIT).await.unwrap();
    }
    let mut got = Vec::new();
    let mut last_seq = 0;
    while got.len() < 5 {
        let e = next(&mut events).await;
        assert!(e.seq > last_seq, "seq goes up");
        last_seq = e.seq;
        if let Some(Event::DeadLetter(d)) = e.event {
            let m = d.message.unwrap();
            assert_eq!(m.topic, "bad");
            got.push(m.id);
        }
    }
    assert_eq!(got, sent);

    let mut admin = s.admin().await;
    let added = admin
        .add_workers(pb::AddWorkersRequest {
            handler: "jobs".into(),
            count: 1,
        })
        .await
        .unwrap()
        .into_inner()
        .names;
    let e = next(&mut events).await;
    let Some(Event::Worker(w)) = e.event else {
        panic!("expected a worker event, got {e:?}");
    };
    assert_eq!(w.change, pb::WorkerChange::Joined as i32);
    assert_eq!(w.worker.unwrap().name, added[0]);

    admin
        .shutdown(pb::ShutdownRequest {
            strategy: Some(pb::shutdown_request::Strategy::Force(pb::ForceStrategy {})),
            reason: String::new(),
        })
        .await
        .unwrap();
    let mut stages = Vec::new();
    while stages.len() < 2 {
        if let Some(Event::Lifecycle(l)) = next(&mut events).await.event {
            stages.push(l.stage);
            if l.stage == pb::LifecycleStage::ShutdownFinished as i32 {
                assert_eq!(l.report.unwrap().strategy, "force");
            }
        }
    }
    assert_eq!(
        stages,
        [
            pb::LifecycleStage::ShutdownStarted as i32,
            pb::LifecycleStage::ShutdownFinished as i32
        ]
    );
    // Stopping the server ends the stream cleanly.
    s.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_and_topics_select_events() {
    let probe = Probe::new();
    let s = start(vec![
        probe.handler("bad", "bad", dead),
        probe.handler("worse", "worse", dead),
    ])
    .await;
    let mut c = s.admin().await;
    let mut req = kinds(&[pb::WatchEventKind::DeadLetter]);
    req.topics = vec!["worse".into()];
    let mut events = c.watch(req).await.unwrap().into_inner();
    s.bus.send("bad", b"no".to_vec()).await.unwrap();
    s.bus.send("worse", b"yes".to_vec()).await.unwrap();
    let e = next(&mut events).await;
    let Some(Event::DeadLetter(d)) = e.event else {
        panic!("expected a dead letter, got {e:?}");
    };
    assert_eq!(d.message.unwrap().payload.as_ref(), b"yes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_gets_lagged_and_goes_on() {
    let probe = Probe::new();
    let s = start(vec![probe.handler("bad", "bad", dead)]).await;
    let mut c = s.admin().await;
    let mut events = c
        .watch(kinds(&[pb::WatchEventKind::DeadLetter]))
        .await
        .unwrap()
        .into_inner();
    // Far more events than the feed (64), the watcher's buffer and the HTTP/2 window hold
    // while nobody reads.
    let batch: Vec<EMessage> = (0..3000u32)
        .map(|i| EMessage::standard("bad", i.to_le_bytes().to_vec()))
        .collect();
    s.bus.send_batch("bad", batch).await.unwrap();
    s.bus.wait_idle(common::WAIT).await.unwrap();
    let marker = s
        .bus
        .send("bad", b"after".to_vec())
        .await
        .unwrap()
        .to_string();
    s.bus.wait_idle(common::WAIT).await.unwrap();

    let mut skipped = 0;
    let mut dead_letters = 0;
    loop {
        match next(&mut events).await.event {
            Some(Event::Lagged(l)) => skipped += l.skipped,
            Some(Event::DeadLetter(d)) => {
                dead_letters += 1;
                if d.message.unwrap().id == marker {
                    break;
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(skipped > 0, "the slow reader was told it lagged");
    assert!(dead_letters < 3001, "some events were skipped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_feed_handlers_watch_says_how_to_add_them() {
    let probe = Probe::new();
    let bus = event_base_core::EventBus::builder()
        .wal(event_base_wal::MemoryWal::new())
        .queue(event_base_queue::FlumeQueueFactory::default())
        .handler(probe.handler("jobs", "jobs", ack))
        .build()
        .await
        .unwrap();
    let s = common::serve(bus, event_base_grpc::WatchFeed::default()).await;
    let mut c = s.admin().await;
    let err = c.watch(pb::WatchRequest::default()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(
        err.message().contains("WatchFeed::handlers"),
        "{}",
        err.message()
    );
    // Lifecycle events need no handler.
    let mut events = c
        .watch(kinds(&[pb::WatchEventKind::Lifecycle]))
        .await
        .unwrap()
        .into_inner();
    s.bus
        .shutdown(event_base_core::ShutdownStrategy::Force)
        .await
        .unwrap();
    let e = next(&mut events).await;
    let Some(Event::Lifecycle(l)) = e.event else {
        panic!("expected a lifecycle event, got {e:?}");
    };
    assert_eq!(l.stage, pb::LifecycleStage::ShutdownStarted as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_records_are_streamed_when_asked_for() {
    let probe = Probe::new();
    let (bus, feed) = common::bus_with_feed(
        vec![
            probe.handler("jobs", "jobs", ack),
            probe.handler("other", "other", ack),
        ],
        event_base_grpc::WatchFeed::new(64).with_audit(true),
    )
    .await;
    let s = common::serve(bus, feed).await;
    let mut c = s.client(Some(common::READ)).await;
    let mut req = kinds(&[pb::WatchEventKind::Audit]);
    req.topics = vec!["jobs".into()];
    let mut events = c.watch(req).await.unwrap().into_inner();

    s.bus.send("other", b"not watched".to_vec()).await.unwrap();
    let id = s.bus.send("jobs", b"j".to_vec()).await.unwrap().to_string();
    s.bus.wait_idle(common::WAIT).await.unwrap();

    let mut got = Vec::new();
    while got.len() < 2 {
        let e = next(&mut events).await;
        let Some(Event::Audit(r)) = e.event else {
            panic!("expected an audit record, got {e:?}");
        };
        assert_eq!(r.topic, "jobs", "only the topic asked for");
        got.push(r);
    }
    // The same records the core's audit log holds.
    let core = s.bus.audit().for_message(&id);
    assert_eq!(core.len(), 2);
    for (streamed, held) in got.iter().zip(&core) {
        assert_eq!(streamed.message_id, id);
        assert_eq!(streamed.seq, held.seq);
        assert_eq!(streamed.worker, &*held.worker);
    }
    assert_eq!(got[0].event, pb::AuditEventKind::Started as i32);
    assert_eq!(got[1].event, pb::AuditEventKind::Acked as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_watch_has_no_audit_records() {
    let probe = Probe::new();
    let s = start(vec![
        probe.handler("jobs", "jobs", ack),
        probe.handler("bad", "bad", dead),
    ])
    .await;
    let mut c = s.admin().await;
    let mut events = c
        .watch(pb::WatchRequest::default())
        .await
        .unwrap()
        .into_inner();
    s.bus.send("jobs", b"audited".to_vec()).await.unwrap();
    s.bus.wait_idle(common::WAIT).await.unwrap();
    s.bus.send("bad", b"dies".to_vec()).await.unwrap();
    // The first event is the dead letter: the four audit records before it were not sent.
    let e = next(&mut events).await;
    assert!(
        matches!(e.event, Some(Event::DeadLetter(_))),
        "expected the dead letter first, got {e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_come_at_once_then_on_the_interval() {
    let probe = Probe::new();
    let s = start(vec![
        probe.handler("jobs", "jobs", ack),
        probe.handler("other", "other", ack),
    ])
    .await;
    let mut c = s.client(Some(common::READ)).await;
    let mut req = kinds(&[pb::WatchEventKind::Metrics]);
    req.topics = vec!["jobs".into()];
    req.metrics_interval = Some(prost_types::Duration {
        seconds: 0,
        nanos: 100_000_000,
    });
    let mut events = c.watch(req).await.unwrap().into_inner();

    let first = next(&mut events).await;
    let Some(Event::Metrics(m)) = first.event else {
        panic!("expected metrics, got {first:?}");
    };
    assert_eq!(first.seq, 0, "metrics are the watcher's own");
    assert_eq!(m.topics.keys().collect::<Vec<_>>(), ["jobs"]);
    assert_eq!(m.topics["jobs"].acked, 0);

    for i in 0..3u8 {
        s.bus.send("jobs", vec![i]).await.unwrap();
    }
    s.bus.wait_idle(common::WAIT).await.unwrap();
    // Later snapshots see the work, as the core counts it.
    loop {
        let e = next(&mut events).await;
        let Some(Event::Metrics(m)) = e.event else {
            panic!("only metrics were asked for, got {e:?}");
        };
        if m.topics["jobs"].acked == 3 {
            assert_eq!(m.topics["jobs"].sent, s.bus.metrics().topics["jobs"].sent);
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_needs_a_feed_with_audit() {
    let probe = Probe::new();
    // The feed's handlers, without the audit one (the default).
    let s = start(vec![probe.handler("bad", "bad", dead)]).await;
    let mut c = s.admin().await;
    let err = c
        .watch(kinds(&[pb::WatchEventKind::Audit]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(
        err.message().contains("WATCH_EVENT_KIND_AUDIT") && err.message().contains("with_audit"),
        "{}",
        err.message()
    );
    // The other kinds still work.
    let mut events = c
        .watch(pb::WatchRequest::default())
        .await
        .unwrap()
        .into_inner();
    s.bus.send("bad", b"x".to_vec()).await.unwrap();
    let e = next(&mut events).await;
    assert!(matches!(e.event, Some(Event::DeadLetter(_))), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_adds_the_feed_handlers() {
    let probe = Probe::new();
    let feed = event_base_grpc::WatchFeed::new(64).with_audit(true);
    let builder = event_base_core::EventBus::builder()
        .wal(event_base_wal::MemoryWal::new())
        .queue(event_base_queue::FlumeQueueFactory::default())
        .handler(probe.handler("bad", "bad", dead));
    let bus = feed.register(builder).build().await.unwrap();
    for handler in [
        event_base_grpc::DEAD_LETTER_HANDLER,
        event_base_grpc::WORKER_HANDLER,
        event_base_grpc::AUDIT_HANDLER,
    ] {
        assert!(
            bus.registry().get(&format!("{handler}-0")).is_some(),
            "{handler}"
        );
    }
    let s = common::serve(bus, feed).await;
    let mut c = s.admin().await;
    let mut events = c
        .watch(kinds(&[
            pb::WatchEventKind::DeadLetter,
            pb::WatchEventKind::Audit,
        ]))
        .await
        .unwrap()
        .into_inner();
    s.bus.send("bad", b"x".to_vec()).await.unwrap();
    let mut dead_letter = false;
    let mut audit = 0;
    while !(dead_letter && audit == 2) {
        match next(&mut events).await.event {
            Some(Event::DeadLetter(_)) => dead_letter = true,
            Some(Event::Audit(_)) => audit += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
}
