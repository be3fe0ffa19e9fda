//! Subscriptions over gRPC: `PauseSubscription` stops one handler of a topic while its sibling
//! goes on, `ResumeSubscription` lets it catch up, and the lag and pause state of every
//! subscription are in `ListTopics`, `GetMetrics` and `GetStatus`. Both RPCs are admin only
//! (a read token is `PERMISSION_DENIED`); an unknown topic or handler is `NOT_FOUND`, naming
//! the handlers the topic has.

// A test's unwrap is its assertion (as in event_base_test); helpers here too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ack, start, Probe, Served, READ, WAIT};
use event_base_grpc::client::AdminClient;
use event_base_grpc::pb;
use tonic::Code;

/// `signup` with two handlers, `mailer` (two workers) and `crm`, each with its own probe.
async fn signup() -> (Served, std::sync::Arc<Probe>, std::sync::Arc<Probe>) {
    let (mailer, crm) = (Probe::new(), Probe::new());
    let s = start(vec![
        mailer.handler("mailer", "signup", ack).workers(2),
        crm.handler("crm", "signup", ack),
    ])
    .await;
    (s, mailer, crm)
}

fn pause_req(topic: &str, handler: &str) -> pb::PauseSubscriptionRequest {
    pb::PauseSubscriptionRequest {
        topic: topic.into(),
        handler: handler.into(),
    }
}

fn resume_req(topic: &str, handler: &str) -> pb::ResumeSubscriptionRequest {
    pb::ResumeSubscriptionRequest {
        topic: topic.into(),
        handler: handler.into(),
    }
}

/// The `signup` topic as ListTopics shows it.
async fn signup_topic(c: &mut AdminClient) -> pb::Topic {
    c.list_topics(pb::ListTopicsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .topics
        .into_iter()
        .find(|t| t.name == "signup")
        .expect("signup is listed")
}

/// With `mailer` paused and `sent` behind, and `crm` caught up: what ListTopics, GetMetrics
/// and GetStatus say.
async fn the_lag_is_reported(c: &mut AdminClient, sent: u64) {
    // ListTopics: each subscription with its lag and state, by handler name.
    let topic = signup_topic(c).await;
    let subs: Vec<(&str, u64, bool)> = topic
        .subscriptions
        .iter()
        .map(|s| (s.handler.as_str(), s.lag, s.paused))
        .collect();
    assert_eq!(
        subs,
        [("crm", 0, false), ("mailer", sent, true)],
        "{topic:?}"
    );
    assert_eq!(topic.subscriptions[1].topic, "signup");

    // GetMetrics, when asked, and only for the topics asked for.
    let metrics = c
        .get_metrics(pb::GetMetricsRequest {
            topics: vec!["signup".into()],
            include_subscriptions: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mailer_sub = metrics
        .subscriptions
        .iter()
        .find(|s| s.handler == "mailer")
        .unwrap();
    assert_eq!((mailer_sub.lag, mailer_sub.paused), (sent, true));
    assert!(metrics.subscriptions.iter().all(|s| s.topic == "signup"));
    let without = c
        .get_metrics(pb::GetMetricsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(without.subscriptions.is_empty(), "only when asked for");

    // GetStatus: how many are paused, and the largest lag.
    let status = c
        .get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!((status.paused_subscriptions, status.max_lag), (1, sent));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_handler_waits_while_its_sibling_goes_on_and_catches_up_on_resume() {
    let (s, mailer, crm) = signup().await;
    let mut c = s.admin().await;

    let paused = c
        .pause_subscription(pause_req("signup", "mailer"))
        .await
        .unwrap()
        .into_inner();
    assert!(!paused.already);
    let sub = paused.subscription.unwrap();
    assert_eq!(
        (
            sub.topic.as_str(),
            sub.handler.as_str(),
            sub.paused,
            sub.lag
        ),
        ("signup", "mailer", true, 0)
    );
    assert!(s.bus.is_paused("signup", "mailer").unwrap());
    assert!(!s.bus.is_paused("signup", "crm").unwrap());

    const SENT: usize = 6;
    for i in 0..SENT {
        s.bus.send("signup", vec![i as u8]).await.unwrap();
    }
    // The sibling handles every one; the paused handler none, and all of them are its lag.
    crm.wait_for(SENT).await;
    common::lag_drains(&s.bus, "signup", "crm").await;
    assert_eq!(mailer.count(), 0, "a paused handler starts nothing");

    the_lag_is_reported(&mut c, SENT as u64).await;

    // Pausing again changes nothing, and says so.
    let again = c
        .pause_subscription(pause_req("signup", "mailer"))
        .await
        .unwrap()
        .into_inner();
    assert!(again.already);
    assert_eq!(again.subscription.unwrap().lag, SENT as u64);

    // Resumed, it takes up what waited.
    let resumed = c
        .resume_subscription(resume_req("signup", "mailer"))
        .await
        .unwrap()
        .into_inner();
    assert!(!resumed.already);
    assert_eq!(resumed.waited, SENT as u64, "what waited for it");
    assert!(!resumed.subscription.unwrap().paused);
    mailer.wait_for(SENT).await;
    s.bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(mailer.count(), SENT);
    let topic = signup_topic(&mut c).await;
    assert!(
        topic.subscriptions.iter().all(|s| s.lag == 0 && !s.paused),
        "{topic:?}"
    );
    let status = c
        .get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!((status.paused_subscriptions, status.max_lag), (0, 0));
    let twice = c
        .resume_subscription(resume_req("signup", "mailer"))
        .await
        .unwrap()
        .into_inner();
    assert!(twice.already, "resuming a running handler changes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_token_may_look_but_not_pause() {
    let (s, _mailer, _crm) = signup().await;
    let mut read = s.client(Some(READ)).await;
    let denied = read
        .pause_subscription(pause_req("signup", "mailer"))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert!(denied.message().contains("admin"), "{}", denied.message());
    let denied = read
        .resume_subscription(resume_req("signup", "mailer"))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert!(!s.bus.is_paused("signup", "mailer").unwrap());
    // Its lag and state it may read.
    let topic = signup_topic(&mut read).await;
    assert_eq!(topic.subscriptions.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_topic_or_handler_is_not_found_naming_the_handlers() {
    let (s, _mailer, _crm) = signup().await;
    let mut c = s.admin().await;
    let unknown = c
        .pause_subscription(pause_req("signup", "nobody"))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");
    let message = unknown.message();
    assert!(
        message.contains("no handler `nobody`") && message.contains("[mailer, crm]"),
        "says which handlers there are: {message}"
    );
    let unknown = c
        .resume_subscription(resume_req("nowhere", "mailer"))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");
    let empty = c
        .pause_subscription(pause_req("signup", ""))
        .await
        .unwrap_err();
    assert_eq!(empty.code(), Code::InvalidArgument, "{empty:?}");
    assert!(empty.message().contains("`handler`"), "{}", empty.message());
    assert!(!s.bus.is_paused("signup", "mailer").unwrap());
}
