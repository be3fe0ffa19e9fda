//! `ebctl` end to end: the built binary against a real server on loopback, in table and JSON
//! form, with its exit codes (0, 1, 2, 3, 65, 69, 77), the environment variables, and `--yes`
//! off a terminal; pausing and resuming a handler, and its lag in `topics`, `status` and
//! `top`.

// A test's unwrap is its assertion (as in event_base_test); helpers here too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Output;

use common::{ack, dead, start, Probe, Served, ADMIN, READ};
use event_base_core::EMessage;
use serde_json::{json, Value};

/// Runs ebctl with `args` against `served` (with `token`), stdin closed.
async fn ebctl(served: Option<&Served>, token: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_ebctl"));
    cmd.env_remove("EBCTL_ADDR")
        .env_remove("EBCTL_TOKEN")
        .env_remove("EBCTL_TIMEOUT")
        .stdin(std::process::Stdio::null());
    if let Some(s) = served {
        cmd.env("EBCTL_ADDR", &s.addr);
    }
    if let Some(t) = token {
        cmd.env("EBCTL_TOKEN", t);
    }
    cmd.args(args).output().await.unwrap()
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> Value {
    assert_eq!(code(out), 0, "stderr: {}", stderr(out));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(out)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_commands_in_table_and_json() {
    let probe = Probe::new();
    let s = start(vec![
        probe.handler("orders", "orders", ack).workers(2),
        probe.handler("bad", "bad", dead),
    ])
    .await;
    let id = s.bus.send("orders", b"o".to_vec()).await.unwrap();
    s.bus.send("bad", b"broken".to_vec()).await.unwrap();
    s.bus.wait_idle(common::WAIT).await.unwrap();

    let status = json(&ebctl(Some(&s), Some(READ), &["-o", "json", "status"]).await);
    assert_eq!(status["node_name"], s.bus.node_name());
    assert_eq!(status["dead_letters"], 1);
    assert_eq!(status["accepting"], true);
    // Of the messages the WAL took, two are the test's; the rest are the bus's own.
    let own = status["system_messages_accepted"].as_u64().unwrap();
    assert!(own > 0, "{status}");
    assert_eq!(status["wal"]["appended"].as_u64().unwrap(), 2 + own);
    let table = ebctl(Some(&s), Some(READ), &["status"]).await;
    assert_eq!(code(&table), 0);
    assert!(
        stdout(&table).contains("dead letters  1"),
        "{}",
        stdout(&table)
    );
    assert!(
        stdout(&table).contains(&format!(
            "({own} of them the bus's own, on _system. topics)"
        )),
        "{}",
        stdout(&table)
    );

    let topics = json(&ebctl(Some(&s), Some(READ), &["-o", "json", "topics"]).await);
    let names: Vec<&str> = topics
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bad", "orders"]);
    assert_eq!(topics[1]["metrics"]["acked"], 1);
    let table = stdout(&ebctl(Some(&s), Some(READ), &["topics"]).await);
    assert!(table.starts_with("TOPIC"), "{table}");
    assert!(table.lines().any(|l| l.starts_with("orders")), "{table}");

    let workers = json(
        &ebctl(
            Some(&s),
            Some(READ),
            &["-o", "json", "workers", "--topic", "orders"],
        )
        .await,
    );
    assert_eq!(workers.as_array().unwrap().len(), 2);
    assert_eq!(workers[0]["status"], "idle");

    let metrics = json(
        &ebctl(
            Some(&s),
            Some(READ),
            &["-o", "json", "metrics", "--topic", "bad"],
        )
        .await,
    );
    assert_eq!(
        metrics["topics"]["bad"]["dead"],
        s.bus.metrics().topic("bad").unwrap().dead
    );
    let user = json(&ebctl(Some(&s), Some(READ), &["-o", "json", "metrics"]).await);
    let names: Vec<&String> = user["topics"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["bad", "orders"], "the user's topics only");
    let all = json(&ebctl(Some(&s), Some(READ), &["-o", "json", "metrics", "--system"]).await);
    assert!(all["topics"].get("_system.dead_letter").is_some(), "{all}");
    let wal = json(&ebctl(Some(&s), Some(READ), &["-o", "json", "wal"]).await);
    assert_eq!(wal["appended"], s.bus.wal_stats().appended);

    let list = json(&ebctl(Some(&s), Some(READ), &["-o", "json", "dlq", "list"]).await);
    assert_eq!(list["total_size"], 1);
    let dead_id = list["dead_letters"][0]["message"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(list["dead_letters"][0]["message"]["payload"], "broken");
    let table = stdout(&ebctl(Some(&s), Some(READ), &["dlq", "list", "--topic", "bad"]).await);
    assert!(table.contains("showing 1 of 1 matching"), "{table}");
    let shown = json(
        &ebctl(
            Some(&s),
            Some(READ),
            &["-o", "json", "dlq", "show", &dead_id],
        )
        .await,
    );
    assert_eq!(shown["reason"], "explicit");
    let missing = ebctl(Some(&s), Some(READ), &["dlq", "show", "nope"]).await;
    assert_eq!(code(&missing), 65, "NOT_FOUND: {}", stderr(&missing));
    assert!(stderr(&missing).contains("nope"));

    let trace = json(&ebctl(Some(&s), Some(READ), &["-o", "json", "trace", id.as_str()]).await);
    let events: Vec<&str> = trace
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["started", "acked"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_in_each_mode() {
    let probe = Probe::new();
    let s = start(vec![
        probe.handler("jobs", "jobs", ack).workers(2),
        probe.handler("bad", "bad", dead),
    ])
    .await;
    let sent = json(
        &ebctl(
            Some(&s),
            Some(ADMIN),
            &[
                "-o",
                "json",
                "publish",
                "jobs",
                "--data",
                "hello",
                "--broadcast",
            ],
        )
        .await,
    );
    assert!(sent["message_id"].as_str().is_some());
    s.bus.wait_idle(common::WAIT).await.unwrap();
    assert_eq!(probe.count(), 2, "broadcast to both workers");
    let table = ebctl(
        Some(&s),
        Some(ADMIN),
        &["publish", "jobs", "--data", "x", "--repeat", "3"],
    )
    .await;
    assert_eq!(code(&table), 0, "{}", stderr(&table));
    assert!(stdout(&table).starts_with("sent "));
    s.bus.wait_idle(common::WAIT).await.unwrap();
    assert_eq!(probe.count(), 5);
    let unknown = ebctl(Some(&s), Some(ADMIN), &["publish", "nobody", "--data", "x"]).await;
    assert_eq!(code(&unknown), 65, "FAILED_PRECONDITION");
    let usage = ebctl(Some(&s), Some(ADMIN), &["publish", "jobs"]).await;
    assert_eq!(code(&usage), 2, "no payload flag is a usage error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_and_purge_with_their_confirmations() {
    let probe = Probe::new();
    let s = start(vec![
        probe.handler("jobs", "jobs", ack),
        probe.handler("bad", "bad", dead),
    ])
    .await;
    for i in 0..3u8 {
        s.bus.send("bad", vec![b'0' + i]).await.unwrap();
    }
    s.bus.wait_idle(common::WAIT).await.unwrap();
    // Destructive without --yes, off a terminal: refused, nothing changed.
    let refused = ebctl(Some(&s), Some(ADMIN), &["dlq", "purge", "--topic", "bad"]).await;
    assert_eq!(code(&refused), 1);
    assert!(stderr(&refused).contains("--yes"), "{}", stderr(&refused));
    assert_eq!(s.bus.dead_letters().await.unwrap().len(), 3);
    let no_scope = ebctl(Some(&s), Some(ADMIN), &["dlq", "purge", "--yes"]).await;
    assert_eq!(code(&no_scope), 2, "a purge needs a filter or --all");
    let dry = json(
        &ebctl(
            Some(&s),
            Some(ADMIN),
            &["-o", "json", "dlq", "purge", "--all", "--dry-run"],
        )
        .await,
    );
    assert_eq!(
        (dry["purged"].as_u64(), dry["dry_run"].as_bool()),
        (Some(3), Some(true))
    );

    // Replay one by id (edited), then the rest in bulk.
    let first = s.bus.dead_letters().await.unwrap()[0].message.id.clone();
    let one = json(
        &ebctl(
            Some(&s),
            Some(ADMIN),
            &[
                "-o",
                "json",
                "dlq",
                "replay",
                &first,
                "--payload",
                "edited",
                "--to-topic",
                "jobs",
            ],
        )
        .await,
    );
    assert_eq!(one["edited"], true);
    s.bus.wait_idle(common::WAIT).await.unwrap();
    assert!(probe
        .payloads()
        .iter()
        .any(|(t, p)| t == "jobs" && p == b"edited"));
    let bulk = json(
        &ebctl(
            Some(&s),
            Some(ADMIN),
            &["-o", "json", "dlq", "replay", "--topic", "bad", "--yes"],
        )
        .await,
    );
    assert_eq!(
        (bulk["matched"].as_u64(), bulk["replayed"].as_u64()),
        (Some(2), Some(2))
    );
    s.bus.wait_idle(common::WAIT).await.unwrap();

    let purged = ebctl(
        Some(&s),
        Some(ADMIN),
        &["dlq", "purge", "--topic", "bad", "--yes"],
    )
    .await;
    assert_eq!(code(&purged), 0, "{}", stderr(&purged));
    assert_eq!(stdout(&purged).trim(), "purged 2 dead letters");
    assert!(s.bus.dead_letters().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partly_failed_bulk_replay_exits_3() {
    // A letter addressed to a worker that is then removed cannot be replayed.
    let probe = Probe::new();
    let s = start(vec![probe.handler("bad", "bad", dead).workers(2)]).await;
    s.bus
        .send(
            "bad",
            EMessage::standard("bad", b"a".to_vec()).with_to_worker("bad-1"),
        )
        .await
        .unwrap();
    s.bus.send("bad", b"b".to_vec()).await.unwrap();
    s.bus.wait_idle(common::WAIT).await.unwrap();
    s.bus.remove_worker("bad-1").await.unwrap();
    let out = ebctl(
        Some(&s),
        Some(ADMIN),
        &["-o", "json", "dlq", "replay", "--all", "--yes"],
    )
    .await;
    assert_eq!(
        code(&out),
        3,
        "stdout {} stderr {}",
        stdout(&out),
        stderr(&out)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (summary["replayed"].as_u64(), summary["failed"].as_u64()),
        (Some(1), Some(1))
    );
    assert!(stderr(&out).contains("bad-1"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_connection_and_shutdown_exit_codes() {
    let probe = Probe::new();
    let s = start(vec![probe.handler("jobs", "jobs", ack)]).await;
    let none = ebctl(Some(&s), None, &["status"]).await;
    assert_eq!(code(&none), 77, "{}", stderr(&none));
    assert!(stderr(&none).contains("token"));
    let wrong = ebctl(Some(&s), Some("wrong"), &["status"]).await;
    assert_eq!(code(&wrong), 77);
    let read_on_admin = ebctl(Some(&s), Some(READ), &["publish", "jobs", "--data", "x"]).await;
    assert_eq!(code(&read_on_admin), 77, "PERMISSION_DENIED");
    // Flags win over the environment.
    let flag = ebctl(Some(&s), Some("wrong"), &["--token", READ, "status"]).await;
    assert_eq!(code(&flag), 0, "{}", stderr(&flag));

    let dead_addr = ebctl(None, None, &["--addr", "http://127.0.0.1:1", "status"]).await;
    assert_eq!(code(&dead_addr), 69, "{}", stderr(&dead_addr));
    let bad_addr = ebctl(None, None, &["--addr", "http://bad addr", "status"]).await;
    assert_eq!(code(&bad_addr), 78, "{}", stderr(&bad_addr));

    let unconfirmed = ebctl(Some(&s), Some(ADMIN), &["shutdown", "drain"]).await;
    assert_eq!(code(&unconfirmed), 1);
    assert!(s.bus.is_accepting());
    let report = json(
        &ebctl(
            Some(&s),
            Some(ADMIN),
            &[
                "-o",
                "json",
                "shutdown",
                "drain",
                "--timeout",
                "5s",
                "--yes",
            ],
        )
        .await,
    );
    assert_eq!(report["strategy"], "drain");
    assert!(!s.bus.is_accepting());
    let after = ebctl(
        Some(&s),
        Some(ADMIN),
        &["publish", "jobs", "--data", "late"],
    )
    .await;
    assert_eq!(
        code(&after),
        69,
        "UNAVAILABLE after shutdown: {}",
        stderr(&after)
    );
}

/// A port that accepts TCP but never answers HTTP/2 (another program, a stuck proxy): ebctl
/// gives up within seconds, not at its 30 s call deadline, and names the address it tried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_that_never_speaks_http2_fails_within_seconds_naming_it() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    // Accepts every connection and holds it open, reading nothing, writing nothing.
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let started = std::time::Instant::now();
    let out = ebctl(None, None, &["--addr", &addr, "status"]).await;
    let took = started.elapsed();
    silent.abort();
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        took < std::time::Duration::from_secs(15),
        "took {took:?}: {}",
        stderr(&out)
    );
    assert!(stderr(&out).contains(&addr), "{}", stderr(&out));
}

#[tokio::test]
async fn a_token_in_clear_text_off_loopback_needs_insecure() {
    // 0.0.0.0 is not a loopback address, yet a connection to it stays on this machine: even
    // without the check nothing would leave it. Port 1 has no server.
    let args = ["--addr", "http://0.0.0.0:1", "--token", "s3cret", "status"];
    let refused = ebctl(None, None, &args).await;
    assert_eq!(code(&refused), 78, "{}", stderr(&refused));
    let text = stderr(&refused);
    assert!(
        text.contains("0.0.0.0") && text.contains("--tls-ca") && text.contains("--insecure"),
        "names the host and the fix: {text}"
    );
    // With --insecure it tries to connect (and finds nothing there).
    let tried = ebctl(None, None, &[&["--insecure"][..], &args].concat()).await;
    assert_eq!(code(&tried), 69, "{}", stderr(&tried));
}

#[tokio::test]
async fn completions_and_help() {
    let bash = ebctl(None, None, &["completions", "bash"]).await;
    assert_eq!(code(&bash), 0);
    assert!(stdout(&bash).contains("ebctl"));
    let help = ebctl(None, None, &["--help"]).await;
    assert!(stdout(&help).contains("Exit codes:"));
    assert!(stdout(&help).contains("77"));
}

/// A running ebctl whose output is read line by line (for the commands that follow).
struct Follower {
    child: tokio::process::Child,
    stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    stderr: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>,
}

impl Follower {
    fn spawn(served: &Served, args: &[&str]) -> Follower {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_ebctl"))
            .env_remove("EBCTL_TIMEOUT")
            .env("EBCTL_ADDR", &served.addr)
            .env("EBCTL_TOKEN", READ)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        Follower {
            child,
            stdout,
            stderr,
        }
    }

    async fn line(&mut self) -> String {
        tokio::time::timeout(common::WAIT, self.stdout.next_line())
            .await
            .expect("a line in time")
            .unwrap()
            .expect("ebctl still running")
    }

    async fn json_line(&mut self) -> Value {
        let line = self.line().await;
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Waits for the "watching" diagnostic: the server has subscribed it.
    async fn subscribed(&mut self) {
        let line = tokio::time::timeout(common::WAIT, self.stderr.next_line())
            .await
            .expect("a diagnostic in time")
            .unwrap()
            .expect("ebctl still running");
        assert!(line.contains("watching"), "{line}");
    }

    async fn stop(mut self) {
        self.child.kill().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_tail_and_watch_follow_events() {
    let probe = Probe::new();
    let s = start(vec![
        probe.handler("bad", "bad", dead),
        probe.handler("worse", "worse", dead),
        probe.handler("jobs", "jobs", ack),
    ])
    .await;

    let mut tail = Follower::spawn(&s, &["-o", "jsonl", "dlq", "tail", "--topic", "bad"]);
    tail.subscribed().await;
    s.bus.send("worse", b"not followed".to_vec()).await.unwrap();
    let id = s.bus.send("bad", b"followed".to_vec()).await.unwrap();
    let event = tail.json_line().await;
    assert_eq!(event["kind"], "dead_letter", "{event}");
    assert_eq!(
        event["dead_letter"]["message"]["id"],
        id.to_string(),
        "{event}"
    );
    tail.stop().await;

    // Table form, then stop after --count.
    let mut watch = Follower::spawn(
        &s,
        &[
            "watch",
            "--kind",
            "lifecycle",
            "--topic",
            "jobs",
            "--count",
            "1",
        ],
    );
    watch.subscribed().await;
    s.bus
        .shutdown(event_base_core::ShutdownStrategy::Force)
        .await
        .unwrap();
    let line = watch.line().await;
    assert!(
        line.contains("lifecycle") && line.contains("shutdown_started"),
        "{line}"
    );
    let status = tokio::time::timeout(common::WAIT, watch.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0), "--count 1 ends it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_watch_prints_again_until_stopped() {
    let probe = Probe::new();
    let s = start(vec![probe.handler("jobs", "jobs", ack)]).await;
    let mut metrics = Follower::spawn(
        &s,
        &[
            "-o", "jsonl", "metrics", "--topic", "jobs", "--watch", "100ms",
        ],
    );
    let first = metrics.json_line().await;
    assert_eq!(first["topics"]["jobs"]["acked"], 0, "{first}");
    for i in 0..3u8 {
        s.bus.send("jobs", vec![i]).await.unwrap();
    }
    s.bus.wait_idle(common::WAIT).await.unwrap();
    // Printed again and again: a later one has the three acks, as the core counts them.
    loop {
        let again = metrics.json_line().await;
        if again["topics"]["jobs"]["acked"] == 3 {
            assert_eq!(
                again["topics"]["jobs"]["sent"],
                s.bus.metrics().topics["jobs"].sent
            );
            break;
        }
    }
    metrics.stop().await;

    // Watch's own metrics events, in JSON lines.
    let mut watch = Follower::spawn(
        &s,
        &[
            "-o",
            "jsonl",
            "watch",
            "--kind",
            "metrics",
            "--metrics-interval",
            "100ms",
            "--count",
            "2",
        ],
    );
    for _ in 0..2 {
        let event = watch.json_line().await;
        assert_eq!(event["kind"], "metrics", "{event}");
        assert_eq!(event["topics"]["jobs"]["acked"], 3, "{event}");
        assert!(
            event["topics"].get("_system.dead_letter").is_none(),
            "{event}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_add_and_remove() {
    let probe = Probe::new();
    let s = start(vec![probe.handler("jobs", "jobs", ack)]).await;
    let added = json(
        &ebctl(
            Some(&s),
            Some(ADMIN),
            &["-o", "json", "workers", "add", "jobs", "2"],
        )
        .await,
    );
    let names: Vec<String> = s.bus.workers("jobs");
    assert_eq!(names.len(), 3, "{names:?}");
    let listed: Vec<&str> = added["names"]
        .as_array()
        .unwrap_or_else(|| panic!("{added}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(listed.len(), 2, "{added}");
    assert!(listed.iter().all(|n| names.iter().any(|m| m == n)));

    let removed = ebctl(Some(&s), Some(ADMIN), &["workers", "remove", listed[0]]).await;
    assert_eq!(code(&removed), 0, "{}", stderr(&removed));
    let state = s.bus.registry().get(listed[0]).unwrap().status;
    assert_eq!(state, event_base_core::WorkerStatus::Stopped);

    let unknown = ebctl(Some(&s), Some(ADMIN), &["workers", "remove", "ghost-0"]).await;
    assert_eq!(code(&unknown), 65, "{}", stderr(&unknown));
    let unknown_handler = ebctl(Some(&s), Some(ADMIN), &["workers", "add", "ghost", "1"]).await;
    assert_eq!(code(&unknown_handler), 65, "{}", stderr(&unknown_handler));
}

/// The `jobs` row of one `top -o json` refresh.
fn top_row(refresh: &Value, topic: &str) -> Value {
    refresh["topics"]
        .as_array()
        .unwrap_or_else(|| panic!("{refresh}"))
        .iter()
        .find(|t| t["topic"] == topic)
        .unwrap_or_else(|| panic!("no {topic} in {refresh}"))
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_shows_rates_between_samples_and_ends_on_ctrl_c() {
    let probe = Probe::new();
    let s = start(vec![probe.handler("jobs", "jobs", ack)]).await;
    let mut top = Follower::spawn(&s, &["-o", "json", "top", "--interval", "200ms"]);

    // The first refresh has nothing to compare with: counters, no rates.
    let first = top.json_line().await;
    assert_eq!(first["refresh"], 1, "{first}");
    assert!(first["elapsed_ms"].is_null(), "{first}");
    let jobs = top_row(&first, "jobs");
    assert!(jobs["handled_per_s"].is_null(), "{first}");
    assert_eq!(jobs["handled"], 0, "{first}");
    assert!(
        first["topics"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| !t["topic"].as_str().unwrap().starts_with("_system.")),
        "system topics hidden without --system: {first}"
    );

    // Sent after the first sample: later refreshes count them, each rate being the
    // difference of its counter over the time measured between the two samples.
    const SENT: u64 = 4;
    for i in 0..SENT {
        s.bus.send("jobs", vec![i as u8]).await.unwrap();
    }
    s.bus.wait_idle(common::WAIT).await.unwrap();
    let mut before = jobs;
    let mut positive = false;
    while before["acked"] != SENT {
        let refresh = top.json_line().await;
        let elapsed = refresh["elapsed_ms"].as_f64().unwrap() / 1000.0;
        assert!(elapsed > 0.0, "{refresh}");
        let now = top_row(&refresh, "jobs");
        for counter in ["accepted", "handled", "acked"] {
            let delta = now[counter].as_u64().unwrap() - before[counter].as_u64().unwrap();
            let rate = now[&format!("{counter}_per_s")].as_f64().unwrap();
            assert!(
                (rate * elapsed - delta as f64).abs() < 1e-6,
                "{counter}: {rate}/s over {elapsed}s is not {delta}: {refresh}"
            );
        }
        positive |= now["handled_per_s"].as_f64().unwrap() > 0.0;
        before = now;
    }
    assert!(
        positive,
        "a refresh in which messages were handled has a handled rate"
    );
    assert_eq!(before["handled"], SENT);
    assert_eq!(before["in_flight"], 0);

    // Ctrl-C ends it cleanly.
    let pid = top.child.id().unwrap();
    let kill = tokio::process::Command::new("sh")
        .args(["-c", &format!("kill -INT {pid}")])
        .status()
        .await
        .unwrap();
    assert!(kill.success());
    let status = tokio::time::timeout(common::WAIT, top.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0), "Ctrl-C is a clean end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_off_a_terminal_prints_blocks_without_escapes() {
    let probe = Probe::new();
    let s = start(vec![
        probe.handler("jobs", "jobs", ack),
        probe.handler("bad", "bad", dead),
    ])
    .await;
    s.bus.send("jobs", b"j".to_vec()).await.unwrap();
    s.bus.wait_idle(common::WAIT).await.unwrap();

    let out = ebctl(
        Some(&s),
        Some(READ),
        &["top", "--count", "2", "--interval", "100ms"],
    )
    .await;
    assert_eq!(code(&out), 0, "--count 2 ends it: {}", stderr(&out));
    let text = stdout(&out);
    assert!(
        !text.contains('\x1b'),
        "no escape codes off a terminal: {text:?}"
    );
    let blocks: Vec<&str> = text.trim_end().split("\n\n").collect();
    assert_eq!(blocks.len(), 2, "one block per refresh: {text}");
    for (i, block) in blocks.iter().enumerate() {
        let lines: Vec<&str> = block.lines().collect();
        assert!(
            lines[1].starts_with("TOPIC  ACCEPTED/S  HANDLED/S"),
            "{block}"
        );
        let jobs: Vec<&str> = lines
            .iter()
            .find(|l| l.starts_with("jobs "))
            .unwrap_or_else(|| panic!("{block}"))
            .split_whitespace()
            .collect();
        // Nothing was sent between the samples: no rate on the first, 0.0 on the second.
        let rate = if i == 0 { "-" } else { "0.0" };
        assert_eq!(
            jobs,
            ["jobs", rate, rate, rate, rate, rate, "0", "0", "0", "-"],
            "{block}"
        );
        assert!(lines.iter().any(|l| l.starts_with("bad ")), "{block}");
        assert!(!block.contains("_system."), "{block}");
    }

    let system = ebctl(Some(&s), Some(READ), &["top", "--count", "1", "--system"]).await;
    assert_eq!(code(&system), 0, "{}", stderr(&system));
    assert!(
        stdout(&system).contains("\n_system."),
        "{}",
        stdout(&system)
    );

    let help = ebctl(None, None, &["--help"]).await;
    assert!(
        stdout(&help)
            .lines()
            .any(|l| l.trim_start().starts_with("top ")),
        "{}",
        stdout(&help)
    );
}

/// `top` on `signup` with `mailer` paused and 3 behind: the topic's largest lag, and its
/// paused handlers.
async fn top_shows_the_lag_and_the_paused_handler(s: &Served) {
    let top = json(&ebctl(Some(s), Some(READ), &["-o", "json", "top", "--count", "1"]).await);
    let row = top_row(&top, "signup");
    assert_eq!(row["lag"], 3, "{top}");
    assert_eq!(row["paused"], json!(["mailer"]), "{top}");
    assert_eq!(row["subscriptions"][1]["lag"], 3, "{top}");
    let table = stdout(&ebctl(Some(s), Some(READ), &["top", "--count", "1"]).await);
    let line: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("signup "))
        .unwrap_or_else(|| panic!("{table}"))
        .split_whitespace()
        .collect();
    assert_eq!(line[line.len() - 2..], ["3", "mailer"], "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_a_handler_and_see_its_lag() {
    let (mailer, crm) = (Probe::new(), Probe::new());
    let s = start(vec![
        mailer.handler("mailer", "signup", ack),
        crm.handler("crm", "signup", ack),
    ])
    .await;

    let paused = json(
        &ebctl(
            Some(&s),
            Some(ADMIN),
            &["-o", "json", "pause", "signup", "mailer"],
        )
        .await,
    );
    assert_eq!(paused["paused"], true, "{paused}");
    assert_eq!(paused["already"], false, "{paused}");
    assert!(s.bus.is_paused("signup", "mailer").unwrap());
    let again = ebctl(Some(&s), Some(ADMIN), &["pause", "signup", "mailer"]).await;
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    assert!(
        stdout(&again).contains("mailer on signup was paused already"),
        "{}",
        stdout(&again)
    );

    for i in 0..3u8 {
        s.bus.send("signup", vec![i]).await.unwrap();
    }
    crm.wait_for(3).await;
    common::lag_drains(&s.bus, "signup", "crm").await;
    assert_eq!(mailer.count(), 0, "a paused handler starts nothing");

    // `topics`: each subscription with its state and lag, after the topics.
    let topics = json(&ebctl(Some(&s), Some(READ), &["-o", "json", "topics"]).await);
    let subs = &topics[0]["subscriptions"];
    assert_eq!(subs[0]["handler"], "crm", "{topics}");
    assert_eq!(
        (&subs[0]["lag"], &subs[0]["paused"]),
        (&json!(0), &json!(false))
    );
    assert_eq!(subs[1]["handler"], "mailer", "{topics}");
    assert_eq!(
        (&subs[1]["lag"], &subs[1]["paused"]),
        (&json!(3), &json!(true))
    );
    let table = stdout(&ebctl(Some(&s), Some(READ), &["topics"]).await);
    let mailer_line: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("signup") && l.contains("mailer"))
        .unwrap_or_else(|| panic!("{table}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        mailer_line,
        ["signup", "mailer", "paused", "3", "3"],
        "{table}"
    );
    assert!(
        table.contains("TOPIC   HANDLER  STATE    LAG  QUEUED"),
        "{table}"
    );

    // `status`: how many are paused, and the largest lag.
    let status = json(&ebctl(Some(&s), Some(READ), &["-o", "json", "status"]).await);
    assert_eq!(
        (&status["paused_subscriptions"], &status["max_lag"]),
        (&json!(1), &json!(3))
    );

    top_shows_the_lag_and_the_paused_handler(&s).await;

    // A read token may not; an unknown handler is the server refusing (65), naming the
    // topic's handlers and the command that lists them.
    let denied = ebctl(Some(&s), Some(READ), &["resume", "signup", "mailer"]).await;
    assert_eq!(code(&denied), 77, "{}", stderr(&denied));
    let unknown = ebctl(Some(&s), Some(ADMIN), &["pause", "signup", "nobody"]).await;
    assert_eq!(code(&unknown), 65, "{}", stderr(&unknown));
    assert!(
        stderr(&unknown).contains("[mailer, crm]") && stderr(&unknown).contains("`ebctl topics`"),
        "{}",
        stderr(&unknown)
    );
    assert!(s.bus.is_paused("signup", "mailer").unwrap());

    // Resumed, it catches up.
    let resumed = ebctl(Some(&s), Some(ADMIN), &["resume", "signup", "mailer"]).await;
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    assert!(
        stdout(&resumed).starts_with("resumed mailer on signup; 3 messages had waited"),
        "{}",
        stdout(&resumed)
    );
    mailer.wait_for(3).await;
    s.bus.wait_idle(common::WAIT).await.unwrap();
    assert_eq!(s.bus.lag("signup", "mailer").unwrap(), 0);

    let help = stdout(&ebctl(None, None, &["--help"]).await);
    for command in ["pause ", "resume "] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(command)),
            "{help}"
        );
    }
}
