//! Secure by default: a server without tokens listens on loopback only unless the builder says
//! `allow_unauthenticated()`; zero limits are refused.
//!
//! No test here sends anything off loopback: the servers bind `0.0.0.0` (binding sends
//! nothing).

// A test's unwrap is its assertion (as in event_base_test); helpers here too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{ack, bus_with, Probe};
use event_base_grpc::client::{connect, ClientOptions};
use event_base_grpc::{GrpcError, GrpcServer, Tokens};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tokens_only_loopback_unless_allowed() {
    let probe = Probe::new();
    let (bus, _) = bus_with(vec![probe.handler("jobs", "jobs", ack)]).await;

    let refused = GrpcServer::builder(bus.clone())
        .serve("0.0.0.0:0")
        .await
        .unwrap_err();
    assert!(
        matches!(refused, GrpcError::OpenOffLoopback { .. }),
        "{refused:?}"
    );
    let text = refused.to_string();
    assert!(
        text.contains("add a token") && text.contains("allow_unauthenticated()"),
        "the message says what to do: {text}"
    );

    // The same through a listener bound by the caller.
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let refused = GrpcServer::builder(bus.clone())
        .serve_with_incoming(listener)
        .unwrap_err();
    assert!(matches!(refused, GrpcError::OpenOffLoopback { .. }));

    // Said explicitly, it serves.
    let open = GrpcServer::builder(bus.clone())
        .allow_unauthenticated()
        .serve("0.0.0.0:0")
        .await
        .unwrap();
    assert!(open.local_addr().ip().is_unspecified());
    open.shutdown().await.unwrap();

    // With a token, any address is fine.
    let gated = GrpcServer::builder(bus.clone())
        .tokens(Tokens::new().admin("s3cret"))
        .serve("0.0.0.0:0")
        .await
        .unwrap();
    gated.shutdown().await.unwrap();

    // Loopback without tokens stays as it was.
    let local = GrpcServer::builder(bus.clone())
        .serve("127.0.0.1:0")
        .await
        .unwrap();
    let mut c = connect(&ClientOptions::new(format!(
        "http://{}",
        local.local_addr()
    )))
    .await
    .unwrap();
    c.get_status(event_base_grpc::pb::GetStatusRequest {})
        .await
        .unwrap();
    local.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_limits_are_refused() {
    let probe = Probe::new();
    let (bus, _) = bus_with(vec![probe.handler("jobs", "jobs", ack)]).await;
    let builders = [
        GrpcServer::builder(bus.clone()).concurrency_limit_per_connection(0),
        GrpcServer::builder(bus.clone()).request_timeout(Duration::ZERO),
        GrpcServer::builder(bus.clone()).max_decoding_message_size(0),
        GrpcServer::builder(bus.clone()).max_encoding_message_size(0),
    ];
    for builder in builders {
        let refused = builder.serve("127.0.0.1:0").await.unwrap_err();
        assert!(
            matches!(refused, GrpcError::InvalidLimit { .. }),
            "{refused:?}"
        );
    }
}
