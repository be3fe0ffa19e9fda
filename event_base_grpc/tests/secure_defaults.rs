//! Secure by default: a server without tokens listens on loopback only unless the builder says
//! `allow_unauthenticated()`; zero limits are refused; a client refuses to send its token in
//! clear text to a host that is not loopback unless told `insecure`, before connecting.
//!
//! No test here sends anything off loopback: the servers bind `0.0.0.0` (binding sends
//! nothing), off-loopback client addresses are checked by `endpoint` (no I/O), and the only
//! ones handed to `connect` are `0.0.0.0`, which the kernel routes to this machine.

// A test's unwrap is its assertion (as in event_base_test); helpers here too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{ack, bus_with, Probe};
use event_base_grpc::client::{connect, endpoint, ClientOptions};
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

#[test]
fn a_token_is_not_sent_in_clear_text_off_loopback() {
    // `endpoint` does no I/O: the refusal comes before any connection.
    let refused = endpoint(&ClientOptions::new("http://192.0.2.1:1").token("s3cret")).unwrap_err();
    match &refused {
        GrpcError::TokenInClearText { host } => assert_eq!(host, "192.0.2.1"),
        other => panic!("expected TokenInClearText, got {other:?}"),
    }
    let text = refused.to_string();
    assert!(
        text.contains("192.0.2.1") && text.contains("--tls-ca") && text.contains("--insecure"),
        "the message names the host and the fix: {text}"
    );
    // A bare address means http:// too; IPv6 and names are checked the same way.
    for addr in [
        "192.0.2.1:1",
        "http://[2001:db8::1]:1",
        "http://example.com:1",
    ] {
        let refused = endpoint(&ClientOptions::new(addr).token("s3cret")).unwrap_err();
        assert!(
            matches!(refused, GrpcError::TokenInClearText { .. }),
            "{addr}: {refused:?}"
        );
    }

    // Allowed: told insecure, no token to leak, or a loopback host.
    endpoint(
        &ClientOptions::new("http://192.0.2.1:1")
            .token("s3cret")
            .insecure(true),
    )
    .unwrap();
    endpoint(&ClientOptions::new("http://192.0.2.1:1")).unwrap();
    for addr in [
        "http://127.0.0.1:1",
        "http://127.1.2.3:1",
        "http://[::1]:1",
        "http://localhost:1",
    ] {
        endpoint(&ClientOptions::new(addr).token("s3cret")).unwrap();
    }
}

#[tokio::test]
async fn connect_refuses_before_connecting() {
    // 0.0.0.0 is not a loopback address, but a connection to it stays on this machine, so
    // this test sends nothing off it even if the check were gone. Port 1 has no server: had
    // `connect` tried, the error would be `Connect`.
    let options = ClientOptions::new("http://0.0.0.0:1").token("s3cret");
    let refused = connect(&options).await.unwrap_err();
    assert!(
        matches!(refused, GrpcError::TokenInClearText { .. }),
        "{refused:?}"
    );
    let tried = connect(&options.insecure(true)).await.unwrap_err();
    assert!(matches!(tried, GrpcError::Connect { .. }), "{tried:?}");
}
