//! Request/reply: each request gets its own reply, and only its requester gets it; no reply
//! in time is a `Timeout` (on a paused clock: exactly at the deadline); a late reply is
//! dropped without error; no handler is `NoHandler`; a request is an ordinary message
//! (retried when its handler fails).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use event_base::prelude::*;
use event_base::{handler_fn, REPLY_TO};
use event_base_test::WAIT;

/// A handler on `topic` that replies with the request's payload and `!`, from 4 workers.
fn echo(topic: &str) -> HandlerSpec {
    HandlerSpec::new(
        "echo",
        topic,
        handler_fn(|msg: EMessage| async move {
            let mut answer = msg.payload.as_bytes().to_vec();
            answer.push(b'!');
            match reply(&msg, answer).await {
                Ok(()) => Ack::Ack,
                Err(_) => Ack::retry(),
            }
        }),
    )
    .workers(4)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_requests_each_get_their_own_reply() {
    let bus = event_base::builder()
        .handler(echo("price"))
        .build()
        .await
        .unwrap();
    let mut requests = tokio::task::JoinSet::new();
    for i in 0..20 {
        let bus = bus.clone();
        requests.spawn(async move {
            let asked = format!("item-{i}");
            let request = EMessage::standard("price", asked.clone().into_bytes());
            let id = request.id.clone();
            let answer = bus.request("price", request, WAIT).await.unwrap();
            (asked, id, answer)
        });
    }
    let mut answered = 0;
    while let Some(done) = requests.join_next().await {
        let (asked, id, answer) = done.unwrap();
        assert_eq!(
            answer.payload.as_bytes(),
            format!("{asked}!").as_bytes(),
            "a reply went to another requester"
        );
        assert_eq!(answer.metadata.correlation_id.as_deref(), Some(id.as_str()));
        answered += 1;
    }
    assert_eq!(answered, 20);
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(bus.metrics().topic("price").unwrap().acked, 20);
}

#[tokio::test(start_paused = true)]
async fn a_request_nobody_answers_times_out_at_its_deadline() {
    let bus = event_base::builder()
        .handler(HandlerSpec::new(
            "mute",
            "ask",
            handler_fn(|_msg: EMessage| async { Ack::Ack }),
        ))
        .build()
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let err = bus
        .request("ask", b"?".to_vec(), Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(
        matches!(err, CoreError::Timeout { after, .. } if after == Duration::from_secs(2)),
        "{err:?}"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_millis(2100),
        "timed out after {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_reply_after_the_timeout_is_dropped_without_error() {
    let (late_tx, late_rx) = flume::unbounded::<Result<(), CoreError>>();
    let release = Arc::new(tokio::sync::Notify::new());
    let handler_release = release.clone();
    let bus = event_base::builder()
        .handler(HandlerSpec::new(
            "slow",
            "slow",
            handler_fn(move |msg: EMessage| {
                let release = handler_release.clone();
                let late_tx = late_tx.clone();
                async move {
                    release.notified().await;
                    let _ = late_tx.send(reply(&msg, b"late".to_vec()).await);
                    Ack::Ack
                }
            }),
        ))
        .build()
        .await
        .unwrap();
    let err = bus
        .request("slow", b"?".to_vec(), Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(err, CoreError::Timeout { .. }), "{err:?}");
    release.notify_one();
    let late = late_rx.recv_async().await.unwrap();
    assert!(late.is_ok(), "a late reply is not an error: {late:?}");
    bus.wait_idle(WAIT).await.unwrap();
    assert!(bus.dead_letters().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_request_to_a_topic_without_handler_is_refused() {
    let bus = event_base::builder()
        .handler(echo("price"))
        .build()
        .await
        .unwrap();
    let err = bus
        .request("nobody.home", b"?".to_vec(), WAIT)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CoreError::NoHandler { topic } if topic == "nobody.home"),
        "{err:?}"
    );
}

#[tokio::test]
async fn replying_to_a_message_that_is_not_a_request_is_an_error() {
    let plain = EMessage::standard("price", b"x".to_vec());
    let err = reply(&plain, b"y".to_vec()).await.unwrap_err();
    assert!(matches!(err, CoreError::InvalidParameter { .. }), "{err:?}");
}

#[tokio::test(start_paused = true)]
async fn a_request_is_retried_when_its_handler_fails_and_is_audited() {
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let bus = event_base::builder()
        .handler(HandlerSpec::new(
            "flaky",
            "flaky",
            handler_fn(move |msg: EMessage| {
                let calls = counted.clone();
                async move {
                    assert!(msg.headers.get(REPLY_TO).is_some(), "a request is marked");
                    if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        return Ack::NoAck {
                            retry_after: Some(Duration::from_millis(100)),
                            max_retries: 3,
                        };
                    }
                    let _ = reply(&msg, format!("attempt {}", msg.attempts)).await;
                    Ack::Ack
                }
            }),
        ))
        .build()
        .await
        .unwrap();
    let answer = bus.request("flaky", b"?".to_vec(), WAIT).await.unwrap();
    assert_eq!(
        answer.payload.as_bytes(),
        b"attempt 2",
        "the reply came from the second delivery"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        bus.wal_stats().appended,
        1,
        "the request went through the WAL"
    );
    let request_id = answer.metadata.correlation_id.clone().unwrap();
    assert!(
        bus.audit().for_message(&request_id).len() >= 2,
        "both deliveries of the request are audited"
    );
}

/// `request_json`: JSON out, JSON back, decoded into the caller's type; an answer of another
/// shape is `CoreError::Decode` naming the type, not a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_json_decodes_the_reply_or_says_why_not() {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Total {
        items: usize,
    }
    let bus = event_base::builder()
        .handler(HandlerSpec::new(
            "count",
            "count",
            handler_fn(|m: EMessage| async move {
                let items: Vec<String> = m.json_payload().unwrap_or_default();
                let answered = if items.is_empty() {
                    reply(&m, b"not json".to_vec()).await
                } else {
                    reply_json(&m, &Total { items: items.len() }).await
                };
                match answered {
                    Ok(()) => Ack::Ack,
                    Err(_) => Ack::retry(),
                }
            }),
        ))
        .build()
        .await
        .unwrap();
    let total: Total = bus
        .request_json("count", &["a", "b", "c"], WAIT)
        .await
        .unwrap();
    assert_eq!(total, Total { items: 3 });
    let empty: [&str; 0] = [];
    let err = bus
        .request_json::<_, Total>("count", &empty, WAIT)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CoreError::Decode { what, .. } if what.ends_with("Total")),
        "{err}"
    );
    bus.close().await.unwrap();
}
