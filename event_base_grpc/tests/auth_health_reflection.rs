//! Tokens gate every RPC (no token or a wrong one: UNAUTHENTICATED; a read token on an admin
//! RPC: PERMISSION_DENIED); health works without a token and turns NOT_SERVING when a shutdown
//! begins; reflection (v1 and v1alpha, gated) lists the admin and health services.

// A test's unwrap is its assertion (as in event_base_test); helpers here too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ack, dead, start, Probe, ADMIN, READ};
use event_base_grpc::client::AdminClient;
use event_base_grpc::pb;
use tokio_stream::StreamExt;
use tonic::Code;

/// Every RPC once with a harmless request; the code each answers (OK as `Code::Ok`).
/// `dead_id` is a dead letter's id, for GetDeadLetter.
async fn codes(c: &mut AdminClient, dead_id: &str) -> Vec<(&'static str, Code)> {
    let mut all = vec![
        (
            "GetStatus",
            code(c.get_status(pb::GetStatusRequest {}).await),
        ),
        (
            "ListTopics",
            code(c.list_topics(pb::ListTopicsRequest::default()).await),
        ),
        (
            "ListWorkers",
            code(c.list_workers(pb::ListWorkersRequest::default()).await),
        ),
        (
            "GetMetrics",
            code(c.get_metrics(pb::GetMetricsRequest::default()).await),
        ),
        (
            "GetWalStats",
            code(c.get_wal_stats(pb::GetWalStatsRequest {}).await),
        ),
        (
            "ListDeadLetters",
            code(
                c.list_dead_letters(pb::ListDeadLettersRequest::default())
                    .await,
            ),
        ),
        (
            "GetDeadLetter",
            code(
                c.get_dead_letter(pb::GetDeadLetterRequest { id: dead_id.into() })
                    .await,
            ),
        ),
        (
            "GetMessageAudit",
            code(
                c.get_message_audit(pb::GetMessageAuditRequest {
                    message_id: "m".into(),
                })
                .await,
            ),
        ),
        ("Watch", code(c.watch(pb::WatchRequest::default()).await)),
        // Admin RPCs, with requests that would be refused for their content if allowed: the
        // scope is checked first.
        (
            "Publish",
            code(c.publish(pb::PublishRequest::default()).await),
        ),
        (
            "PublishBatch",
            code(c.publish_batch(pb::PublishBatchRequest::default()).await),
        ),
        (
            "ReplayDeadLetter",
            code(
                c.replay_dead_letter(pb::ReplayDeadLetterRequest::default())
                    .await,
            ),
        ),
        (
            "ReplayDeadLetters",
            code(
                c.replay_dead_letters(pb::ReplayDeadLettersRequest::default())
                    .await,
            ),
        ),
        (
            "PurgeDeadLetters",
            code(
                c.purge_dead_letters(pb::PurgeDeadLettersRequest::default())
                    .await,
            ),
        ),
        (
            "AddWorkers",
            code(c.add_workers(pb::AddWorkersRequest::default()).await),
        ),
        (
            "RemoveWorker",
            code(c.remove_worker(pb::RemoveWorkerRequest::default()).await),
        ),
        (
            "Shutdown",
            code(c.shutdown(pb::ShutdownRequest::default()).await),
        ),
    ];
    all.extend(subscription_codes(c).await);
    all
}

/// The code of an answer (OK as `Code::Ok`).
fn code<T>(r: Result<tonic::Response<T>, tonic::Status>) -> Code {
    r.map_or_else(|e| e.code(), |_| Code::Ok)
}

/// The admin RPCs of subscriptions, with empty requests.
async fn subscription_codes(c: &mut AdminClient) -> Vec<(&'static str, Code)> {
    vec![
        (
            "PauseSubscription",
            code(
                c.pause_subscription(pb::PauseSubscriptionRequest::default())
                    .await,
            ),
        ),
        (
            "ResumeSubscription",
            code(
                c.resume_subscription(pb::ResumeSubscriptionRequest::default())
                    .await,
            ),
        ),
    ]
}

const READS: usize = 9;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_scopes_gate_every_rpc() {
    let probe = Probe::new();
    let s = start(vec![
        probe.handler("jobs", "jobs", ack),
        probe.handler("graves", "graves", dead),
    ])
    .await;
    let dead_id = s.bus.send("graves", b"rip".to_vec()).await.unwrap();
    s.bus.wait_idle(common::WAIT).await.unwrap();
    let dead_id = dead_id.as_str();

    for token in [None, Some("wrong-token")] {
        let mut c = s.client(token).await;
        for (rpc, code) in codes(&mut c, dead_id).await {
            assert_eq!(code, Code::Unauthenticated, "{rpc} with {token:?}");
        }
    }
    let mut read = s.client(Some(READ)).await;
    let got = codes(&mut read, dead_id).await;
    for (rpc, code) in &got[..READS] {
        assert_eq!(*code, Code::Ok, "{rpc} with the read token");
    }
    for (rpc, code) in &got[READS..] {
        assert_eq!(*code, Code::PermissionDenied, "{rpc} with the read token");
    }
    let denied = read
        .publish(pb::PublishRequest::default())
        .await
        .unwrap_err();
    assert!(denied.message().contains("admin"), "{}", denied.message());

    // The admin token passes the gate: whatever the admin RPCs answer, it is about their
    // (empty) requests, not the token.
    let mut admin = s.client(Some(ADMIN)).await;
    for (rpc, code) in codes(&mut admin, dead_id).await {
        assert!(
            !matches!(code, Code::Unauthenticated | Code::PermissionDenied),
            "{rpc} with the admin token: {code:?}"
        );
    }
    assert!(
        s.bus.is_accepting(),
        "the empty Shutdown request stopped nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_needs_no_token_and_turns_not_serving_when_shutdown_begins() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;

    let probe = Probe::new();
    let s = start(vec![probe.handler("jobs", "jobs", ack)]).await;
    let channel = tonic::transport::Endpoint::from_shared(s.addr.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", event_base_grpc::SERVICE_NAME] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
    }
    let mut watch = health
        .watch(HealthCheckRequest {
            service: event_base_grpc::SERVICE_NAME.into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.next().await.unwrap().unwrap();
    assert_eq!(first.status, ServingStatus::Serving as i32);

    s.bus
        .shutdown(event_base_core::ShutdownStrategy::Force)
        .await
        .unwrap();
    let next = tokio::time::timeout(common::WAIT, watch.next())
        .await
        .expect("health changes when the shutdown begins")
        .unwrap()
        .unwrap();
    assert_eq!(next.status, ServingStatus::NotServing as i32);
    let overall = health
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(overall.status, ServingStatus::NotServing as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_the_services_and_is_gated() {
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;

    let probe = Probe::new();
    let s = start(vec![probe.handler("jobs", "jobs", ack)]).await;
    let channel = tonic::transport::Endpoint::from_shared(s.addr.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let ask = |token: Option<&'static str>, request: MessageRequest| {
        let channel = channel.clone();
        async move {
            let token = event_base_grpc::client::BearerToken::new(token).unwrap();
            let mut client = ServerReflectionClient::with_interceptor(channel, token);
            let request = ServerReflectionRequest {
                host: String::new(),
                message_request: Some(request),
            };
            let mut answers = client
                .server_reflection_info(tokio_stream::iter([request]))
                .await?
                .into_inner();
            let answer = answers.next().await.expect("one answer")?;
            Ok::<_, tonic::Status>(answer.message_response)
        }
    };
    let listed = ask(Some(READ), MessageRequest::ListServices(String::new()))
        .await
        .unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = listed else {
        panic!("expected a service list, got {listed:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&event_base_grpc::SERVICE_NAME.to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"grpc.health.v1.Health".to_owned()),
        "{names:?}"
    );

    let file = ask(
        Some(READ),
        MessageRequest::FileContainingSymbol("event_base.admin.v1.AdminService".into()),
    )
    .await
    .unwrap();
    let Some(MessageResponse::FileDescriptorResponse(files)) = file else {
        panic!("expected a file descriptor, got {file:?}");
    };
    let decoded: prost_types::FileDescriptorProto =
        prost::Message::decode(files.file_descriptor_proto[0].as_slice()).unwrap();
    assert_eq!(decoded.package(), "event_base.admin.v1");

    let refused = ask(None, MessageRequest::ListServices(String::new()))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);

    // v1alpha too (what older tools speak).
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient as Alpha;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest as AlphaRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse as AlphaResponse;
    let token = event_base_grpc::client::BearerToken::new(Some(READ)).unwrap();
    let mut alpha = Alpha::with_interceptor(channel.clone(), token);
    let mut answers = alpha
        .server_reflection_info(tokio_stream::iter([
            tonic_reflection::pb::v1alpha::ServerReflectionRequest {
                host: String::new(),
                message_request: Some(AlphaRequest::ListServices(String::new())),
            },
        ]))
        .await
        .unwrap()
        .into_inner();
    let Some(AlphaResponse::ListServicesResponse(list)) =
        answers.next().await.unwrap().unwrap().message_response
    else {
        panic!("expected a service list");
    };
    assert!(list
        .service
        .iter()
        .any(|s| s.name == event_base_grpc::SERVICE_NAME));
}
