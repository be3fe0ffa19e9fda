//! TLS (feature `tls`): a server with a certificate made here, signed by a CA made here, on
//! loopback. A client that trusts the CA gets answers; one that trusts nothing, one that
//! trusts another CA and one that speaks plain text get none. `ebctl --tls-ca` (and
//! `EBCTL_TLS_CA`) likewise.

// A test's unwrap is its assertion (as in event_base_test); helpers here too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::{ack, bus_with, Probe, ADMIN, READ};
use event_base_grpc::client::{connect, ClientOptions};
use event_base_grpc::{pb, GrpcError, GrpcServer, ServeHandle, Tokens};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// A CA, and a server certificate it signed for `127.0.0.1` and `localhost`.
struct Pki {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn pki() -> Pki {
    let ca = ca("event_base test CA");
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    Pki {
        ca_pem: ca.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

/// A bus with one handler, served over TLS on a free loopback port; its `https://` address.
async fn serve_tls(pki: &Pki) -> (ServeHandle, String) {
    let probe = Probe::new();
    let (bus, feed) = bus_with(vec![probe.handler("orders", "orders", ack)]).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let handle = GrpcServer::builder(bus)
        .tls(&pki.cert_pem, &pki.key_pem)
        .tokens(Tokens::new().read(READ).admin(ADMIN))
        .watch_feed(feed)
        .serve_with_incoming(listener)
        .unwrap();
    let addr = format!("https://{}", handle.local_addr());
    (handle, addr)
}

/// An error and its causes, on one line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `GetStatus` with `options`, or the whole error.
async fn status(options: &ClientOptions) -> Result<pb::GetStatusResponse, String> {
    let mut client = connect(options).await.map_err(|e| chain(&e))?;
    client
        .get_status(pb::GetStatusRequest {})
        .await
        .map(tonic::Response::into_inner)
        .map_err(|e| chain(&e))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_trusts_the_ca_connects_and_others_do_not() {
    let pki = pki();
    let (server, addr) = serve_tls(&pki).await;

    let trusted = ClientOptions::new(addr.clone())
        .token(READ)
        .tls_ca(pki.ca_pem.clone());
    let answer = status(&trusted).await.unwrap();
    assert!(answer.accepting);
    assert_eq!(answer.topic_count, 1, "{answer:?}");

    // The token still matters over TLS.
    let untokened = ClientOptions::new(addr.clone()).tls_ca(pki.ca_pem.clone());
    let refused = status(&untokened).await.unwrap_err();
    assert!(refused.contains("token"), "{refused}");

    // No CA: nothing to trust the server's certificate with.
    let no_ca = ClientOptions::new(addr.clone()).token(READ);
    let err = status(&no_ca).await.unwrap_err();
    assert!(err.contains("UnknownIssuer"), "{err}");

    // Another CA's certificate does not vouch for this server.
    let other = ClientOptions::new(addr.clone())
        .token(READ)
        .tls_ca(ca("another CA").pem());
    let err = status(&other).await.unwrap_err();
    assert!(err.contains("UnknownIssuer"), "{err}");

    // Plain text to a TLS port gets no answer.
    let plain = ClientOptions::new(addr.replace("https://", "http://")).token(READ);
    let err = status(&plain).await.unwrap_err();
    assert!(err.contains("transport error"), "{err}");

    // The certificate is checked against the name: `localhost` is in it, `example.com` not.
    let wrong_name = trusted.clone().tls_domain("example.com");
    let err = status(&wrong_name).await.unwrap_err();
    assert!(err.contains("not valid for name"), "{err}");
    let right_name = trusted.clone().tls_domain("localhost");
    assert!(status(&right_name).await.is_ok());

    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_ca_for_a_plain_text_address_is_refused() {
    let options = ClientOptions::new("http://127.0.0.1:1").tls_ca(b"not used".to_vec());
    let err = connect(&options).await.unwrap_err();
    assert!(matches!(err, GrpcError::InvalidAddress { .. }), "{err}");
}

#[tokio::test]
async fn a_key_that_does_not_parse_fails_serve() {
    let pki = pki();
    let (bus, _feed) = bus_with(vec![]).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = GrpcServer::builder(bus)
        .tls(&pki.cert_pem, "not a key")
        .serve_with_incoming(listener)
        .unwrap_err();
    assert!(matches!(err, GrpcError::Tls(_)), "{err}");
}

/// Runs ebctl with `args` and the environment `env`, stdin closed.
async fn ebctl(env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_ebctl"));
    for var in [
        "EBCTL_ADDR",
        "EBCTL_TOKEN",
        "EBCTL_TLS_CA",
        "EBCTL_TLS_DOMAIN",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied())
        .stdin(std::process::Stdio::null());
    cmd.args(args).output().await.unwrap()
}

fn temp_file(name: &str, contents: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("event_base_tls_{}_{name}", std::process::id()));
    std::fs::write(&path, contents).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ebctl_over_tls() {
    let pki = pki();
    let (server, addr) = serve_tls(&pki).await;
    let ca_file = temp_file("ca.pem", &pki.ca_pem);
    let ca = ca_file.to_str().unwrap();

    // --tls-ca: the status comes back.
    let out = ebctl(
        &[("EBCTL_TOKEN", READ)],
        &["--addr", &addr, "--tls-ca", ca, "-o", "json", "status"],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["accepting"], true, "{status}");

    // EBCTL_TLS_CA, and an address without a scheme: https is implied.
    let bare = addr.trim_start_matches("https://");
    let out = ebctl(
        &[
            ("EBCTL_TOKEN", READ),
            ("EBCTL_TLS_CA", ca),
            ("EBCTL_ADDR", bare),
        ],
        &["topics"],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("orders"));

    // Without the CA the server is not trusted: cannot connect (69).
    let out = ebctl(&[("EBCTL_TOKEN", READ)], &["--addr", &addr, "status"]).await;
    assert_eq!(out.status.code(), Some(69));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("UnknownIssuer"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A CA file that is not there is bad local configuration (78).
    let out = ebctl(
        &[("EBCTL_TOKEN", READ)],
        &["--addr", &addr, "--tls-ca", "/nonexistent/ca.pem", "status"],
    )
    .await;
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/ca.pem"));

    std::fs::remove_file(&ca_file).unwrap();
    server.shutdown().await.unwrap();
}
