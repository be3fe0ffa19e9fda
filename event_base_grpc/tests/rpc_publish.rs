//! Publish and PublishBatch over gRPC: every delivery mode with its exact delivery count,
//! to_worker, a future deliver_at, ids carried, try_send, and the codes of refused sends.

// A test's unwrap is its assertion (as in event_base_test); helpers here too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, SystemTime};

use common::{ack, start, Probe};
use event_base_grpc::pb;

fn message(payload: &[u8]) -> pb::OutgoingMessage {
    pb::OutgoingMessage {
        payload: payload.to_vec().into(),
        ..Default::default()
    }
}

fn publish(topic: &str, m: pb::OutgoingMessage) -> pb::PublishRequest {
    pb::PublishRequest {
        topic: topic.into(),
        message: Some(m),
        ..Default::default()
    }
}

fn mode(kind: pb::DeliveryModeKind, repeat_count: u32) -> Option<pb::DeliveryMode> {
    Some(pb::DeliveryMode {
        kind: kind as i32,
        repeat_count,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_delivers_exactly_as_the_core_does() {
    let probe = Probe::new();
    let s = start(vec![probe.handler("jobs", "jobs", ack).workers(3)]).await;
    let mut c = s.admin().await;
    let cases = [
        (pb::DeliveryModeKind::Unspecified, 0, 1),
        (pb::DeliveryModeKind::Standard, 0, 1),
        (pb::DeliveryModeKind::Broadcast, 0, 3),
        (pb::DeliveryModeKind::Repeated, 4, 4),
    ];
    for (kind, repeat, deliveries) in cases {
        let before = probe.count();
        let mut m = message(b"job");
        m.mode = mode(kind, repeat);
        let id = c.publish(publish("jobs", m)).await.unwrap().into_inner();
        assert!(!id.message_id.is_empty());
        s.bus.wait_idle(common::WAIT).await.unwrap();
        assert_eq!(probe.count() - before, deliveries, "{kind:?}");
    }
    let mut bad = message(b"job");
    bad.mode = mode(pb::DeliveryModeKind::Repeated, 0);
    let err = c.publish(publish("jobs", bad)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("repeat_count"), "{}", err.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_worker_and_schedule_are_carried() {
    let probe = Probe::new();
    let s = start(vec![probe.handler("jobs", "jobs", ack).workers(2)]).await;
    let mut c = s.admin().await;
    let mut m = message(b"pinned");
    m.id = Some("my-id-1".into());
    m.correlation_id = Some("corr-7".into());
    m.trace_id = Some("trace-9".into());
    m.to_worker = Some("jobs-1".into());
    let got = c.publish(publish("jobs", m)).await.unwrap().into_inner();
    assert_eq!(got.message_id, "my-id-1");
    s.bus.wait_idle(common::WAIT).await.unwrap();
    let audit = s.bus.audit().for_message("my-id-1");
    assert!(audit.iter().all(|r| &*r.worker == "jobs-1"), "{audit:?}");

    // Delivered no earlier than its time.
    let at = SystemTime::now() + Duration::from_millis(300);
    let mut later = message(b"later");
    later.schedule = Some(pb::outgoing_message::Schedule::DeliverAt(at.into()));
    let before = probe.count();
    c.publish(publish("jobs", later)).await.unwrap();
    assert_eq!(
        s.bus.metrics().node.waiting_on_timers,
        1,
        "held for its time"
    );
    probe.wait_for(before + 1).await;
    assert!(SystemTime::now() >= at, "not delivered before deliver_at");

    let mut delayed = message(b"delayed");
    delayed.schedule = Some(pb::outgoing_message::Schedule::Delay(
        prost_types::Duration {
            seconds: 0,
            nanos: 100_000_000,
        },
    ));
    c.publish(publish("jobs", delayed)).await.unwrap();
    s.bus.wait_idle(common::WAIT).await.unwrap();
    assert_eq!(probe.count(), before + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_sends_have_their_codes() {
    let probe = Probe::new();
    let s = start(vec![probe.handler("jobs", "jobs", ack)]).await;
    let mut c = s.admin().await;
    let code = |r: Result<tonic::Response<pb::PublishResponse>, tonic::Status>| {
        let e = r.unwrap_err();
        assert!(!e.message().is_empty());
        e.code()
    };
    assert_eq!(
        code(c.publish(publish("_system.audit", message(b"x"))).await),
        tonic::Code::InvalidArgument
    );
    assert_eq!(
        code(c.publish(publish("nobody-listens", message(b"x"))).await),
        tonic::Code::FailedPrecondition
    );
    let mut to_ghost = message(b"x");
    to_ghost.to_worker = Some("ghost-0".into());
    let err = c.publish(publish("jobs", to_ghost)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(err.message().contains("ghost-0"), "{}", err.message());
    assert_eq!(
        code(c.publish(publish("", message(b"x"))).await),
        tonic::Code::InvalidArgument
    );
    let mut empty_id = message(b"x");
    empty_id.id = Some(String::new());
    assert_eq!(
        code(c.publish(publish("jobs", empty_id)).await),
        tonic::Code::InvalidArgument
    );
    // Over the transport's 4 MiB limit: refused cleanly (tonic's OUT_OF_RANGE, naming the
    // limit), and the server goes on.
    let huge = message(&vec![0u8; 5 << 20]);
    let err = c.publish(publish("jobs", huge)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::OutOfRange);
    assert!(err.message().contains("4194304"), "{}", err.message());
    c.publish(publish("jobs", message(b"after"))).await.unwrap();
    s.bus.wait_idle(common::WAIT).await.unwrap();
    assert_eq!(probe.count(), 1, "only the valid message was delivered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_sent_whole_with_one_commit() {
    let probe = Probe::new();
    let s = start(vec![probe.handler("jobs", "jobs", ack)]).await;
    let mut c = s.admin().await;
    let appended = s.bus.wal_stats().appended;
    let ids = c
        .publish_batch(pb::PublishBatchRequest {
            topic: "jobs".into(),
            messages: (0..5u8).map(|i| message(&[i])).collect(),
        })
        .await
        .unwrap()
        .into_inner()
        .message_ids;
    assert_eq!(ids.len(), 5);
    s.bus.wait_idle(common::WAIT).await.unwrap();
    assert_eq!(probe.count(), 5);
    assert_eq!(s.bus.wal_stats().appended - appended, 5);

    // One bad message refuses the whole batch.
    let mut messages: Vec<_> = (0..3u8).map(|i| message(&[i])).collect();
    messages[2].to_worker = Some("ghost-0".into());
    let err = c
        .publish_batch(pb::PublishBatchRequest {
            topic: "jobs".into(),
            messages,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert_eq!(
        probe.count(),
        5,
        "nothing of the refused batch was delivered"
    );
    let empty = c
        .publish_batch(pb::PublishBatchRequest {
            topic: "jobs".into(),
            messages: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(empty.code(), tonic::Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_send_on_a_full_queue_is_resource_exhausted() {
    // One worker held inside its handler, a queue of one: the third message finds it full.
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let entered = std::sync::Arc::new(tokio::sync::Notify::new());
    let handler = {
        let gate = gate.clone();
        let entered = entered.clone();
        event_base_core::handler_fn(move |_m| {
            let gate = gate.clone();
            let entered = entered.clone();
            async move {
                entered.notify_one();
                let _permit = gate.acquire().await;
                event_base_core::Ack::Ack
            }
        })
    };
    let feed = event_base_grpc::WatchFeed::new(16);
    let bus = event_base_core::EventBus::builder()
        .wal(event_base_wal::MemoryWal::new())
        .queue(event_base_queue::FlumeQueueFactory::bounded(1))
        .batch_size(1)
        .handler(event_base_core::HandlerSpec::new("slow", "slow", handler))
        .build()
        .await
        .unwrap();
    let s = common::serve(bus, feed).await;
    let mut c = s.admin().await;
    c.publish(publish("slow", message(b"1"))).await.unwrap();
    entered.notified().await;
    let mut refused = None;
    for i in 0..8u8 {
        let mut req = publish("slow", message(&[i]));
        req.try_send = true;
        if let Err(e) = c.publish(req).await {
            refused = Some(e);
            break;
        }
    }
    let refused = refused.expect("a bounded queue fills up");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    assert!(refused.message().contains("full"), "{}", refused.message());
    gate.add_permits(100);
    s.bus.wait_idle(common::WAIT).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_timeout_is_refused_and_strands_nothing() {
    // A send that has to wait for room computes `now + timeout` after the WAL append: with a
    // timeout from the wire that overflows, that panicked, and the message stayed live in the
    // WAL, never delivered. So: a full queue (one worker held in its handler, a queue of
    // one), then publishes with huge timeouts.
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let entered = std::sync::Arc::new(tokio::sync::Notify::new());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Vec<u8>>::new()));
    let handler = {
        let (gate, entered, seen) = (gate.clone(), entered.clone(), seen.clone());
        event_base_core::handler_fn(move |m: event_base_core::EMessage| {
            let (gate, entered, seen) = (gate.clone(), entered.clone(), seen.clone());
            async move {
                entered.notify_one();
                let _permit = gate.acquire().await;
                seen.lock().unwrap().push(m.payload.as_bytes().to_vec());
                event_base_core::Ack::Ack
            }
        })
    };
    let bus = event_base_core::EventBus::builder()
        .wal(event_base_wal::MemoryWal::new())
        .queue(event_base_queue::FlumeQueueFactory::bounded(1))
        .batch_size(1)
        .handler(event_base_core::HandlerSpec::new("held", "held", handler))
        .build()
        .await
        .unwrap();
    let s = common::serve(bus, event_base_grpc::WatchFeed::new(16)).await;
    let mut c = s.admin().await;
    c.publish(publish("held", message(b"first"))).await.unwrap();
    entered.notified().await;
    let mut full = false;
    for i in 0..8u8 {
        let mut req = publish("held", message(&[b'0' + i]));
        req.try_send = true;
        if c.publish(req).await.is_err() {
            full = true;
            break;
        }
    }
    assert!(full, "a queue of one fills up");

    let longest = event_base_grpc::MAX_WIRE_DURATION.as_secs() as i64;
    for seconds in [i64::MAX, longest + 1] {
        let mut req = publish("held", message(b"never"));
        req.timeout = Some(prost_types::Duration { seconds, nanos: 0 });
        let err = c.publish(req).await.unwrap_err();
        assert_eq!(
            err.code(),
            tonic::Code::InvalidArgument,
            "{seconds}: {err:?}"
        );
        assert!(err.message().contains("timeout"), "{}", err.message());
    }
    gate.add_permits(1000);
    // The longest allowed is taken, and the server goes on.
    let mut req = publish("held", message(b"sent"));
    req.timeout = Some(prost_types::Duration {
        seconds: longest,
        nanos: 0,
    });
    c.publish(req).await.unwrap();
    s.bus.wait_idle(common::WAIT).await.unwrap();
    let payloads = seen.lock().unwrap().clone();
    assert!(!payloads.contains(&b"never".to_vec()), "{payloads:?}");
    assert!(payloads.contains(&b"sent".to_vec()), "{payloads:?}");
    let wal = s.bus.wal_stats();
    assert_eq!(wal.live, 0, "nothing stranded in the WAL: {wal:?}");
}
