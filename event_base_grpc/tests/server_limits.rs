//! The server's limits: a request over the decoding limit is OUT_OF_RANGE and an answer over
//! the encoding limit too; a call that takes longer than the request timeout ends CANCELLED;
//! a connection with its calls all under way makes the next one wait, other connections not.

// A test's unwrap is its assertion (as in event_base_test); helpers here too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{ack, bus_with, dead, Probe, Served, ADMIN, READ};
use event_base_core::{handler_fn, Ack, EventBus, HandlerSpec};
use event_base_grpc::{pb, GrpcServer, GrpcServerBuilder, Tokens, WatchFeed};
use tokio::sync::{Notify, Semaphore};

/// Serves `builder` (tokens set here) on a free loopback port.
fn serve(bus: EventBus, builder: GrpcServerBuilder) -> Served {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let handle = builder
        .tokens(Tokens::new().read(READ).admin(ADMIN))
        .serve_with_incoming(listener)
        .unwrap();
    let addr = format!("http://{}", handle.local_addr());
    Served { bus, handle, addr }
}

fn publish(topic: &str, payload: Vec<u8>) -> pb::PublishRequest {
    pb::PublishRequest {
        topic: topic.into(),
        message: Some(pb::OutgoingMessage {
            payload: payload.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A bus whose one worker on `slow` waits in its handler until `gate` has permits, behind a
/// queue of one, and a signal when the handler is entered.
async fn slow_bus() -> (EventBus, Arc<Semaphore>, Arc<Notify>) {
    let gate = Arc::new(Semaphore::new(0));
    let entered = Arc::new(Notify::new());
    let handler = {
        let gate = gate.clone();
        let entered = entered.clone();
        handler_fn(move |_m| {
            let gate = gate.clone();
            let entered = entered.clone();
            async move {
                entered.notify_one();
                let _permit = gate.acquire().await;
                Ack::Ack
            }
        })
    };
    let bus = EventBus::builder()
        .wal(event_base_wal::MemoryWal::new())
        .queue(event_base_queue::FlumeQueueFactory::bounded(1))
        .batch_size(1)
        .handler(HandlerSpec::new("slow", "slow", handler))
        .build()
        .await
        .unwrap();
    (bus, gate, entered)
}

/// Fills the slow bus's queue (its worker held in the handler): the next plain publish waits.
async fn fill(c: &mut event_base_grpc::client::AdminClient, entered: &Notify) {
    c.publish(publish("slow", b"first".to_vec())).await.unwrap();
    entered.notified().await;
    for i in 0..8u8 {
        let mut req = publish("slow", vec![i]);
        req.try_send = true;
        if let Err(e) = c.publish(req).await {
            assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
            return;
        }
    }
    panic!("a queue of one fills up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_messages_are_out_of_range() {
    let probe = Probe::new();
    let (bus, feed) = bus_with(vec![
        probe.handler("jobs", "jobs", ack),
        probe.handler("bad", "bad", dead),
    ])
    .await;
    let s = serve(
        bus.clone(),
        GrpcServer::builder(bus)
            .watch_feed(feed)
            .max_decoding_message_size(1024)
            .max_encoding_message_size(1024),
    );
    let mut c = s.admin().await;
    c.publish(publish("jobs", vec![b'x'; 100])).await.unwrap();
    let refused = c
        .publish(publish("jobs", vec![b'x'; 2048]))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::OutOfRange, "{refused:?}");
    probe.wait_for(1).await;
    s.bus.wait_idle(common::WAIT).await.unwrap();
    assert_eq!(probe.count(), 1, "the oversized message was not sent");

    // An answer over the encoding limit: a dead letter with a 2 KiB payload, whole.
    let id = s.bus.send("bad", vec![b'y'; 2048]).await.unwrap();
    s.bus.wait_idle(common::WAIT).await.unwrap();
    let refused = c
        .get_dead_letter(pb::GetDeadLetterRequest {
            id: id.as_str().to_owned(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::OutOfRange, "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_request_timeout_is_cancelled() {
    let (bus, gate, entered) = slow_bus().await;
    let s = serve(
        bus.clone(),
        GrpcServer::builder(bus)
            .watch_feed(WatchFeed::new(16))
            .request_timeout(Duration::from_millis(300)),
    );
    let mut c = s.admin().await;
    fill(&mut c, &entered).await;
    // The queue is full and the worker held: this publish waits for room until the server
    // cuts it. The client sets no deadline of its own.
    let cut = tokio::time::timeout(common::WAIT, c.publish(publish("slow", b"late".to_vec())))
        .await
        .expect("the server's timeout ends the call")
        .unwrap_err();
    assert_eq!(cut.code(), tonic::Code::Cancelled, "{cut:?}");
    assert!(cut.message().contains("Timeout"), "{}", cut.message());
    // The server still answers quick calls.
    c.get_status(pb::GetStatusRequest {}).await.unwrap();
    gate.add_permits(100);
    s.bus.wait_idle(common::WAIT).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_has_a_concurrency_limit() {
    // One call at a time per connection, each cut after 400 ms: two waiting publishes on
    // one connection run one after the other, so the second ends no sooner than 800 ms after
    // both were sent. Without the limit both would end at about 400 ms.
    const CUT: Duration = Duration::from_millis(400);
    let (bus, gate, entered) = slow_bus().await;
    let s = serve(
        bus.clone(),
        GrpcServer::builder(bus)
            .watch_feed(WatchFeed::new(16))
            .concurrency_limit_per_connection(1)
            .request_timeout(CUT),
    );
    let mut c = s.admin().await;
    fill(&mut c, &entered).await;
    let start = tokio::time::Instant::now();
    let waiting = |name: &'static str| {
        let mut c = c.clone();
        tokio::spawn(async move {
            let refused = c.publish(publish("slow", name.into())).await.unwrap_err();
            (refused.code(), start.elapsed())
        })
    };
    let (a, b) = (waiting("a"), waiting("b"));
    // Another connection is not held up by this one's limit.
    let mut other = s.client(Some(READ)).await;
    other.get_status(pb::GetStatusRequest {}).await.unwrap();
    let (a, b) = tokio::time::timeout(common::WAIT, async { (a.await, b.await) })
        .await
        .expect("both calls end");
    let ((code_a, took_a), (code_b, took_b)) = (a.unwrap(), b.unwrap());
    assert_eq!(
        (code_a, code_b),
        (tonic::Code::Cancelled, tonic::Code::Cancelled)
    );
    let later = took_a.max(took_b);
    assert!(
        later >= CUT * 2,
        "the second call waited for the first's slot: ended after {later:?}"
    );
    gate.add_permits(100);
    s.bus.wait_idle(common::WAIT).await.unwrap();
}
