//! The command line: global flags, commands and their arguments (clap derive).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

const EXIT_CODES: &str = "\
Exit codes:
  0   success
  1   error (e.g. a destructive command refused without --yes off a terminal)
  2   usage error (bad flags or arguments)
  3   partial success: a bulk replay in which some letters failed
  65  the server refused the request: INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION,
      OUT_OF_RANGE, ALREADY_EXISTS
  69  the server cannot be reached, or is UNAVAILABLE (e.g. the bus is shutting down)
  70  the server failed: INTERNAL, UNKNOWN, DATA_LOSS, UNIMPLEMENTED
  75  try again later: DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED (a full queue), ABORTED, CANCELLED
  77  UNAUTHENTICATED (no or a wrong token) or PERMISSION_DENIED (a read token on an admin command)
  78  bad local configuration: an address that is not one, an unreadable file, a bad token,
      a token for an http:// host off loopback without --insecure";

/// ebctl: drive a running event_base bus over its gRPC management API.
#[derive(Debug, Parser)]
#[command(name = "ebctl", version, after_help = EXIT_CODES)]
pub(crate) struct Cli {
    /// The server's address.
    #[arg(
        long,
        global = true,
        env = "EBCTL_ADDR",
        default_value = "http://127.0.0.1:50051"
    )]
    pub(crate) addr: String,
    /// The bearer token (read or admin scope).
    #[arg(long, global = true, env = "EBCTL_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// A file holding the token (its first line).
    #[arg(long, global = true, conflicts_with = "token")]
    pub(crate) token_file: Option<PathBuf>,
    /// The PEM certificate of the CA that signed the server's (an `https://` server; builds
    /// with the `tls` feature). An address without a scheme then means `https://`.
    #[arg(long, global = true, env = "EBCTL_TLS_CA")]
    pub(crate) tls_ca: Option<PathBuf>,
    /// The name the server's certificate must carry, when it is not the address's host.
    #[arg(long, global = true, env = "EBCTL_TLS_DOMAIN")]
    pub(crate) tls_domain: Option<String>,
    /// Send the token over plain-text http:// even to a host that is not loopback, where
    /// anyone on the path can read it. Without it that is refused: use an https:// address
    /// with --tls-ca instead.
    #[arg(long, global = true, env = "EBCTL_INSECURE")]
    pub(crate) insecure: bool,
    /// Deadline of each call, e.g. 10s (streams and shutdown are not limited by it).
    #[arg(long, global = true, env = "EBCTL_TIMEOUT", value_parser = humantime::parse_duration, default_value = "30s")]
    pub(crate) timeout: Duration,
    /// Output: human tables, or JSON for scripts (streams print one JSON object per line).
    #[arg(short, long, global = true, value_enum, default_value_t = Format::Table)]
    pub(crate) output: Format,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Aligned columns for people.
    Table,
    /// One JSON document per command.
    Json,
    /// One JSON object per line (for streams; other commands print compact JSON).
    Jsonl,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// The bus at a glance: node, version, uptime, counts, WAL.
    Status,
    /// The topics with handlers, their workers and counters, then their subscriptions (each
    /// handler of a topic) with their lag and whether they are paused.
    Topics {
        /// Include the bus's own `_system.` topics.
        #[arg(long)]
        system: bool,
    },
    /// List workers, or scale a handler (`workers add`, `workers remove`).
    #[command(args_conflicts_with_subcommands = true)]
    Workers {
        /// Scale instead of listing.
        #[command(subcommand)]
        action: Option<WorkersAction>,
        /// What to list.
        #[command(flatten)]
        list: WorkersList,
    },
    /// Counters per topic (and per worker with --workers).
    Metrics {
        /// Only these topics.
        #[arg(long = "topic")]
        topics: Vec<String>,
        /// Include the bus's own `_system.` topics.
        #[arg(long)]
        system: bool,
        /// Include the per-worker counters.
        #[arg(long)]
        workers: bool,
        /// Print again every interval (e.g. 2s) until interrupted.
        #[arg(long, value_parser = humantime::parse_duration)]
        watch: Option<Duration>,
    },
    /// A live view of the topics: rates per second, in flight, queue depth, lag, paused handlers.
    ///
    /// Samples the counters every --interval and shows one table per refresh, the busiest
    /// topics (handled per second) first. Each rate is a counter's difference between two
    /// samples over the time measured between them, so the first refresh shows `-` (JSON
    /// `null`). On a terminal the table is redrawn in place; off one (a pipe, a file) each
    /// refresh is a block of its own after a blank line, with no escape codes. `-o json`
    /// prints one JSON object per refresh, one per line. LAG is the largest lag of the
    /// topic's handlers (messages accepted for a handler and not yet finished by it); PAUSED
    /// names its paused handlers (`ebctl topics` shows each handler's lag).
    Top(Top),
    /// Pause one handler of a topic: it starts nothing new and its messages wait (its lag
    /// grows); the topic's other handlers go on. Lasts until `ebctl resume` or the bus's
    /// process ends.
    Pause {
        /// The topic.
        topic: String,
        /// The handler (`ebctl topics` lists each topic's handlers).
        handler: String,
    },
    /// Resume a paused handler of a topic: it takes up what waited, in order.
    Resume {
        /// The topic.
        topic: String,
        /// The handler.
        handler: String,
    },
    /// Take back a delayed message before its time: it is never delivered, and its WAL
    /// record is withdrawn (not a dead letter). Prints whether it was; an id that is unknown,
    /// already due or delivered, or not delayed is not cancelled (exit code 0 all the same;
    /// `-o json` has `cancelled`).
    Cancel {
        /// The message's id (what the send answered).
        id: String,
    },
    /// The recurring schedules the bus runs: name, when, topic, catch-up policy, last and
    /// next slot (UTC).
    Schedules,
    /// Remove a recurring schedule from the bus and from its WAL: it fires no more.
    Unschedule {
        /// The schedule's name.
        name: String,
    },
    /// The write-ahead log's counters.
    Wal,
    /// Send a message.
    Publish(Publish),
    /// Dead letters: list, show, replay, purge, tail.
    Dlq {
        /// What to do with them.
        #[command(subcommand)]
        action: Dlq,
    },
    /// Follow dead-letter, worker and lifecycle events as they happen.
    Watch(Watch),
    /// The audit records the bus holds about one message.
    Trace {
        /// The message id.
        id: String,
    },
    /// Shut the bus down (or, with `graceful`, one worker).
    Shutdown {
        /// How.
        #[command(subcommand)]
        strategy: Strategy,
        /// Do it without asking (needed when stdin is not a terminal).
        #[arg(long, short = 'y', global = true)]
        yes: bool,
        /// Why (logged by the server).
        #[arg(long, global = true, default_value = "")]
        reason: String,
    },
    /// Print a completion script for a shell.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub(crate) struct WorkersList {
    /// Only the workers of this topic.
    #[arg(long)]
    pub(crate) topic: Option<String>,
    /// Only workers in these statuses.
    #[arg(long = "status", value_enum)]
    pub(crate) statuses: Vec<WorkerStatusArg>,
    /// Include the workers of the bus's own `_system.` topics.
    #[arg(long)]
    pub(crate) system: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum WorkerStatusArg {
    Idle,
    Working,
    Stopping,
    Stopped,
    Dead,
}

#[derive(Debug, Subcommand)]
pub(crate) enum WorkersAction {
    /// Start more workers for a handler.
    Add {
        /// The handler's name.
        handler: String,
        /// How many.
        count: u32,
    },
    /// Stop one worker once it is idle.
    Remove {
        /// The worker's name.
        name: String,
    },
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("payload_source").required(true).args(["data", "data_file", "stdin"])))]
pub(crate) struct Publish {
    /// The topic.
    pub(crate) topic: String,
    /// The payload, as text.
    #[arg(long)]
    pub(crate) data: Option<String>,
    /// Read the payload from a file.
    #[arg(long)]
    pub(crate) data_file: Option<PathBuf>,
    /// Read the payload from standard input.
    #[arg(long)]
    pub(crate) stdin: bool,
    /// Every worker of each handler handles it.
    #[arg(long, conflicts_with = "repeat")]
    pub(crate) broadcast: bool,
    /// Each handler handles it N times in all.
    #[arg(long, value_name = "N")]
    pub(crate) repeat: Option<u32>,
    /// Only this worker handles it.
    #[arg(long)]
    pub(crate) to_worker: Option<String>,
    /// Deliver it this long from now (e.g. 30s).
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "at")]
    pub(crate) delay: Option<Duration>,
    /// Deliver it at this time (RFC 3339, e.g. 2030-01-01T12:00:00Z).
    #[arg(long, value_parser = humantime::parse_rfc3339_weak)]
    pub(crate) at: Option<std::time::SystemTime>,
    /// Its id (default: a new UUID).
    #[arg(long)]
    pub(crate) id: Option<String>,
    /// A correlation id.
    #[arg(long)]
    pub(crate) correlation_id: Option<String>,
    /// A trace id.
    #[arg(long)]
    pub(crate) trace_id: Option<String>,
    /// Its ordering key: messages with the same key are handled one at a time by each
    /// handler, in the order they were sent.
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// A header, NAME=VALUE (repeatable).
    #[arg(long = "header", value_name = "NAME=VALUE", value_parser = parse_header)]
    pub(crate) headers: Vec<(String, String)>,
    /// Fail at once if the topic's queue is full.
    #[arg(long)]
    pub(crate) try_send: bool,
}

/// Which dead letters: every set flag must hold.
#[derive(Debug, Args, Clone, Default)]
pub(crate) struct FilterArgs {
    /// Only these ids.
    #[arg(long = "id")]
    pub(crate) ids: Vec<String>,
    /// Only these topics.
    #[arg(long = "topic")]
    pub(crate) topics: Vec<String>,
    /// Only topics starting with this.
    #[arg(long)]
    pub(crate) topic_prefix: Option<String>,
    /// Only these reasons.
    #[arg(long = "reason", value_enum)]
    pub(crate) reasons: Vec<ReasonArg>,
    /// Only letters that died at or after this time (RFC 3339), or this long ago (e.g. 1h).
    #[arg(long)]
    pub(crate) since: Option<String>,
    /// Only letters that died before this time (RFC 3339), or this long ago (e.g. 10m).
    #[arg(long)]
    pub(crate) until: Option<String>,
    /// Only letters with at least this many attempts.
    #[arg(long)]
    pub(crate) min_attempts: Option<u32>,
    /// Only payloads containing this text.
    #[arg(long)]
    pub(crate) grep: Option<String>,
    /// Only messages with this correlation id.
    #[arg(long)]
    pub(crate) correlation_id: Option<String>,
    /// Only messages with this trace id.
    #[arg(long)]
    pub(crate) trace_id: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ReasonArg {
    Explicit,
    MaxRetries,
    Timeout,
    NoHandler,
    UnknownWorker,
    Other,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum PayloadArg {
    None,
    Preview,
    Full,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Dlq {
    /// List dead letters, oldest first.
    List {
        /// Which.
        #[command(flatten)]
        filter: FilterArgs,
        /// Letters per page.
        #[arg(long, default_value_t = 50)]
        page_size: i32,
        /// Fetch every page, not only the first.
        #[arg(long)]
        all_pages: bool,
        /// How much of each payload to show.
        #[arg(long, value_enum, default_value_t = PayloadArg::Preview)]
        payload: PayloadArg,
    },
    /// One dead letter with its whole payload.
    Show {
        /// Its id.
        id: String,
    },
    /// Send dead letters again: one by id (optionally edited), or all matching a filter.
    Replay(Replay),
    /// Remove dead letters for good.
    #[command(group(clap::ArgGroup::new("scope").required(true).multiple(true)
        .args(["all", "ids", "topics", "topic_prefix", "reasons", "since", "until", "min_attempts", "grep", "correlation_id", "trace_id"])))]
    Purge {
        /// Which (a filter, or --all).
        #[command(flatten)]
        filter: FilterArgs,
        /// Every dead letter.
        #[arg(long, conflicts_with_all = ["ids", "topics", "topic_prefix", "reasons", "since", "until", "min_attempts", "grep", "correlation_id", "trace_id"])]
        all: bool,
        /// Only count what would be purged.
        #[arg(long)]
        dry_run: bool,
        /// Do it without asking (needed when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Follow new dead letters (`watch --kind dead-letter`).
    Tail {
        /// Only these topics.
        #[arg(long = "topic")]
        topics: Vec<String>,
    },
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("scope").required(true).multiple(true)
    .args(["id", "all", "ids", "topics", "topic_prefix", "reasons", "since", "until", "min_attempts", "grep", "correlation_id", "trace_id"])))]
pub(crate) struct Replay {
    /// The one dead letter to replay.
    pub(crate) id: Option<String>,
    /// Which (a filter, or --all), for a bulk replay.
    #[command(flatten)]
    pub(crate) filter: FilterArgs,
    /// Every dead letter.
    #[arg(long, conflicts_with_all = ["id", "ids", "topics", "topic_prefix", "reasons", "since", "until", "min_attempts", "grep", "correlation_id", "trace_id"])]
    pub(crate) all: bool,
    /// With ID: a new payload, as text.
    #[arg(long, requires = "id", conflicts_with = "payload_file")]
    pub(crate) payload: Option<String>,
    /// With ID: a new payload from a file.
    #[arg(long, requires = "id")]
    pub(crate) payload_file: Option<PathBuf>,
    /// With ID: send it to this topic instead.
    #[arg(long = "to-topic", requires = "id")]
    pub(crate) to_topic: Option<String>,
    /// With ID: deliver it this long from now.
    #[arg(long, requires = "id", value_parser = humantime::parse_duration)]
    pub(crate) delay: Option<Duration>,
    /// Bulk: at most this many replays per second.
    #[arg(long, conflicts_with = "id")]
    pub(crate) rps: Option<f64>,
    /// Bulk: at most this many letters.
    #[arg(long, conflicts_with = "id")]
    pub(crate) limit: Option<u32>,
    /// Bulk: only count what would be replayed.
    #[arg(long, conflicts_with = "id")]
    pub(crate) dry_run: bool,
    /// Bulk: do it without asking (needed when stdin is not a terminal).
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
}

#[derive(Debug, Args)]
pub(crate) struct Top {
    /// How often to sample (e.g. 500ms, 2s; at least 100ms).
    #[arg(long, value_parser = interval, default_value = "1s")]
    pub(crate) interval: Duration,
    /// Stop after this many refreshes (default: until Ctrl-C, which exits with 0).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) count: Option<u64>,
    /// Include the bus's own `_system.` topics.
    #[arg(long)]
    pub(crate) system: bool,
}

/// A sampling interval: a duration (humantime, as every ebctl duration) of at least 100ms,
/// so `top` neither spins nor divides by a time too short to measure.
fn interval(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if d < Duration::from_millis(100) {
        return Err(format!("{text} is shorter than 100ms"));
    }
    Ok(d)
}

#[derive(Debug, Args)]
pub(crate) struct Watch {
    /// Only these kinds of event (default: dead-letter, worker, lifecycle; audit and metrics
    /// only when named).
    #[arg(long = "kind", value_enum)]
    pub(crate) kinds: Vec<WatchKind>,
    /// Only dead-letter, worker and audit events, and counters, of these topics.
    #[arg(long = "topic")]
    pub(crate) topics: Vec<String>,
    /// With `--kind metrics`: how often to print the counters (default 5s, at least 100ms).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub(crate) metrics_interval: Option<Duration>,
    /// Stop after this many events (default: follow until interrupted).
    #[arg(long)]
    pub(crate) count: Option<u64>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum WatchKind {
    /// A message became a dead letter.
    DeadLetter,
    /// A worker joined, left or was declared dead.
    Worker,
    /// The bus began or finished shutting down.
    Lifecycle,
    /// A delivery started or finished (two per delivery).
    Audit,
    /// The counters per topic, every --metrics-interval.
    Metrics,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Strategy {
    /// Ask every worker to stop after its current message; cancel them after --force-timeout.
    TwoStage {
        /// When to cancel the workers still working.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
        force_timeout: Duration,
        /// How often progress is logged.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
        poll_interval: Duration,
    },
    /// Stop now; in-flight messages stay in the WAL for the next start.
    Force,
    /// Keep working until nothing is in flight or --total has passed, then cancel.
    Timeout {
        /// The whole time allowed.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
        total: Duration,
    },
    /// Stop one worker once it is idle; the bus keeps running.
    Graceful {
        /// The worker.
        worker: String,
        /// How often progress is logged.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
        poll_interval: Duration,
    },
    /// Stop each worker as soon as it is idle (no time limit).
    StateBasedIdle,
    /// Stop workers --batch-size at a time, --interval apart.
    Batched {
        /// Workers per group.
        #[arg(long, default_value_t = 1)]
        batch_size: u32,
        /// Pause between groups.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
        interval: Duration,
    },
    /// Stop accepting, finish the backlog, then stop.
    Drain {
        /// Longest time to wait for the backlog.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
        timeout: Duration,
    },
}

impl Strategy {
    /// The longest the shutdown may take, so the call's deadline can exceed it.
    pub(crate) fn longest(&self) -> Option<Duration> {
        match self {
            Strategy::TwoStage { force_timeout, .. } => Some(*force_timeout),
            Strategy::Force => Some(Duration::ZERO),
            Strategy::Timeout { total } => Some(*total),
            Strategy::Drain { timeout } => Some(*timeout),
            Strategy::Graceful { .. } | Strategy::StateBasedIdle | Strategy::Batched { .. } => None,
        }
    }
}

/// A `--header NAME=VALUE`.
fn parse_header(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("`{s}` is not NAME=VALUE")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_well_formed() {
        <super::Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn insecure_is_a_global_flag_off_by_default() {
        use clap::Parser;
        let plain = super::Cli::try_parse_from(["ebctl", "status"]).unwrap();
        assert!(!plain.insecure);
        let before = super::Cli::try_parse_from(["ebctl", "--insecure", "status"]).unwrap();
        assert!(before.insecure);
        let after = super::Cli::try_parse_from(["ebctl", "dlq", "list", "--insecure"]).unwrap();
        assert!(after.insecure);
    }
}
