//! The sections of a config file, as the file spells them: [`BusSection`], [`WalSection`],
//! [`QueueSection`], [`RedisSection`], [`HandlerSection`], [`AdminSection`].
//!
//! Every section and every key is optional; a key left out keeps the default named in its
//! docs. Unknown keys are errors (`deny_unknown_fields`), so a typo never passes unnoticed.

use std::path::PathBuf;
use std::time::Duration;

use event_base_core::Rate;
use serde::{Deserialize, Deserializer};

/// `[bus]`: the bus itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BusSection {
    /// `name`: the bus's name, the `bus` label of its metrics (default `<node name>-<n>`).
    pub name: Option<String>,
    /// `node_name`: this process's node name (default: the process's, see `node_name()`).
    pub node_name: Option<String>,
    /// `node_type`: `"host"` or `"worker"` (default: the process's, `"host"` unless set).
    pub node_type: Option<NodeKind>,
    /// `batch_size`: messages the consumer router claims at once (default 64).
    pub batch_size: Option<usize>,
    /// `dedup_window`: how long a completed id refuses sends of the same id (default `"2m"`;
    /// `"0s"` turns deduplication off).
    #[serde(default, deserialize_with = "duration")]
    pub dedup_window: Option<Duration>,
    /// `audit_capacity`: audit records kept in memory (default 10000; `0` turns auditing off).
    pub audit_capacity: Option<usize>,
}

/// `node_type`: what the process is in a cluster (see `NodeType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum NodeKind {
    /// `"host"`: runs the bus's own handlers on the `_system.` topics.
    Host,
    /// `"worker"`: handles messages only.
    Worker,
}

/// `[wal]`: the write-ahead log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct WalSection {
    /// `kind`: `"memory"` (default), `"persistent"` (feature `persistent`) or `"redis"`
    /// (feature `redis`, with `queue.kind = "redis"`).
    #[serde(default)]
    pub kind: WalKind,
    /// `dir`: the directory of a persistent WAL (required with `kind = "persistent"`;
    /// created if missing).
    pub dir: Option<PathBuf>,
    /// `sync_policy`: `"always"` (default), `"batch"` or `"never"` (see `SyncPolicy`).
    #[serde(default)]
    pub sync_policy: SyncPolicyName,
    /// `batch_max_records`: with `sync_policy = "batch"`, appends that trigger a sync at
    /// once (default 128).
    pub batch_max_records: Option<usize>,
    /// `batch_max_delay`: with `sync_policy = "batch"`, the longest wait for more appends
    /// before a sync (default `"2ms"`).
    #[serde(default, deserialize_with = "duration")]
    pub batch_max_delay: Option<Duration>,
    /// `segment_bytes`: size at which a segment file is sealed (default 67108864, 64 MiB;
    /// at least 4096).
    pub segment_bytes: Option<u64>,
}

/// `wal.kind`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum WalKind {
    /// `"memory"`: `MemoryWal`, lost with the process.
    #[default]
    Memory,
    /// `"persistent"`: `PersistentWal` in `wal.dir`.
    Persistent,
    /// `"redis"`: `RedisWal` over the Redis queue's streams.
    Redis,
}

/// `wal.sync_policy`: the name of a `SyncPolicy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum SyncPolicyName {
    /// `"always"`: every append is durable before `send` returns.
    #[default]
    Always,
    /// `"batch"`: group commit, tuned by `batch_max_records` and `batch_max_delay`.
    Batch,
    /// `"never"`: the OS writes back when it likes; not crash-safe.
    Never,
}

/// `[queue]`: the queues between senders and workers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct QueueSection {
    /// `kind`: `"flume"` (default), `"mpmc"` (kanal) or `"redis"` (feature `redis`, with
    /// `wal.kind = "redis"`).
    #[serde(default)]
    pub kind: QueueKind,
    /// `bound`: messages a topic's queue holds before senders wait (default 8192 in memory,
    /// 100000 on Redis; at least 1).
    pub bound: Option<usize>,
}

/// `queue.kind`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum QueueKind {
    /// `"flume"`: `FlumeQueueFactory`.
    #[default]
    Flume,
    /// `"mpmc"`: `MpmcQueueFactory` (kanal).
    Mpmc,
    /// `"redis"`: `RedisQueueFactory` on `redis.url`.
    Redis,
}

/// `[redis]`: the server of `wal.kind = "redis"` and `queue.kind = "redis"`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RedisSection {
    /// `url`: `redis://host:port/db` (required with the Redis backends).
    pub url: Option<String>,
    /// `prefix`: the prefix of every key (default `"eb"`); buses with different prefixes
    /// share nothing.
    pub prefix: Option<String>,
    /// `visibility_timeout`: how long a claimed entry stays leased before another node may
    /// take it over (default `"30s"`).
    #[serde(default, deserialize_with = "duration")]
    pub visibility_timeout: Option<Duration>,
    /// `heartbeat`: how often this node beats (default `"2s"`); the same on every node.
    #[serde(default, deserialize_with = "duration")]
    pub heartbeat: Option<Duration>,
}

/// `[handlers.<name>]`: settings that replace those a handler was declared with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct HandlerSection {
    /// `workers`: number of workers (at least 1; default: the handler's own).
    pub workers: Option<usize>,
    /// `retries`: retries before a dead letter (default: the handler's own).
    pub retries: Option<u32>,
    /// `timeout`: per-delivery timeout, e.g. `"30s"` (default: the handler's own).
    #[serde(default, deserialize_with = "duration")]
    pub timeout: Option<Duration>,
    /// `rate`: at most that many handler starts per period, e.g. `"100/s"` (default: the
    /// handler's own; `HandlerSpec::rate`).
    #[serde(default, deserialize_with = "rate")]
    pub rate: Option<Rate>,
}

/// `[admin]`: the admin server (gRPC, and HTTP when the application serves it). The
/// application starts the server; with feature `gRPC`, `Config::grpc_server` makes its
/// builder from these settings.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AdminSection {
    /// `grpc_addr`: where the gRPC server listens, e.g. `"127.0.0.1:50051"` (default: not
    /// served).
    pub grpc_addr: Option<String>,
    /// `http_addr`: where the admin server serves HTTP (`GET /metrics`, with the same
    /// tokens; `Config::grpc_server` sets it), e.g. `"127.0.0.1:8080"` (default: not served).
    pub http_addr: Option<String>,
    /// `dashboard`: serve the web dashboard at `/` on `http_addr` beside `/metrics`
    /// (default `true`; `false` serves `/metrics` only).
    pub dashboard: Option<bool>,
    /// `read_token`: the bearer token of the read scope (default: none).
    pub read_token: Option<String>,
    /// `admin_token`: the bearer token of the admin scope (default: none; with no token at
    /// all the server listens on loopback only, unless `allow_unauthenticated`).
    pub admin_token: Option<String>,
    /// `allow_unauthenticated`: serve without tokens off loopback (default `false`).
    #[serde(default)]
    pub allow_unauthenticated: bool,
    /// `tls_cert`: PEM certificate chain file (with `tls_key`; feature `gRPC-tls`).
    pub tls_cert: Option<PathBuf>,
    /// `tls_key`: PEM private key file (with `tls_cert`; feature `gRPC-tls`).
    pub tls_key: Option<PathBuf>,
    /// `request_timeout`: how long a call may take to answer (default `"2m"`).
    #[serde(default, deserialize_with = "duration")]
    pub request_timeout: Option<Duration>,
    /// `concurrency_limit_per_connection`: calls one connection may have under way
    /// (default 64).
    pub concurrency_limit_per_connection: Option<usize>,
    /// `max_decoding_message_size`: largest request in bytes (default 4 MiB).
    pub max_decoding_message_size: Option<usize>,
    /// `max_encoding_message_size`: largest answer in bytes (default 16 MiB).
    pub max_encoding_message_size: Option<usize>,
    /// `health`: serve `grpc.health.v1.Health` (default `true`).
    pub health: Option<bool>,
    /// `reflection`: serve reflection (default `true`).
    pub reflection: Option<bool>,
}

impl std::fmt::Debug for AdminSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens themselves.
        let set = |t: &Option<String>| t.as_ref().map(|_| "<set>");
        f.debug_struct("AdminSection")
            .field("grpc_addr", &self.grpc_addr)
            .field("http_addr", &self.http_addr)
            .field("dashboard", &self.dashboard)
            .field("read_token", &set(&self.read_token))
            .field("admin_token", &set(&self.admin_token))
            .field("allow_unauthenticated", &self.allow_unauthenticated)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("request_timeout", &self.request_timeout)
            .field(
                "concurrency_limit_per_connection",
                &self.concurrency_limit_per_connection,
            )
            .field("max_decoding_message_size", &self.max_decoding_message_size)
            .field("max_encoding_message_size", &self.max_encoding_message_size)
            .field("health", &self.health)
            .field("reflection", &self.reflection)
            .finish()
    }
}

/// A duration written as humans do: `"500ms"`, `"30s"`, `"5m"`, `"1h 30m"`.
fn rate<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Rate>, D::Error> {
    let text = String::deserialize(d)?;
    text.parse::<Rate>()
        .map(Some)
        .map_err(|e| serde::de::Error::custom(e.to_string()))
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text = String::deserialize(d)?;
    humantime::parse_duration(&text).map(Some).map_err(|e| {
        serde::de::Error::custom(format!(
            "\"{text}\" is not a duration ({e}); write one such as \"500ms\", \"30s\", \"5m\" or \"1h 30m\""
        ))
    })
}
