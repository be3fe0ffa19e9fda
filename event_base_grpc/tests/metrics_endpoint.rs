//! `GET /metrics` on the server's HTTP address: the bus's counters in the Prometheus text
//! format (with each subscription's lag and pause state), gated by the same tokens as gRPC,
//! and accepted by `promtool check metrics`; the observability guide's alert rules, accepted
//! by `promtool check rules`.
//!
//! The client is a plain HTTP/1.1 GET over a `TcpStream` (`common::http`): what Prometheus (or
//! `curl`) sends, with nothing in between.

// A test's unwrap is its assertion (as in event_base_test); helpers here too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::process::Stdio;

use common::http::get;
use common::{ack, dead, Probe, ADMIN, READ, WAIT};
use event_base_core::{Ack, EMessage, EventBus};
use event_base_grpc::{GrpcError, GrpcServer, ServeHandle, Tokens};
use tokio::io::AsyncWriteExt;

const BUS: &str = "scraped";

fn retry_once(m: &EMessage) -> Ack {
    if m.attempts == 1 {
        Ack::retry()
    } else {
        Ack::Ack
    }
}

/// A bus named [`BUS`] that has handled 3 orders (acked), 2 payments (dead-lettered) and one
/// flaky message (retried once, then acked); served with tokens when `tokens` is set.
async fn served(tokens: Option<Tokens>) -> (EventBus, ServeHandle, SocketAddr) {
    let probe = Probe::new();
    let bus = EventBus::builder()
        .wal(event_base_wal::MemoryWal::new())
        .queue(event_base_queue::FlumeQueueFactory::default())
        .name(BUS)
        .handler(probe.handler("orders", "orders", ack).workers(2))
        .handler(probe.handler("payments", "payments", dead))
        .handler(probe.handler("flaky", "flaky", retry_once))
        .build()
        .await
        .unwrap();
    for i in 0..3 {
        bus.send("orders", format!("order {i}")).await.unwrap();
    }
    for i in 0..2 {
        bus.send("payments", format!("payment {i}")).await.unwrap();
    }
    bus.send("flaky", "once more").await.unwrap();
    probe.wait_for(3 + 2 + 2).await;
    bus.wait_idle(WAIT).await.unwrap();

    let mut builder = GrpcServer::builder(bus.clone()).http_addr("127.0.0.1:0");
    if let Some(tokens) = tokens {
        builder = builder.tokens(tokens);
    }
    let handle = builder.serve("127.0.0.1:0").await.unwrap();
    let http = handle.http_addr().expect("an HTTP listener was asked for");
    (bus, handle, http)
}

/// The sample of `name` with exactly `labels` (as written between the braces).
fn sample(body: &str, name: &str, labels: &str) -> Option<String> {
    let prefix = format!("{name}{{{labels}}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(str::to_owned)
}

/// The names and types of the guide's table of exported metrics.
fn documented_names() -> Vec<(String, String)> {
    // Read at run time, not included: the package's tests still compile outside the repository.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../event_base/guide/observability.md"
    );
    let guide = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let table = guide
        .split("<!-- exported-metrics -->")
        .nth(1)
        .expect("the guide marks its table");
    table
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            Some((name.to_owned(), (*cells.get(2)?).to_owned()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_shows_the_counters_of_the_bus() {
    let (bus, handle, http) = served(Some(Tokens::new().read(READ).admin(ADMIN))).await;
    let answer = get(http, "/metrics", Some(&format!("Bearer {READ}"))).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(
        answer.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let body = &answer.body;

    // Every documented name is there, with its type.
    let names = documented_names();
    assert!(names.len() >= 20, "the table was read: {names:?}");
    for (name, kind) in &names {
        assert!(
            body.contains(&format!("# TYPE {name} {kind}\n")),
            "`# TYPE {name} {kind}` missing from:\n{body}"
        );
    }

    let topic = |t: &str| format!("bus=\"{BUS}\",topic=\"{t}\"");
    let expect = [
        ("event_base_accepted_total", topic("orders"), "3"),
        ("event_base_acked_total", topic("orders"), "3"),
        ("event_base_handled_total", topic("orders"), "3"),
        ("event_base_in_flight", topic("orders"), "0"),
        ("event_base_dead_total", topic("payments"), "2"),
        ("event_base_acked_total", topic("payments"), "0"),
        ("event_base_handled_total", topic("flaky"), "2"),
        ("event_base_retried_total", topic("flaky"), "1"),
        ("event_base_acked_total", topic("flaky"), "1"),
        (
            "event_base_handler_dead_total",
            format!("bus=\"{BUS}\",handler=\"payments\""),
            "2",
        ),
        (
            "event_base_worker_retried_total",
            format!("bus=\"{BUS}\",worker=\"flaky-0\""),
            "1",
        ),
        ("event_base_wal_failed", format!("bus=\"{BUS}\""), "0"),
        ("event_base_wal_dead", format!("bus=\"{BUS}\""), "2"),
        ("event_base_node_in_flight", format!("bus=\"{BUS}\""), "0"),
        // One handler-time sample per delivery, one queue-wait sample per first delivery.
        ("event_base_handler_seconds_count", topic("orders"), "3"),
        ("event_base_handler_seconds_count", topic("flaky"), "2"),
        ("event_base_queue_wait_seconds_count", topic("flaky"), "1"),
        (
            "event_base_handler_seconds_bucket",
            format!("bus=\"{BUS}\",topic=\"flaky\",le=\"+Inf\""),
            "2",
        ),
        (
            "event_base_queue_wait_seconds_bucket",
            format!("bus=\"{BUS}\",topic=\"orders\",le=\"+Inf\""),
            "3",
        ),
    ];
    for (name, labels, value) in expect {
        assert_eq!(
            sample(body, name, &labels).as_deref(),
            Some(value),
            "{name}{{{labels}}} in:\n{body}"
        );
    }
    let snap = bus.metrics();
    let info = format!(
        "bus=\"{BUS}\",node=\"{}\",node_type=\"{}\"",
        snap.node_name,
        snap.node_type.as_str()
    );
    assert_eq!(
        sample(body, "event_base_node_info", &info).as_deref(),
        Some("1")
    );

    // Every bucket of a histogram holds at most what the next does, `+Inf` all of them.
    let buckets: Vec<u64> = body
        .lines()
        .filter(|l| {
            l.starts_with(&format!(
                "event_base_handler_seconds_bucket{{bus=\"{BUS}\",topic=\"orders\","
            ))
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(
        buckets.len(),
        event_base_grpc::prometheus::LATENCY_BUCKETS.len() + 1
    );
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    assert_eq!(buckets.last(), Some(&3));

    // A second scrape sees what happened since.
    bus.send("orders", "one more").await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    let again = get(http, "/metrics", Some(&format!("Bearer {READ}"))).await;
    assert_eq!(
        sample(&again.body, "event_base_acked_total", &topic("orders")).as_deref(),
        Some("4")
    );

    // /metrics, and the dashboard's paths: nothing else.
    let other = get(http, "/nothing-here", Some(&format!("Bearer {READ}"))).await;
    assert_eq!(other.status, 404);
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_subscriptions_lag_and_pause_are_scraped() {
    let (mailer, crm) = (Probe::new(), Probe::new());
    let bus = EventBus::builder()
        .wal(event_base_wal::MemoryWal::new())
        .queue(event_base_queue::FlumeQueueFactory::default())
        .name(BUS)
        .handler(mailer.handler("mailer", "signup", ack))
        .handler(crm.handler("crm", "signup", ack))
        .build()
        .await
        .unwrap();
    bus.pause("signup", "mailer").unwrap();
    for i in 0..3 {
        bus.send("signup", format!("user {i}")).await.unwrap();
    }
    crm.wait_for(3).await;
    let handle = GrpcServer::builder(bus.clone())
        .tokens(Tokens::new().read(READ))
        .http_addr("127.0.0.1:0")
        .serve("127.0.0.1:0")
        .await
        .unwrap();
    let http = handle.http_addr().unwrap();
    let sub = |h: &str| format!("bus=\"{BUS}\",topic=\"signup\",handler=\"{h}\"");
    let scrape = || async {
        get(http, "/metrics", Some(&format!("Bearer {READ}")))
            .await
            .body
    };

    let body = scrape().await;
    assert!(
        body.contains("# TYPE event_base_subscription_lag gauge\n"),
        "{body}"
    );
    assert!(
        body.contains("# TYPE event_base_subscription_paused gauge\n"),
        "{body}"
    );
    let lag = |body: &str, h: &str| sample(body, "event_base_subscription_lag", &sub(h));
    let paused = |body: &str, h: &str| sample(body, "event_base_subscription_paused", &sub(h));
    assert_eq!(lag(&body, "mailer").as_deref(), Some("3"), "{body}");
    assert_eq!(paused(&body, "mailer").as_deref(), Some("1"), "{body}");
    assert_eq!(paused(&body, "crm").as_deref(), Some("0"), "{body}");
    // The sibling's lag: 0 once its last delivery is settled.
    common::lag_drains(&bus, "signup", "crm").await;
    assert_eq!(lag(&scrape().await, "crm").as_deref(), Some("0"));

    bus.resume("signup", "mailer").unwrap();
    mailer.wait_for(3).await;
    bus.wait_idle(WAIT).await.unwrap();
    let body = scrape().await;
    assert_eq!(lag(&body, "mailer").as_deref(), Some("0"), "{body}");
    assert_eq!(paused(&body, "mailer").as_deref(), Some("0"), "{body}");
    handle.shutdown().await.unwrap();
}

/// The alert rules of the observability guide (its `groups:` block), as written there.
fn documented_rules() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../event_base/guide/observability.md"
    );
    let guide = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let start = guide
        .find("```yaml\ngroups:")
        .expect("the guide has a rules file");
    let rules = &guide[start + "```yaml\n".len()..];
    rules[..rules.find("```").expect("the block ends")].to_owned()
}

#[tokio::test]
async fn promtool_accepts_the_guides_alert_rules() {
    let rules = documented_rules();
    for alert in [
        "EventBaseWalFailed",
        "EventBaseDeadLettersRising",
        "EventBaseLagGrowing",
    ] {
        assert!(
            rules.contains(&format!("alert: {alert}\n")),
            "{alert}: {rules}"
        );
    }
    assert!(rules.contains("event_base_subscription_lag"), "{rules}");
    let file = std::env::temp_dir().join(format!("event_base_rules_{}.yml", std::process::id()));
    std::fs::write(&file, &rules).unwrap();
    let out = tokio::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .await;
    let _ = std::fs::remove_file(&file);
    let out = match out {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "`promtool` is not installed: it comes with Debian's `prometheus` package \
             (`apt-get install -y prometheus`); this test needs it"
        ),
        Err(e) => panic!("could not start promtool: {e}"),
    };
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool check rules refused them: {said}\n{rules}"
    );
    assert!(said.contains("SUCCESS: 4 rules found"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tokens_a_scrape_needs_the_read_or_admin_token() {
    let (_bus, handle, http) = served(Some(Tokens::new().read(READ).admin(ADMIN))).await;

    let refused = [
        None,
        Some("Bearer wrong-token".to_owned()),
        Some(format!("Bearer {READ}x")),
        Some(format!("Basic {READ}")),
        Some(READ.to_owned()),
    ];
    for authorization in refused {
        let answer = get(http, "/metrics", authorization.as_deref()).await;
        assert_eq!(answer.status, 401, "{authorization:?}: {answer:?}");
        assert_eq!(
            answer.header("www-authenticate"),
            Some("Bearer realm=\"event_base\"")
        );
        assert!(
            !answer.body.contains("event_base_acked_total"),
            "no metrics without the token"
        );
        assert!(
            answer.body.contains("token"),
            "says what to send: {}",
            answer.body
        );
    }
    for token in [READ, ADMIN] {
        let answer = get(http, "/metrics", Some(&format!("Bearer {token}"))).await;
        assert_eq!(answer.status, 200, "{token}: {answer:?}");
        assert!(answer
            .body
            .contains("# TYPE event_base_acked_total counter"));
    }
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tokens_the_scrape_is_open_on_loopback_only() {
    let (bus, handle, http) = served(None).await;
    let answer = get(http, "/metrics", None).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.body.contains("# TYPE event_base_dead_total counter"));
    handle.shutdown().await.unwrap();

    // The HTTP address follows the gRPC rule: open off loopback only when told so.
    let refused = GrpcServer::builder(bus.clone())
        .http_addr("0.0.0.0:0")
        .serve("127.0.0.1:0")
        .await
        .unwrap_err();
    assert!(
        matches!(refused, GrpcError::OpenOffLoopback { .. }),
        "{refused:?}"
    );
    let allowed = GrpcServer::builder(bus)
        .http_addr("0.0.0.0:0")
        .allow_unauthenticated()
        .serve("127.0.0.1:0")
        .await
        .unwrap();
    assert!(allowed.http_addr().unwrap().ip().is_unspecified());
    allowed.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_accepts_the_output() {
    let (_bus, handle, http) = served(Some(Tokens::new().read(READ))).await;
    let answer = get(http, "/metrics", Some(&format!("Bearer {READ}"))).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    handle.shutdown().await.unwrap();

    let child = tokio::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "`promtool` is not installed: it comes with Debian's `prometheus` package \
             (`apt-get install -y prometheus`); this test needs it"
        ),
        Err(e) => panic!("could not start promtool: {e}"),
    };
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(answer.body.as_bytes()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("promtool ends")
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // `check metrics` exits non-zero on a parse error and on any lint problem.
    assert!(
        out.status.success(),
        "promtool check metrics refused the output: {said}\n{}",
        answer.body
    );
    assert!(
        said.trim().is_empty(),
        "promtool has nothing to say: {said}"
    );
}
