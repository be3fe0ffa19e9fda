//! `event_base::config`: a TOML file with `EB_…` variables over it builds a bus; a bad file
//! is an error naming the file, the key and what is allowed.

use std::path::{Path, PathBuf};

use event_base::config::{Config, ConfigExt, QueueKind, WalKind};
use event_base::{
    handler_fn, Ack, ConfigError, CoreError, EMessage, HandlerSpec, ShutdownStrategy,
};
use event_base_test::redis_server::RedisServer;
use event_base_test::WAIT;

/// A handler named `echo` on topic `echo` that acks.
fn echo() -> HandlerSpec {
    HandlerSpec::new(
        "echo",
        "echo",
        handler_fn(|_m: EMessage| async { Ack::Ack }),
    )
}

/// Writes `text` to `eb.toml` in `dir`.
fn write(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("eb.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The error of loading `text` with `env`, as its message.
fn load_error(text: &str, env: &[(&str, &str)]) -> (PathBuf, ConfigError) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), text);
    let err = Config::load_with_vars(&path, vars(env)).unwrap_err();
    (path, err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_file_builds_a_working_bus() {
    let dir = tempfile::tempdir().unwrap();
    let wal_dir = dir.path().join("wal");
    let path = write(
        dir.path(),
        &format!(
            r#"
[bus]
name = "orders-bus"
batch_size = 16
dedup_window = "30s"
audit_capacity = 100

[wal]
kind = "persistent"
dir = "{}"
sync_policy = "batch"
batch_max_records = 8
batch_max_delay = "1ms"
segment_bytes = 65536

[queue]
kind = "mpmc"
bound = 50

[handlers.echo]
workers = 3
retries = 2
timeout = "5s"
rate = "1000/s"

[admin]
grpc_addr = "127.0.0.1:0"
http_addr = "127.0.0.1:0"
dashboard = false
read_token = "r3ad"
admin_token = "s3cret"
"#,
            wal_dir.display()
        ),
    );
    let config = Config::load_with_vars(&path, vars(&[])).unwrap();
    assert_eq!(config.wal.kind, WalKind::Persistent);
    assert_eq!(config.queue.kind, QueueKind::Mpmc);
    assert_eq!(
        config.handlers["echo"].rate,
        Some(event_base::Rate::per_second(1000).unwrap())
    );
    assert_eq!(config.admin.grpc_addr.as_deref(), Some("127.0.0.1:0"));
    assert!(
        !format!("{config:?}").contains("s3cret"),
        "Debug shows a token"
    );

    let bus = event_base::builder()
        .handler(echo())
        .config(&config)
        .await
        .unwrap()
        .build()
        .await
        .unwrap();
    assert_eq!(bus.workers("echo").len(), 3, "the override's workers");
    assert_eq!(bus.metrics().bus, "orders-bus");
    for _ in 0..10 {
        bus.send("echo", b"x".to_vec()).await.unwrap();
    }
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(bus.metrics().topic("echo").unwrap().acked, 10);
    let stats = bus.wal_stats();
    assert!(stats.syncs > 0, "a batch policy syncs: {stats:?}");
    let segments = std::fs::read_dir(&wal_dir).unwrap().count();
    assert!(
        segments > 0,
        "the persistent WAL writes in {}",
        wal_dir.display()
    );

    // The admin section makes a server that serves with its tokens.
    let server = config.grpc_server(bus.clone()).unwrap();
    let handle = server
        .serve(config.admin.grpc_addr.as_deref().unwrap())
        .await
        .unwrap();
    let http = handle
        .http_addr()
        .expect("admin.http_addr serves HTTP beside gRPC");
    // `dashboard = false`: `/metrics` is served, the dashboard is not.
    assert_eq!(http_status(http, "/metrics", "r3ad").await, 200);
    assert_eq!(http_status(http, "/", "r3ad").await, 404);
    handle.shutdown().await.unwrap();
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}

/// The status code of `GET path` on `addr` with a bearer token, over plain HTTP/1.1.
async fn http_status(addr: std::net::SocketAddr, path: &str, token: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut answer))
        .await
        .expect("the HTTP answer in time")
        .unwrap();
    let text = String::from_utf8_lossy(&answer);
    text.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:.200}"))
}

/// Syncs a bus made from `path` with `env` makes for 20 sends one after another, and its
/// `echo` workers.
async fn syncs_and_workers(path: &Path, env: &[(&str, &str)]) -> (u64, usize) {
    let config = Config::load_with_vars(path, vars(env)).unwrap();
    let bus = EventBusOf::config(config).await;
    for _ in 0..20 {
        bus.send("echo", b"x".to_vec()).await.unwrap();
    }
    bus.wait_idle(WAIT).await.unwrap();
    let out = (bus.wal_stats().syncs, bus.workers("echo").len());
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
    out
}

struct EventBusOf;

impl EventBusOf {
    async fn config(config: Config) -> event_base::EventBus {
        event_base::EventBus::builder()
            .handler(echo())
            .config(config)
            .await
            .unwrap()
            .build()
            .await
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_variables_win_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[wal]\nkind = \"persistent\"\ndir = \"{}\"\nsync_policy = \"always\"\n\n[handlers.echo]\nworkers = 2\n",
        dir.path().join("file-wal").display()
    );
    let path = write(dir.path(), &text);

    let (always_syncs, workers) = syncs_and_workers(&path, &[]).await;
    assert_eq!(workers, 2, "the file's workers");
    assert!(
        always_syncs >= 20,
        "sync_policy = always syncs each send: {always_syncs}"
    );

    let env_dir = dir.path().join("env-wal");
    let env_dir = env_dir.to_str().unwrap();
    let (never_syncs, workers) = syncs_and_workers(
        &path,
        &[
            ("EB_WAL__SYNC_POLICY", "never"),
            ("EB_WAL__DIR", env_dir),
            ("EB_HANDLERS__ECHO__WORKERS", "4"),
            ("EB_GRPC_ADDR", "not read: no double underscore"),
        ],
    )
    .await;
    assert_eq!(workers, 4, "EB_HANDLERS__ECHO__WORKERS wins");
    assert!(
        never_syncs < 5,
        "EB_WAL__SYNC_POLICY=never wins: {never_syncs} syncs"
    );
    assert!(Path::new(env_dir).exists(), "EB_WAL__DIR wins");
}

#[test]
fn an_unknown_key_is_an_error_naming_it() {
    let (path, err) = load_error("[wal]\nkind = \"memory\"\ndri = \"/tmp/x\"\n", &[]);
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("{}: wal.dri: ", path.display())),
        "{msg}"
    );
    assert!(
        msg.contains("unknown field `dri`") && msg.contains("`dir`"),
        "{msg}"
    );

    let (_, err) = load_error("[wall]\nkind = \"memory\"\n", &[]);
    let msg = err.to_string();
    assert!(
        msg.contains(": wall: unknown field `wall`") && msg.contains("`wal`"),
        "{msg}"
    );

    let (_, err) = load_error("", &[("EB_WAL__DRI", "/tmp/x")]);
    let msg = err.to_string();
    assert!(
        msg.starts_with("EB_WAL__DRI: wal.dri: unknown key"),
        "{msg}"
    );
    assert!(msg.contains("dir"), "{msg}");

    let (_, err) = load_error("", &[("EB_WALL__DIR", "/tmp/x")]);
    assert!(
        err.to_string()
            .starts_with("EB_WALL__DIR: wall: unknown section"),
        "{err}"
    );
}

#[test]
fn a_bad_value_names_the_key_and_what_is_allowed() {
    let (path, err) = load_error("[wal]\nsync_policy = \"sometimes\"\n", &[]);
    assert!(matches!(err, ConfigError::Invalid { ref key, .. } if key == "wal.sync_policy"));
    assert_eq!(
        err.to_string(),
        format!(
            "{}: wal.sync_policy: unknown variant `sometimes`, expected one of `always`, `batch`, `never`",
            path.display()
        )
    );

    let (_, err) = load_error("[handlers.echo]\ntimeout = \"soon\"\n", &[]);
    let msg = err.to_string();
    assert!(
        msg.contains(": handlers.echo.timeout: \"soon\" is not a duration")
            && msg.contains("\"30s\""),
        "{msg}"
    );

    let (_, err) = load_error("[handlers.echo]\nrate = \"fast\"\n", &[]);
    let msg = err.to_string();
    assert!(
        msg.contains(": handlers.echo.rate: invalid `rate` (fast)") && msg.contains("\"100/s\""),
        "{msg}"
    );

    let (_, err) = load_error("[queue]\nbound = \"lots\"\n", &[]);
    assert!(
        err.to_string()
            .contains(": queue.bound: invalid type: string \"lots\""),
        "{err}"
    );

    let (_, err) = load_error("", &[("EB_QUEUE__BOUND", "lots")]);
    assert_eq!(
        err.to_string(),
        "EB_QUEUE__BOUND: queue.bound: \"lots\" is not a whole number"
    );

    // A value from a variable is named by the variable, even when serde finds it wrong.
    let (_, err) = load_error(
        "[wal]\nsync_policy = \"always\"\n",
        &[("EB_WAL__SYNC_POLICY", "sometimes")],
    );
    assert!(
        err.to_string()
            .starts_with("EB_WAL__SYNC_POLICY: wal.sync_policy: unknown variant"),
        "{err}"
    );

    let (path, err) = load_error("[wal]\nkind = \"persistent\"\n", &[]);
    assert_eq!(
        err.to_string(),
        format!("{}: wal.dir: missing: wal.kind = \"persistent\" needs the WAL's directory, e.g. dir = \"/var/lib/app/wal\"", path.display())
    );

    let (path, err) = load_error("[wal\nkind = 1", &[]);
    assert!(
        matches!(err, ConfigError::Syntax { path: ref p, .. } if *p == path),
        "{err}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_missing_file_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nowhere").join("eb.toml");
    let err = Config::load(&path).unwrap_err();
    assert!(matches!(err, ConfigError::Read { path: ref p, .. } if *p == path));
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );

    let err = event_base::builder().config(&path).await.unwrap_err();
    assert!(
        matches!(err, CoreError::ConfigFile(ConfigError::Read { .. })),
        "{err}"
    );
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn an_override_of_a_handler_the_bus_lacks_fails_the_build() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "[handlers.ecoh]\nworkers = 2\n");
    let err = event_base::builder()
        .handler(echo())
        .config(&path)
        .await
        .unwrap()
        .build()
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("`ecoh`") && msg.contains("its handlers are: echo"),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("{}: handlers.ecoh", path.display())),
        "{msg}"
    );

    let (_, err) = load_error("[handlers.echo]\nworkers = 0\n", &[]);
    assert!(
        err.to_string().contains("handlers.echo.workers: 0 workers"),
        "{err}"
    );
}

#[test]
fn a_redis_section_is_checked() {
    let config = Config::from_toml_str(
        "[wal]\nkind = \"redis\"\n[queue]\nkind = \"redis\"\nbound = 10\n[redis]\nurl = \"redis://127.0.0.1:6390/2\"\nprefix = \"orders\"\nvisibility_timeout = \"5s\"\n",
        vars(&[("EB_REDIS__HEARTBEAT", "500ms")]),
    )
    .unwrap();
    assert_eq!(
        config.redis.url.as_deref(),
        Some("redis://127.0.0.1:6390/2")
    );
    assert_eq!(
        config.redis.heartbeat,
        Some(std::time::Duration::from_millis(500))
    );

    let err = Config::from_toml_str(
        "[wal]\nkind = \"redis\"\n[redis]\nurl = \"redis://x\"\n",
        vars(&[]),
    )
    .unwrap_err();
    assert!(
        err.to_string().starts_with(
            "the config: wal.kind: the Redis WAL is a view of the Redis queue's streams"
        ),
        "{err}"
    );

    let err = Config::from_toml_str(
        "[wal]\nkind = \"redis\"\n[queue]\nkind = \"redis\"\n",
        vars(&[]),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("the config: redis.url: missing"),
        "{err}"
    );

    let err = Config::from_toml_str("[wal]\nkind = \"mongo\"\n", vars(&[])).unwrap_err();
    assert!(
        err.to_string()
            .contains("expected one of `memory`, `persistent`, `redis`"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_section_connects() {
    let redis = RedisServer::start();
    let config = Config::from_toml_str(
        &format!("[wal]\nkind = \"redis\"\n[queue]\nkind = \"redis\"\n[redis]\nurl = \"{}\"\nprefix = \"cfg\"\n", redis.url()),
        vars(&[]),
    )
    .unwrap();
    let bus = EventBusOf::config(config).await;
    bus.send("echo", b"x".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(bus.metrics().topic("echo").unwrap().acked, 1);
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_tls_file_that_cannot_be_read_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("server.crt");
    let path = write(
        dir.path(),
        &format!(
            "[admin]\ntls_cert = \"{}\"\ntls_key = \"{}\"\n",
            cert.display(),
            dir.path().join("server.key").display()
        ),
    );
    let config = Config::load_with_vars(&path, vars(&[])).unwrap();
    let bus = event_base::builder().handler(echo()).build().await.unwrap();
    let err = config.grpc_server(bus.clone()).unwrap_err();
    assert!(
        matches!(err, ConfigError::ReadNamed { ref key, path: ref p, .. } if key == "admin.tls_cert" && *p == cert),
        "{err}"
    );
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}

/// The guide's complete file is a valid file, and sets what it says.
#[test]
fn the_guides_complete_file_loads() {
    let page = include_str!("../../event_base/guide/config.md");
    let from = page.find("## A complete file").unwrap();
    let start = from + page[from..].find("```toml\n").unwrap() + "```toml\n".len();
    let end = start + page[start..].find("```").unwrap();
    let config = Config::from_toml_str(&page[start..end], vars(&[])).unwrap();
    assert_eq!(config.wal.kind, WalKind::Persistent);
    assert_eq!(config.handlers["send_email"].workers, Some(4));
    assert_eq!(config.admin.max_encoding_message_size, Some(16 << 20));
    assert_eq!(
        config.bus.dedup_window,
        Some(std::time::Duration::from_secs(120))
    );
}
