//! The dashboard's HTTP API, as a script (or the page) calls it: who may read and who may act,
//! the tables of the overview and its event stream, dead letters in pages (usable with 10,000
//! of them), shown, replayed with edits, deleted, replayed and purged in bulk; a worker
//! stopped; a subscription paused and resumed, with its lag; and a server without the
//! dashboard.
//!
//! The client is `common::http`, plain HTTP/1.1 over a `TcpStream`. What the browser makes of
//! it is `dashboard_browser.rs`.

// A test's unwrap is its assertion (as in event_base_test); helpers here too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::http::{get, post_json, request};
use common::{ack, bus_with, dead, Probe, ADMIN, READ, WAIT};
use event_base_core::backend::{WalRecord, WalRecordState};
use event_base_core::{DeadReason, EMessage, EventBus, HandlerSpec, WorkerStatus};
use event_base_grpc::{GrpcServer, ServeHandle, Tokens};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A bus served with the read and admin tokens (or none), the HTTP listener on a free port.
async fn served(
    specs: Vec<HandlerSpec>,
    tokens: Option<Tokens>,
) -> (EventBus, ServeHandle, SocketAddr) {
    let (bus, feed) = bus_with(specs).await;
    serve(bus, feed, tokens).await
}

async fn serve(
    bus: EventBus,
    feed: event_base_grpc::WatchFeed,
    tokens: Option<Tokens>,
) -> (EventBus, ServeHandle, SocketAddr) {
    let mut builder = GrpcServer::builder(bus.clone())
        .watch_feed(feed)
        .http_addr("127.0.0.1:0");
    if let Some(tokens) = tokens {
        builder = builder.tokens(tokens);
    }
    let handle = builder.serve("127.0.0.1:0").await.unwrap();
    let http = handle.http_addr().unwrap();
    (bus, handle, http)
}

fn tokens() -> Option<Tokens> {
    Some(Tokens::new().read(READ).admin(ADMIN))
}

fn bearer(token: &str) -> Option<String> {
    Some(format!("Bearer {token}"))
}

/// `GET path` with `token`, answered 200 with JSON.
async fn read(http: SocketAddr, path: &str, token: &str) -> Value {
    let answer = get(http, path, bearer(token).as_deref()).await;
    assert_eq!(answer.status, 200, "GET {path}: {answer:?}");
    answer.json()
}

/// `POST path` with the admin token, answered 200 with JSON.
async fn act(http: SocketAddr, path: &str, body: &str) -> Value {
    let answer = post_json(http, path, Some(ADMIN), body).await;
    assert_eq!(answer.status, 200, "POST {path} {body}: {answer:?}");
    answer.json()
}

/// The dead letters' ids, oldest first.
async fn dead_ids(bus: &EventBus) -> Vec<String> {
    let mut letters = bus.dead_letters().await.unwrap();
    letters.sort_by_key(|d| d.died_at);
    letters.into_iter().map(|d| d.message.id).collect()
}

/// `n` messages to `topic`, dead-lettered by its handler; waits until they all are.
async fn dead_letters(bus: &EventBus, probe: &Probe, topic: &str, n: usize) -> Vec<String> {
    let before = probe.count();
    for i in 0..n {
        bus.send(topic, format!("{topic} {i}")).await.unwrap();
    }
    probe.wait_for(before + n).await;
    bus.wait_idle(WAIT).await.unwrap();
    dead_ids(bus).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_needs_no_token_and_runs_only_its_own_script() {
    let (_bus, handle, http) = served(vec![], tokens()).await;
    let page = get(http, "/", None).await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    assert!(page.body.contains("<title>event_base dashboard</title>"));
    let policy = page.header("content-security-policy").unwrap();
    assert!(policy.contains("script-src 'sha256-"), "{policy}");
    assert!(policy.contains("connect-src 'self'"), "{policy}");
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    // Nothing from elsewhere: no CDN, no external script or style.
    assert!(
        !page.body.contains("src=\"http"),
        "only its own inline script"
    );
    assert!(!page.body.contains("href=\"http"), "no outside style sheet");
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whoami_says_each_tokens_scope() {
    let (_bus, handle, http) = served(vec![], tokens()).await;
    assert_eq!(read(http, "/api/whoami", READ).await["scope"], "read");
    let admin = read(http, "/api/whoami", ADMIN).await;
    assert_eq!(admin["scope"], "admin");
    assert_eq!(admin["open"], false);
    for authorization in [None, Some("Bearer nope"), Some(READ)] {
        let answer = get(http, "/api/whoami", authorization).await;
        assert_eq!(answer.status, 401, "{authorization:?}: {answer:?}");
        assert_eq!(
            answer.header("www-authenticate"),
            Some("Bearer realm=\"event_base\"")
        );
    }
    handle.shutdown().await.unwrap();

    // Without tokens (loopback only), everyone is admin, and the page says so.
    let (_bus, handle, http) = served(vec![], None).await;
    let answer = get(http, "/api/whoami", None).await;
    assert_eq!(answer.json()["scope"], "admin");
    assert_eq!(answer.json()["open"], true);
    let local = request(
        http,
        "GET",
        "/api/whoami",
        &[("Host", format!("localhost:{}", http.port()))],
        None,
    )
    .await;
    assert_eq!(local.status, 200, "{local:?}");
    // ... to requests for a loopback host only: a site whose name was made to resolve to
    // 127.0.0.1 (DNS rebinding) reads nothing, and acts on nothing.
    for (method, path) in [
        ("GET", "/api/whoami"),
        ("GET", "/metrics"),
        ("POST", "/api/dead-letters/purge"),
    ] {
        let rebound = request(
            http,
            method,
            path,
            &[
                ("Host", format!("evil.example:{}", http.port())),
                ("Content-Type", "application/json".into()),
            ],
            Some(r#"{"all": true}"#),
        )
        .await;
        assert_eq!(rebound.status, 403, "{method} {path}: {rebound:?}");
        assert!(rebound.body.contains("loopback"), "{}", rebound.body);
    }
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_takes_the_admin_token_json_and_the_pages_origin() {
    let probe = Probe::new();
    let (bus, handle, http) = served(vec![probe.handler("jobs", "jobs", dead)], tokens()).await;
    let ids = dead_letters(&bus, &probe, "jobs", 1).await;
    let path = format!("/api/dead-letter/{}/delete", ids[0]);

    let anonymous = post_json(http, &path, None, "{}").await;
    assert_eq!(anonymous.status, 401, "{anonymous:?}");
    let reader = post_json(http, &path, Some(READ), "{}").await;
    assert_eq!(reader.status, 403, "{reader:?}");
    assert!(reader.body.contains("admin token"), "{}", reader.body);
    // What a cross-site form can send: refused, even with the token.
    let form = request(
        http,
        "POST",
        &path,
        &[
            ("Authorization", format!("Bearer {ADMIN}")),
            ("Content-Type", "application/x-www-form-urlencoded".into()),
        ],
        Some("a=b"),
    )
    .await;
    assert_eq!(form.status, 415, "{form:?}");
    // From another origin (a page elsewhere, the browser says): refused.
    let elsewhere = request(
        http,
        "POST",
        &path,
        &[
            ("Authorization", format!("Bearer {ADMIN}")),
            ("Content-Type", "application/json".into()),
            ("Origin", "https://elsewhere.example".into()),
        ],
        Some("{}"),
    )
    .await;
    assert_eq!(elsewhere.status, 403, "{elsewhere:?}");
    assert_eq!(
        bus.dead_letters().await.unwrap().len(),
        1,
        "nothing done yet"
    );

    // From the page's own origin, with the admin token: done.
    let own = request(
        http,
        "POST",
        &path,
        &[
            ("Authorization", format!("Bearer {ADMIN}")),
            ("Content-Type", "application/json".into()),
            ("Origin", format!("http://{http}")),
        ],
        Some("{}"),
    )
    .await;
    assert_eq!(own.status, 200, "{own:?}");
    assert!(bus.dead_letters().await.unwrap().is_empty());
    // Again: it is gone.
    let again = post_json(http, &path, Some(ADMIN), "{}").await;
    assert_eq!(again.status, 404, "{again:?}");
    assert_eq!(again.json()["code"], "NOT_FOUND");
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_has_the_tables_the_page_draws() {
    let probe = Probe::new();
    let (bus, handle, http) = served(
        vec![
            probe.handler("orders", "orders", ack).workers(2),
            probe.handler("audit-orders", "orders", ack),
            probe.handler("payments", "payments", dead),
        ],
        tokens(),
    )
    .await;
    for i in 0..3 {
        bus.send("orders", format!("order {i}")).await.unwrap();
    }
    bus.send("payments", "payment").await.unwrap();
    probe.wait_for(3 * 2 + 1).await;
    bus.wait_idle(WAIT).await.unwrap();

    let o = read(http, "/api/overview", READ).await;
    assert_eq!(o["status"]["dead_letters"], 1);
    assert_eq!(o["status"]["accepting"], true);
    assert_eq!(o["wal"]["failed"], false);
    assert_eq!(o["wal"]["dead"], 1);

    let row = |table: &str, key: &str| -> Value {
        o["tables"][table]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == key)
            .unwrap_or_else(|| panic!("no row {key} in {table}: {}", o["tables"][table]))["cells"]
            .clone()
    };
    let keys = |table: &str| -> Vec<String> {
        o["tables"][table]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["key"].as_str().unwrap().to_owned())
            .collect()
    };
    // Topics: the bus's own (`_system.`) left off.
    assert_eq!(keys("topics"), ["orders", "payments"]);
    let orders = row("topics", "orders");
    assert_eq!(orders["sent"], 3);
    assert_eq!(orders["handled"], 6, "summed over both handlers");
    assert_eq!(orders["workers"], 3);
    assert_eq!(row("topics", "payments")["dead"], 1);
    // Subscriptions: one row per handler of a topic.
    assert_eq!(
        keys("subscriptions"),
        ["orders/audit-orders", "orders/orders", "payments/payments"]
    );
    assert_eq!(row("subscriptions", "orders/orders")["handled"], 3);
    assert_eq!(row("subscriptions", "orders/orders")["workers"], 2);
    // Workers, with their state, and a Stop button each (shown to admins only).
    assert_eq!(
        keys("workers"),
        ["audit-orders-0", "orders-0", "orders-1", "payments-0"]
    );
    let worker = &o["tables"]["workers"]["rows"][1];
    assert_eq!(worker["cells"]["topic"], "orders");
    assert!(["idle", "working"].contains(&worker["cells"]["status"].as_str().unwrap()));
    assert_eq!(worker["actions"][0]["post"], "api/workers/orders%2D0/stop");
    // Rates are the page's: a rate column names the counter it is worked out from.
    let columns = o["tables"]["topics"]["columns"].as_array().unwrap();
    let rate = columns.iter().find(|c| c["key"] == "sent_rate").unwrap();
    assert_eq!(rate["kind"], "rate");
    assert_eq!(rate["of"], "sent");
    handle.shutdown().await.unwrap();
}

/// Reads the event stream of `http` until `n` events have come; returns their names and data.
async fn events(
    http: SocketAddr,
    token: &str,
    n: usize,
) -> (tokio::net::TcpStream, Vec<(String, Value)>) {
    let mut stream = tokio::net::TcpStream::connect(http).await.unwrap();
    let head = format!(
        "GET /api/events HTTP/1.1\r\nHost: {http}\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut raw = String::new();
    let mut buf = [0u8; 8192];
    let parse = |raw: &str| -> Vec<(String, Value)> {
        // The chunked body's frames hold whole events here; the event lines are what count.
        let mut out = Vec::new();
        let mut name = String::new();
        for line in raw.lines() {
            if let Some(n) = line.strip_prefix("event: ") {
                name = n.to_owned();
            } else if let Some(data) = line.strip_prefix("data: ") {
                out.push((name.clone(), serde_json::from_str(data).unwrap()));
            }
        }
        out
    };
    tokio::time::timeout(WAIT, async {
        while parse(&raw).len() < n {
            let read = stream.read(&mut buf).await.unwrap();
            assert!(read > 0, "the stream ended: {raw}");
            raw.push_str(&String::from_utf8_lossy(&buf[..read]));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{n} events within {WAIT:?}; got: {raw}"));
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert!(
        raw.to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{raw}"
    );
    (stream, parse(&raw))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_sends_the_overview_every_second_and_ends_with_the_server() {
    let probe = Probe::new();
    let (bus, handle, http) = served(vec![probe.handler("orders", "orders", ack)], tokens()).await;
    let refused = get(http, "/api/events", None).await;
    assert_eq!(refused.status, 401);

    let (mut stream, first) = events(http, READ, 1).await;
    assert_eq!(first[0].0, "overview");
    assert_eq!(
        first[0].1["tables"]["topics"]["rows"][0]["cells"]["sent"],
        0
    );
    drop(stream);

    bus.send("orders", "one").await.unwrap();
    probe.wait_for(1).await;
    bus.wait_idle(WAIT).await.unwrap();
    let (s, two) = events(http, READ, 2).await;
    stream = s;
    let taken = |e: &(String, Value)| e.1["taken_at_ms"].as_u64().unwrap();
    let gap = taken(&two[1]) - taken(&two[0]);
    assert!(
        (900..=3000).contains(&gap),
        "about a second apart: {gap} ms"
    );
    assert_eq!(two[1].1["tables"]["topics"]["rows"][0]["cells"]["sent"], 1);

    // A stream open does not hold the server's shutdown up; the stream ends with it.
    tokio::time::timeout(WAIT, handle.shutdown())
        .await
        .expect("the server stops with a stream open")
        .unwrap();
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(WAIT, stream.read_to_end(&mut rest)).await;
    assert!(ended.is_ok(), "the stream ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_dead_letters_come_a_page_at_a_time() {
    const N: usize = 10_000;
    // Dead letters written straight into the WAL (as a restart would find them): 10,000
    // sends through a handler would test the handler, not the page.
    let wal = event_base_wal::MemoryWal::new();
    let start = SystemTime::now() - Duration::from_secs(3600);
    for i in 0..N {
        let topic = if i % 2 == 0 { "orders" } else { "payments" };
        let reason = if i % 10 == 0 {
            DeadReason::Timeout
        } else {
            DeadReason::Explicit
        };
        wal.restore(WalRecord {
            message: Arc::new(
                EMessage::standard(topic, format!("{{\"n\": {i}}}").into_bytes())
                    .with_id(format!("dead-{i:05}")),
            ),
            state: WalRecordState::Failed,
            updated_at: start + Duration::from_millis(i as u64),
            dead_reason: Some(reason),
            dead_handlers: vec![topic.to_owned()],
        });
    }
    let feed = event_base_grpc::WatchFeed::new(64);
    let probe = Probe::new();
    let mut builder = EventBus::builder()
        .wal(wal)
        .queue(event_base_queue::FlumeQueueFactory::default())
        .handler(probe.handler("orders", "orders", ack))
        .handler(probe.handler("payments", "payments", ack));
    for spec in feed.handlers() {
        builder = builder.handler(spec);
    }
    let bus = builder.build().await.unwrap();
    let (_bus, handle, http) = serve(bus, feed, tokens()).await;
    assert_eq!(
        read(http, "/api/overview", READ).await["status"]["dead_letters"],
        N
    );

    let answer = get(http, "/api/dead-letters", bearer(READ).as_deref()).await;
    assert_eq!(answer.status, 200);
    assert!(
        answer.body.len() < 64 * 1024,
        "one page, not the list: {} bytes",
        answer.body.len()
    );
    let first = answer.json();
    let page = first["dead_letters"].as_array().unwrap();
    assert_eq!(page.len(), 50, "the default page");
    assert_eq!(first["total"], N);
    assert_eq!(page[0]["id"], "dead-00000", "oldest first");
    assert_eq!(page[49]["id"], "dead-00049");
    let token = first["next_page_token"].as_str().unwrap();
    assert!(!token.is_empty());

    // The next page goes on where this one ended.
    let next = read(
        http,
        &format!("/api/dead-letters?page_token={token}&page_size=10"),
        READ,
    )
    .await;
    assert_eq!(next["dead_letters"][0]["id"], "dead-00050");
    assert_eq!(next["dead_letters"].as_array().unwrap().len(), 10);
    // Search: by id, by topic, by reason, by payload text.
    let one = read(http, "/api/dead-letters?id=dead-09999", READ).await;
    assert_eq!(one["total"], 1);
    assert_eq!(one["dead_letters"][0]["topic"], "payments");
    assert_eq!(one["dead_letters"][0]["preview"], "{\"n\": 9999}");
    let payments = read(http, "/api/dead-letters?topic=pay", READ).await;
    assert_eq!(payments["total"], N / 2);
    let timeouts = read(http, "/api/dead-letters?reason=timeout&topic=orders", READ).await;
    assert_eq!(timeouts["total"], N / 10);
    assert_eq!(timeouts["dead_letters"][1]["id"], "dead-00010");
    let text = read(http, "/api/dead-letters?text=%22n%22%3A%204242%7D", READ).await;
    assert_eq!(text["total"], 1);
    assert_eq!(text["dead_letters"][0]["id"], "dead-04242");
    // A reason that is none: a 400 saying which are.
    let bad = get(
        http,
        "/api/dead-letters?reason=sad",
        bearer(READ).as_deref(),
    )
    .await;
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"]
        .as_str()
        .unwrap()
        .contains("max_retries_exceeded"));
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_is_shown_whole_and_replayed_edited() {
    let probe = Probe::new();
    let (bus, handle, http) = served(
        vec![
            probe.handler("payments", "payments", dead),
            probe.handler("payments-fixed", "payments.fixed", ack),
        ],
        tokens(),
    )
    .await;
    let payload = "x".repeat(200);
    bus.send("payments", payload.clone()).await.unwrap();
    probe.wait_for(1).await;
    bus.wait_idle(WAIT).await.unwrap();
    let id = dead_ids(&bus).await.remove(0);

    // A list shows a preview; one dead letter comes whole.
    let list = read(http, "/api/dead-letters", READ).await;
    assert_eq!(list["dead_letters"][0]["payload_truncated"], true);
    let shown = read(http, &format!("/api/dead-letter/{id}"), READ).await;
    assert_eq!(shown["payload"], payload);
    assert_eq!(shown["payload_encoding"], "utf8");
    assert_eq!(shown["reason"], "explicit");
    let missing = get(http, "/api/dead-letter/nope", bearer(READ).as_deref()).await;
    assert_eq!(missing.status, 404);

    // Edited: another payload, to another topic; sent as a new message, then the dead letter
    // is gone.
    let replayed = act(
        http,
        &format!("/api/dead-letter/{id}/replay"),
        r#"{"payload": "{\"amount\": 12}", "topic": "payments.fixed"}"#,
    )
    .await;
    assert_eq!(replayed["edited"], true);
    assert_ne!(replayed["message_id"], id.as_str());
    probe.wait_for(2).await;
    assert_eq!(
        probe.payloads().last().unwrap(),
        &("payments.fixed".to_owned(), b"{\"amount\": 12}".to_vec())
    );
    assert!(bus.dead_letters().await.unwrap().is_empty());

    // An edit the server cannot take is a 400, and nothing is done.
    bus.send("payments", "again").await.unwrap();
    probe.wait_for(3).await;
    bus.wait_idle(WAIT).await.unwrap();
    let id = dead_ids(&bus).await.remove(0);
    let bad = post_json(
        http,
        &format!("/api/dead-letter/{id}/replay"),
        Some(ADMIN),
        r#"{"payload": "%%%", "payload_encoding": "base64"}"#,
    )
    .await;
    assert_eq!(bad.status, 400, "{bad:?}");
    let unknown = post_json(
        http,
        &format!("/api/dead-letter/{id}/replay"),
        Some(ADMIN),
        r#"{"colour": "red"}"#,
    )
    .await;
    assert_eq!(
        unknown.status, 422,
        "unknown fields are refused: {unknown:?}"
    );
    assert_eq!(dead_ids(&bus).await, [id]);
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_actions_count_first_and_need_a_search_or_all() {
    let probe = Probe::new();
    let (bus, handle, http) = served(
        vec![
            probe.handler("orders", "orders", dead),
            probe.handler("payments", "payments", dead),
        ],
        tokens(),
    )
    .await;
    dead_letters(&bus, &probe, "orders", 3).await;
    dead_letters(&bus, &probe, "payments", 2).await;

    // No search and no `all`: refused, as over gRPC.
    let unclear = post_json(http, "/api/dead-letters/purge", Some(ADMIN), "{}").await;
    assert_eq!(unclear.status, 400, "{unclear:?}");
    // A dry run counts.
    let count = act(
        http,
        "/api/dead-letters/purge",
        r#"{"filter": {"topic": "orders"}, "dry_run": true}"#,
    )
    .await;
    assert_eq!(count["purged"], 3);
    assert_eq!(count["dry_run"], true);
    assert_eq!(bus.dead_letters().await.unwrap().len(), 5);
    // Purge what the search matches.
    let purged = act(
        http,
        "/api/dead-letters/purge",
        r#"{"filter": {"topic": "orders"}}"#,
    )
    .await;
    assert_eq!(purged["purged"], 3);
    assert_eq!(bus.dead_letters().await.unwrap().len(), 2);
    // Replay everything: counted, then sent again (and dead again: the handler still fails).
    let would = act(
        http,
        "/api/dead-letters/replay",
        r#"{"all": true, "dry_run": true}"#,
    )
    .await;
    assert_eq!(would["matched"], 2);
    let replayed = act(http, "/api/dead-letters/replay", r#"{"all": true}"#).await;
    assert_eq!(replayed["replayed"], 2);
    assert_eq!(replayed["failed"], 0);
    probe.wait_for(3 + 2 + 2).await;
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_stops_a_worker() {
    let probe = Probe::new();
    let (bus, handle, http) = served(
        vec![probe.handler("orders", "orders", ack).workers(2)],
        tokens(),
    )
    .await;
    let refused = post_json(http, "/api/workers/orders-1/stop", Some(READ), "{}").await;
    assert_eq!(refused.status, 403);
    let stopped = act(http, "/api/workers/orders-1/stop", "{}").await;
    assert_eq!(stopped["workers"][0], "orders-1");
    let status = bus.registry().get("orders-1").map(|w| w.status);
    assert_eq!(status, Some(WorkerStatus::Stopped));
    let unknown = post_json(http, "/api/workers/nobody-0/stop", Some(ADMIN), "{}").await;
    assert_eq!(unknown.status, 404);
    handle.shutdown().await.unwrap();
}

/// The cells and actions of the subscriptions row `key` in the overview now.
async fn subscription_row(http: SocketAddr, key: &str) -> Value {
    let o = read(http, "/api/overview", READ).await;
    o["tables"]["subscriptions"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == key)
        .unwrap_or_else(|| panic!("no row {key}: {}", o["tables"]["subscriptions"]))
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_pauses_and_resumes_a_subscription_and_sees_its_lag() {
    let (mailer, crm) = (Probe::new(), Probe::new());
    let (bus, handle, http) = served(
        vec![
            mailer.handler("mailer", "signup", ack),
            crm.handler("crm", "signup", ack),
        ],
        tokens(),
    )
    .await;
    let pause = "/api/subscriptions/signup/mailer/pause";
    let resume = "/api/subscriptions/signup/mailer/resume";

    // Running: its state and lag, and a Pause button that asks first.
    let row = subscription_row(http, "signup/mailer").await;
    assert_eq!(row["cells"]["state"], "running", "{row}");
    assert_eq!(row["cells"]["lag"], 0, "{row}");
    assert_eq!(row["actions"][0]["label"], "Pause", "{row}");
    assert_eq!(row["actions"][0]["post"], &pause[1..], "{row}");
    assert!(
        row["actions"][0]["confirm"]
            .as_str()
            .unwrap()
            .starts_with("Pause handler mailer of signup?"),
        "{row}"
    );
    let columns = read(http, "/api/overview", READ).await["tables"]["subscriptions"]["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["key"].as_str().unwrap().to_owned(),
                c["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect::<Vec<_>>();
    assert!(
        columns.contains(&("lag".to_owned(), "count".to_owned())),
        "{columns:?}"
    );
    assert!(
        columns.contains(&("state".to_owned(), "state".to_owned())),
        "{columns:?}"
    );

    // The admin pauses it: its messages wait, its sibling goes on.
    let paused = act(http, pause, "{}").await;
    assert_eq!(paused["paused"], true, "{paused}");
    assert_eq!(paused["already"], false, "{paused}");
    assert!(bus.is_paused("signup", "mailer").unwrap());
    for i in 0..2 {
        bus.send("signup", format!("user {i}")).await.unwrap();
    }
    crm.wait_for(2).await;
    assert_eq!(mailer.count(), 0);
    let row = subscription_row(http, "signup/mailer").await;
    assert_eq!(row["cells"]["state"], "paused", "{row}");
    assert_eq!(row["cells"]["lag"], 2, "{row}");
    assert_eq!(row["actions"][0]["label"], "Resume", "{row}");
    assert_eq!(row["actions"][0]["post"], &resume[1..], "{row}");
    assert_eq!(
        subscription_row(http, "signup/crm").await["cells"]["state"],
        "running"
    );

    // An unknown handler: 404, naming the topic's handlers.
    let unknown = post_json(
        http,
        "/api/subscriptions/signup/nobody/pause",
        Some(ADMIN),
        "{}",
    )
    .await;
    assert_eq!(unknown.status, 404, "{unknown:?}");
    assert_eq!(unknown.json()["code"], "NOT_FOUND");
    assert!(unknown.body.contains("mailer, crm"), "{}", unknown.body);

    // Resumed, it catches up.
    let resumed = act(http, resume, "{}").await;
    assert_eq!(
        (&resumed["paused"], &resumed["already"]),
        (&Value::Bool(false), &Value::Bool(false))
    );
    assert_eq!(resumed["waited"], 2, "{resumed}");
    mailer.wait_for(2).await;
    bus.wait_idle(WAIT).await.unwrap();
    let row = subscription_row(http, "signup/mailer").await;
    assert_eq!(
        (&row["cells"]["state"], &row["cells"]["lag"]),
        (&Value::from("running"), &Value::from(0))
    );
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_a_subscription_takes_the_admin_token_and_json() {
    let probe = Probe::new();
    let (bus, handle, http) = served(vec![probe.handler("mailer", "signup", ack)], tokens()).await;
    let pause = "/api/subscriptions/signup/mailer/pause";
    // A read token is refused, as is an action that is not JSON or comes from elsewhere.
    let refused = post_json(http, pause, Some(READ), "{}").await;
    assert_eq!(refused.status, 403, "{refused:?}");
    let anonymous = post_json(http, pause, None, "{}").await;
    assert_eq!(anonymous.status, 401, "{anonymous:?}");
    let form = request(
        http,
        "POST",
        pause,
        &[
            ("Authorization", format!("Bearer {ADMIN}")),
            ("Content-Type", "application/x-www-form-urlencoded".into()),
        ],
        Some("a=b"),
    )
    .await;
    assert_eq!(form.status, 415, "{form:?}");
    let elsewhere = request(
        http,
        "POST",
        pause,
        &[
            ("Authorization", format!("Bearer {ADMIN}")),
            ("Content-Type", "application/json".into()),
            ("Origin", "https://elsewhere.example".into()),
        ],
        Some("{}"),
    )
    .await;
    assert_eq!(elsewhere.status, 403, "{elsewhere:?}");
    assert!(
        !bus.is_paused("signup", "mailer").unwrap(),
        "nothing done by any of them"
    );
    // The admin token, JSON, no foreign origin: done.
    assert_eq!(act(http, pause, "{}").await["paused"], true);
    assert!(bus.is_paused("signup", "mailer").unwrap());
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_dashboard_only_metrics_is_served() {
    let (bus, feed) = bus_with(vec![]).await;
    let handle = GrpcServer::builder(bus)
        .watch_feed(feed)
        .tokens(Tokens::new().read(READ))
        .http_addr("127.0.0.1:0")
        .dashboard(false)
        .serve("127.0.0.1:0")
        .await
        .unwrap();
    let http = handle.http_addr().unwrap();
    for path in ["/", "/api/whoami", "/api/overview"] {
        assert_eq!(
            get(http, path, bearer(READ).as_deref()).await.status,
            404,
            "{path}"
        );
    }
    assert_eq!(
        get(http, "/metrics", bearer(READ).as_deref()).await.status,
        200
    );
    handle.shutdown().await.unwrap();
}
