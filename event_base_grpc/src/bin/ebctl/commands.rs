//! What each command does: build the request, call, and turn the answer into JSON and a
//! table (`Shown`). `main.rs` prints it in the chosen format.

use std::io::{IsTerminal, Read, Write};
use std::time::{Duration, SystemTime};

use event_base_grpc::client::{connect, AdminClient, ClientOptions};
use event_base_grpc::pb;
use serde_json::{json, Value};
use tokio_stream::StreamExt;

use crate::answer::{print, Done, Shown};
use crate::cli::{self, Cli, Command, Dlq, FilterArgs, Format, Strategy, WorkersAction};
use crate::failure::Failure;
use crate::output::{self, pairs, table};

fn show(json: Value, text: String) -> Result<Done, Failure> {
    Ok(Done::Show(Shown { json, text }))
}

async fn client(cli: &Cli, timeout: Option<Duration>) -> Result<AdminClient, Failure> {
    let token = match (&cli.token, &cli.token_file) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::Config(format!(
                    "cannot read the token file {}: {e}",
                    path.display()
                ))
            })?;
            Some(text.lines().next().unwrap_or_default().trim().to_owned())
        }
        (None, None) => None,
    };
    let mut options = ClientOptions::new(cli.addr.clone());
    options.token = token;
    options.timeout = timeout;
    if let Some(path) = &cli.tls_ca {
        options.tls_ca = Some(std::fs::read(path).map_err(|e| {
            Failure::Config(format!(
                "cannot read the CA certificate {}: {e}",
                path.display()
            ))
        })?);
    }
    options.tls_domain.clone_from(&cli.tls_domain);
    options.insecure = cli.insecure;
    options.keep_alive = Some(KEEP_ALIVE);
    Ok(connect(&options).await?)
}

/// How often ebctl pings the server, and how long a ping may go unanswered
/// (`ClientOptions::keep_alive`): a port that accepts TCP but never speaks HTTP/2 (another
/// program, a proxy that holds the connection) fails the call after about 5 s, not at its
/// deadline (30 s by default).
const KEEP_ALIVE: Duration = Duration::from_millis(2500);

/// Runs the command `cli` names.
pub(crate) async fn run(cli: &Cli) -> Result<Done, Failure> {
    match &cli.command {
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(*shell, &mut command, "ebctl", &mut std::io::stdout());
            Ok(Done::Streamed)
        }
        Command::Shutdown {
            strategy,
            yes,
            reason,
        } => {
            // The call may take as long as the strategy allows, and a little more.
            let deadline = strategy.longest().map(|d| d + Duration::from_secs(10));
            let mut c = client(cli, deadline).await?;
            shutdown(&mut c, strategy, *yes, reason)
                .await
                .map_err(|f| f.naming_server(&cli.addr))
        }
        command => {
            let mut c = client(cli, Some(cli.timeout)).await?;
            run_with(&mut c, command, cli.output)
                .await
                .map_err(|f| f.naming_server(&cli.addr))
        }
    }
}

async fn run_with(c: &mut AdminClient, command: &Command, format: Format) -> Result<Done, Failure> {
    match command {
        Command::Status => status(c).await,
        Command::Topics { system } => topics(c, *system).await,
        Command::Workers { action, list } => match action {
            None => workers(c, list).await,
            Some(WorkersAction::Add { handler, count }) => add_workers(c, handler, *count).await,
            Some(WorkersAction::Remove { name }) => remove_worker(c, name).await,
        },
        Command::Metrics {
            topics,
            system,
            workers,
            watch,
        } => match watch {
            None => metrics(c, topics, *system, *workers).await,
            Some(every) => loop {
                if let Done::Show(s) = metrics(c, topics, *system, *workers).await? {
                    print(format, &s);
                }
                tokio::time::sleep(*every).await;
            },
        },
        Command::Top(t) => crate::top::top(c, t, format).await,
        Command::Pause { topic, handler } => pause(c, topic, handler).await,
        Command::Resume { topic, handler } => resume(c, topic, handler).await,
        Command::Cancel { id } => cancel(c, id).await,
        Command::Schedules => schedules(c).await,
        Command::Unschedule { name } => unschedule(c, name).await,
        Command::Wal => wal(c).await,
        Command::Publish(p) => publish(c, p).await,
        Command::Dlq { action } => dlq(c, action, format).await,
        Command::Watch(w) => watch(c, w, format).await,
        Command::Trace { id } => trace(c, id).await,
        Command::Shutdown { .. } | Command::Completions { .. } => Ok(Done::Streamed),
    }
}

async fn status(c: &mut AdminClient) -> Result<Done, Failure> {
    let s = c.get_status(pb::GetStatusRequest {}).await?.into_inner();
    let w = s.wal.unwrap_or_default();
    // The WAL holds the bus's own messages too (worker and topic announcements on `_system.`
    // topics): say how many of `appended` they are.
    let m = c
        .get_metrics(pb::GetMetricsRequest {
            topics: Vec::new(),
            include_workers: false,
            include_handlers: false,
            include_subscriptions: false,
        })
        .await?
        .into_inner();
    let system_accepted: u64 = m
        .topics
        .iter()
        .filter(|(name, _)| name.starts_with(event_base_core::constant::SYSTEM_PREFIX))
        .map(|(_, t)| t.accepted)
        .sum();
    let json = json!({
        "node_name": s.node_name,
        "node_type": pb::NodeType::try_from(s.node_type).map_or_else(
            |_| "unknown".to_owned(),
            |t| t.as_str_name().trim_start_matches("NODE_TYPE_").to_ascii_lowercase(),
        ),
        "bus_name": s.bus_name, "version": s.version, "accepting": s.accepting,
        "started_at": output::time(s.started_at.as_ref()),
        "uptime_ms": output::millis(s.uptime.as_ref()),
        "in_flight": s.in_flight, "waiting_on_timers": s.waiting_on_timers,
        "topics": s.topic_count, "workers": s.worker_count,
        "dead_letters": s.dead_letter_count, "wal": output::wal(&w),
        "system_messages_accepted": system_accepted,
        "paused_subscriptions": s.paused_subscriptions, "max_lag": s.max_lag,
    });
    let text = pairs(&[
        ("node", s.node_name.clone()),
        ("bus", s.bus_name.clone()),
        ("version", s.version.clone()),
        (
            "accepting",
            if s.accepting {
                "yes"
            } else {
                "no (shutting down)"
            }
            .to_owned(),
        ),
        ("uptime", output::duration_text(s.uptime.as_ref())),
        (
            "in flight",
            format!("{} ({} on timers)", s.in_flight, s.waiting_on_timers),
        ),
        ("topics", s.topic_count.to_string()),
        ("workers", s.worker_count.to_string()),
        (
            "handlers",
            format!(
                "{} paused, largest lag {} (ebctl topics shows each handler's)",
                s.paused_subscriptions, s.max_lag
            ),
        ),
        ("dead letters", s.dead_letter_count.to_string()),
        (
            "wal",
            format!(
                "{} live, {} appended ({} of them the bus's own, on _system. topics), {} completed, {} bytes",
                w.live, w.appended, system_accepted, w.completed, w.disk_bytes
            ),
        ),
        ("wal state", output::wal_state(&w)),
    ]);
    show(json, text)
}

async fn topics(c: &mut AdminClient, system: bool) -> Result<Done, Failure> {
    let mut all = Vec::new();
    let mut token = String::new();
    loop {
        let page = c
            .list_topics(pb::ListTopicsRequest {
                page_size: 1000,
                page_token: token,
                include_system: system,
            })
            .await?
            .into_inner();
        all.extend(page.topics);
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let json = Value::Array(
        all.iter()
            .map(|t| {
                json!({"name": t.name, "workers": t.workers, "system": t.system,
                       "metrics": t.metrics.as_ref().map(output::topic_metrics),
                       "subscriptions": t.subscriptions.iter().map(output::subscription).collect::<Vec<_>>()})
            })
            .collect(),
    );
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|t| {
            let m = t.metrics.unwrap_or_default();
            vec![
                t.name.clone(),
                t.workers.len().to_string(),
                m.sent.to_string(),
                m.acked.to_string(),
                m.retried.to_string(),
                m.dead.to_string(),
                m.in_flight.to_string(),
                m.queue_depth.to_string(),
            ]
        })
        .collect();
    let topics = table(
        &[
            "TOPIC",
            "WORKERS",
            "SENT",
            "ACKED",
            "RETRIED",
            "DEAD",
            "IN FLIGHT",
            "QUEUED",
        ],
        &rows,
    );
    // Then each handler of each topic: its own copy of every message, its own lag.
    let subs: Vec<Vec<String>> = all
        .iter()
        .flat_map(|t| &t.subscriptions)
        .map(|s| {
            vec![
                s.topic.clone(),
                s.handler.clone(),
                output::subscription_state(s).to_owned(),
                s.lag.to_string(),
                s.queue_depth.to_string(),
            ]
        })
        .collect();
    let subs = table(&["TOPIC", "HANDLER", "STATE", "LAG", "QUEUED"], &subs);
    show(json, format!("{topics}\n\n{subs}"))
}

/// `cancel ID`.
async fn cancel(c: &mut AdminClient, id: &str) -> Result<Done, Failure> {
    let answer = c
        .cancel_message(pb::CancelMessageRequest { id: id.to_owned() })
        .await?
        .into_inner();
    let text = if answer.cancelled {
        format!("cancelled {id}: it will not be delivered")
    } else {
        format!("{id} not cancelled: no delayed message of this id waits (unknown, already due or delivered, or not delayed)")
    };
    show(json!({ "id": id, "cancelled": answer.cancelled }), text)
}

/// A slot in ms since the epoch as RFC 3339 (UTC), `-` for none.
fn slot_text(ms: u64) -> String {
    if ms == 0 {
        return "-".to_owned();
    }
    humantime::format_rfc3339_millis(SystemTime::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// `schedules`.
async fn schedules(c: &mut AdminClient) -> Result<Done, Failure> {
    let list = c
        .list_schedules(pb::ListSchedulesRequest {})
        .await?
        .into_inner()
        .schedules;
    let json: Vec<Value> = list
        .iter()
        .map(|s| {
            json!({
                "name": s.name, "schedule": s.schedule, "period_ms": s.period_ms, "cron": s.cron,
                "catch_up": s.catch_up, "topic": s.topic, "payload_bytes": s.payload_bytes,
                "last_slot_ms": s.last_slot_ms, "next_slot_ms": s.next_slot_ms,
            })
        })
        .collect();
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                s.schedule.clone(),
                s.topic.clone(),
                s.catch_up.clone(),
                slot_text(s.last_slot_ms),
                slot_text(s.next_slot_ms),
            ]
        })
        .collect();
    let text = if rows.is_empty() {
        "no schedules".to_owned()
    } else {
        table(
            &["NAME", "WHEN", "TOPIC", "CATCH-UP", "LAST", "NEXT"],
            &rows,
        )
    };
    show(Value::Array(json), text)
}

/// `unschedule NAME`.
async fn unschedule(c: &mut AdminClient, name: &str) -> Result<Done, Failure> {
    let answer = c
        .unschedule(pb::UnscheduleRequest {
            name: name.to_owned(),
        })
        .await?
        .into_inner();
    let text = if answer.removed {
        format!("removed schedule {name}")
    } else {
        format!("no schedule named {name}")
    };
    show(json!({ "name": name, "removed": answer.removed }), text)
}

/// `pause TOPIC HANDLER`.
async fn pause(c: &mut AdminClient, topic: &str, handler: &str) -> Result<Done, Failure> {
    let answer = c
        .pause_subscription(pb::PauseSubscriptionRequest {
            topic: topic.to_owned(),
            handler: handler.to_owned(),
        })
        .await?
        .into_inner();
    let sub = answer.subscription.unwrap_or_default();
    let text = if answer.already {
        format!("{handler} on {topic} was paused already; lag {}", sub.lag)
    } else {
        format!(
            "paused {handler} on {topic}; lag {} (its messages wait until `ebctl resume {topic} {handler}`)",
            sub.lag
        )
    };
    let mut json = output::subscription(&sub);
    json["already"] = json!(answer.already);
    show(json, text)
}

/// `resume TOPIC HANDLER`.
async fn resume(c: &mut AdminClient, topic: &str, handler: &str) -> Result<Done, Failure> {
    let answer = c
        .resume_subscription(pb::ResumeSubscriptionRequest {
            topic: topic.to_owned(),
            handler: handler.to_owned(),
        })
        .await?
        .into_inner();
    let sub = answer.subscription.unwrap_or_default();
    let text = if answer.already {
        format!("{handler} on {topic} was running already; lag {}", sub.lag)
    } else {
        format!(
            "resumed {handler} on {topic}; {} messages had waited, lag now {}",
            answer.waited, sub.lag
        )
    };
    let mut json = output::subscription(&sub);
    json["already"] = json!(answer.already);
    json["waited"] = json!(answer.waited);
    show(json, text)
}

async fn workers(c: &mut AdminClient, list: &cli::WorkersList) -> Result<Done, Failure> {
    let statuses = list
        .statuses
        .iter()
        .map(|s| match s {
            cli::WorkerStatusArg::Idle => pb::WorkerStatus::Idle as i32,
            cli::WorkerStatusArg::Working => pb::WorkerStatus::Working as i32,
            cli::WorkerStatusArg::Stopping => pb::WorkerStatus::Stopping as i32,
            cli::WorkerStatusArg::Stopped => pb::WorkerStatus::Stopped as i32,
            cli::WorkerStatusArg::Dead => pb::WorkerStatus::Dead as i32,
        })
        .collect();
    let page = c
        .list_workers(pb::ListWorkersRequest {
            topic: list.topic.clone().unwrap_or_default(),
            statuses,
            page_size: 1000,
            page_token: String::new(),
            include_system: list.system,
        })
        .await?
        .into_inner();
    let json = Value::Array(page.workers.iter().map(output::worker).collect());
    let rows: Vec<Vec<String>> = page
        .workers
        .iter()
        .map(|w| {
            vec![
                w.name.clone(),
                w.topic.clone(),
                output::worker_status(w.status),
                w.processed.to_string(),
                w.current_message_id.clone().unwrap_or_default(),
            ]
        })
        .collect();
    show(
        json,
        table(
            &["WORKER", "TOPIC", "STATUS", "PROCESSED", "CURRENT"],
            &rows,
        ),
    )
}

async fn add_workers(c: &mut AdminClient, handler: &str, count: u32) -> Result<Done, Failure> {
    let names = c
        .add_workers(pb::AddWorkersRequest {
            handler: handler.to_owned(),
            count,
        })
        .await?
        .into_inner()
        .names;
    let text = format!("started {}", names.join(", "));
    show(json!({"names": names}), text)
}

async fn remove_worker(c: &mut AdminClient, name: &str) -> Result<Done, Failure> {
    let report = c
        .remove_worker(pb::RemoveWorkerRequest {
            name: name.to_owned(),
        })
        .await?
        .into_inner()
        .report
        .unwrap_or_default();
    show(output::report(&report), output::report_text(&report))
}

async fn metrics(
    c: &mut AdminClient,
    topics: &[String],
    system: bool,
    workers: bool,
) -> Result<Done, Failure> {
    let mut m = c
        .get_metrics(pb::GetMetricsRequest {
            topics: topics.to_vec(),
            include_workers: workers,
            include_handlers: false,
            include_subscriptions: false,
        })
        .await?
        .into_inner();
    // As `topics` does: the bus's own topics only when asked for (or named).
    if !system && topics.is_empty() {
        m.topics
            .retain(|name, _| !name.starts_with(event_base_core::constant::SYSTEM_PREFIX));
    }
    let node = m.node.unwrap_or_default();
    let json = json!({
        "taken_at": output::time(m.taken_at.as_ref()),
        "node": {"in_flight": node.in_flight, "waiting_on_timers": node.waiting_on_timers,
                 "uptime_ms": output::millis(node.uptime.as_ref()), "workers": node.workers},
        "topics": m.topics.iter().map(|(k, v)| (k.clone(), output::topic_metrics(v))).collect::<serde_json::Map<_, _>>(),
        "workers": m.workers.iter().map(|(k, v)| (k.clone(), output::worker_metrics(v))).collect::<serde_json::Map<_, _>>(),
    });
    let mut names: Vec<&String> = m.topics.keys().collect();
    names.sort();
    let rows: Vec<Vec<String>> = names
        .iter()
        .map(|name| {
            let t = &m.topics[*name];
            let p99 = output::duration_text(t.handler_time.as_ref().and_then(|l| l.p99.as_ref()));
            vec![
                (*name).clone(),
                t.sent.to_string(),
                t.handled.to_string(),
                t.acked.to_string(),
                t.retried.to_string(),
                t.dead.to_string(),
                t.in_flight.to_string(),
                p99,
            ]
        })
        .collect();
    let mut text = table(
        &[
            "TOPIC",
            "SENT",
            "HANDLED",
            "ACKED",
            "RETRIED",
            "DEAD",
            "IN FLIGHT",
            "P99",
        ],
        &rows,
    );
    if workers {
        let mut names: Vec<&String> = m.workers.keys().collect();
        names.sort();
        let rows: Vec<Vec<String>> = names
            .iter()
            .map(|n| {
                let w = m.workers[*n];
                vec![
                    (*n).clone(),
                    w.handled.to_string(),
                    w.acked.to_string(),
                    w.retried.to_string(),
                    w.dead.to_string(),
                ]
            })
            .collect();
        text.push_str("\n\n");
        text.push_str(&table(
            &["WORKER", "HANDLED", "ACKED", "RETRIED", "DEAD"],
            &rows,
        ));
    }
    show(json, text)
}

async fn wal(c: &mut AdminClient) -> Result<Done, Failure> {
    let w = c
        .get_wal_stats(pb::GetWalStatsRequest {})
        .await?
        .into_inner()
        .stats
        .unwrap_or_default();
    let text = pairs(&[
        ("state", output::wal_state(&w)),
        ("appended", w.appended.to_string()),
        ("completed", w.completed.to_string()),
        ("live", w.live.to_string()),
        ("dead", w.dead.to_string()),
        ("disk bytes", w.disk_bytes.to_string()),
        ("syncs", w.syncs.to_string()),
    ]);
    show(output::wal(&w), text)
}

fn read_file(path: &std::path::Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| Failure::Config(format!("cannot read {}: {e}", path.display())))
}

async fn publish(c: &mut AdminClient, p: &cli::Publish) -> Result<Done, Failure> {
    let payload = match (&p.data, &p.data_file, p.stdin) {
        (Some(d), _, _) => d.clone().into_bytes(),
        (None, Some(f), _) => read_file(f)?,
        _ => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| Failure::Config(format!("cannot read standard input: {e}")))?;
            buf
        }
    };
    let mode = match (p.broadcast, p.repeat) {
        (true, _) => (pb::DeliveryModeKind::Broadcast, 0),
        (false, Some(n)) => (pb::DeliveryModeKind::Repeated, n),
        (false, None) => (pb::DeliveryModeKind::Standard, 0),
    };
    let schedule = match (p.delay, p.at) {
        (Some(d), _) => Some(pb::outgoing_message::Schedule::Delay(
            prost_types::Duration::try_from(d).unwrap_or_default(),
        )),
        (None, Some(at)) => Some(pb::outgoing_message::Schedule::DeliverAt(at.into())),
        (None, None) => None,
    };
    let message = pb::OutgoingMessage {
        payload: payload.into(),
        mode: Some(pb::DeliveryMode {
            kind: mode.0 as i32,
            repeat_count: mode.1,
        }),
        to_worker: p.to_worker.clone(),
        schedule,
        id: p.id.clone(),
        trace_id: p.trace_id.clone(),
        correlation_id: p.correlation_id.clone(),
        source: Some("ebctl".to_owned()),
        headers: p
            .headers
            .iter()
            .cloned()
            .chain(p.key.clone().map(|k| ("eb-key".to_owned(), k)))
            .map(|(name, value)| pb::Header { name, value })
            .collect(),
    };
    let id = c
        .publish(pb::PublishRequest {
            topic: p.topic.clone(),
            message: Some(message),
            try_send: p.try_send,
            timeout: None,
        })
        .await?
        .into_inner()
        .message_id;
    let text = format!("sent {id} to {}", p.topic);
    show(json!({"message_id": id, "topic": p.topic}), text)
}

/// `--since`/`--until`: RFC 3339, or a duration ago.
fn point_in_time(text: &str, flag: &str) -> Result<prost_types::Timestamp, Failure> {
    if let Ok(t) = humantime::parse_rfc3339_weak(text) {
        return Ok(t.into());
    }
    let ago = humantime::parse_duration(text).map_err(|_| {
        Failure::Config(format!(
            "{flag} `{text}` is neither a time (2030-01-01T12:00:00Z) nor a duration ago (1h)"
        ))
    })?;
    Ok(SystemTime::now()
        .checked_sub(ago)
        .unwrap_or(SystemTime::UNIX_EPOCH)
        .into())
}

pub(crate) fn filter(f: &FilterArgs) -> Result<Option<pb::DeadLetterFilter>, Failure> {
    let reasons = f
        .reasons
        .iter()
        .map(|r| match r {
            cli::ReasonArg::Explicit => pb::DeadReasonKind::Explicit as i32,
            cli::ReasonArg::MaxRetries => pb::DeadReasonKind::MaxRetriesExceeded as i32,
            cli::ReasonArg::Timeout => pb::DeadReasonKind::Timeout as i32,
            cli::ReasonArg::NoHandler => pb::DeadReasonKind::NoHandler as i32,
            cli::ReasonArg::UnknownWorker => pb::DeadReasonKind::UnknownWorker as i32,
            cli::ReasonArg::Other => pb::DeadReasonKind::Other as i32,
        })
        .collect();
    Ok(Some(pb::DeadLetterFilter {
        ids: f.ids.clone(),
        topics: f.topics.clone(),
        topic_prefix: f.topic_prefix.clone().unwrap_or_default(),
        reasons,
        died_after: f
            .since
            .as_deref()
            .map(|s| point_in_time(s, "--since"))
            .transpose()?,
        died_before: f
            .until
            .as_deref()
            .map(|s| point_in_time(s, "--until"))
            .transpose()?,
        min_attempts: f.min_attempts.unwrap_or(0),
        payload_contains: f.grep.clone().unwrap_or_default().into_bytes().into(),
        correlation_id: f.correlation_id.clone().unwrap_or_default(),
        trace_id: f.trace_id.clone().unwrap_or_default(),
    }))
}

/// Asks before a destructive step: `--yes`, or a "yes" typed on a terminal.
fn confirm(what: &str, yes: bool) -> Result<(), Failure> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(Failure::Refused(format!(
            "refusing to {what} without --yes: standard input is not a terminal to ask on"
        )));
    }
    eprint!("{what}? Type `yes` to go on: ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    let _ = std::io::stdin().read_line(&mut answer);
    if answer.trim() == "yes" {
        Ok(())
    } else {
        Err(Failure::Refused(format!("did not {what}: not confirmed")))
    }
}

async fn dlq(c: &mut AdminClient, action: &Dlq, format: Format) -> Result<Done, Failure> {
    match action {
        Dlq::List {
            filter: f,
            page_size,
            all_pages,
            payload,
        } => dlq_list(c, f, *page_size, *all_pages, *payload).await,
        Dlq::Show { id } => {
            let d = c
                .get_dead_letter(pb::GetDeadLetterRequest { id: id.clone() })
                .await?
                .into_inner()
                .dead_letter
                .unwrap_or_default();
            let json = output::dead_letter(&d);
            let text = serde_json::to_string_pretty(&json).unwrap_or_default();
            show(json, text)
        }
        Dlq::Replay(r) => replay(c, r, format).await,
        Dlq::Purge {
            filter: f,
            all,
            dry_run,
            yes,
        } => {
            let req = pb::PurgeDeadLettersRequest {
                filter: if *all { None } else { filter(f)? },
                all: *all,
                dry_run: *dry_run,
            };
            if !dry_run {
                // Count first, so the question says how many.
                let mut count = req.clone();
                count.dry_run = true;
                let n = c.purge_dead_letters(count).await?.into_inner().purged;
                confirm(&format!("purge {n} dead letters"), *yes)?;
            }
            let r = c.purge_dead_letters(req).await?.into_inner();
            let verb = if r.dry_run { "would purge" } else { "purged" };
            let text = format!("{verb} {} dead letters", r.purged);
            show(
                json!({"purged": r.purged, "ids": r.ids, "dry_run": r.dry_run}),
                text,
            )
        }
        Dlq::Tail { topics } => {
            let w = cli::Watch {
                kinds: vec![cli::WatchKind::DeadLetter],
                topics: topics.clone(),
                metrics_interval: None,
                count: None,
            };
            watch(c, &w, format).await
        }
    }
}

async fn dlq_list(
    c: &mut AdminClient,
    f: &FilterArgs,
    page_size: i32,
    all_pages: bool,
    payload: cli::PayloadArg,
) -> Result<Done, Failure> {
    let view = match payload {
        cli::PayloadArg::None => pb::PayloadView::None,
        cli::PayloadArg::Preview => pb::PayloadView::Preview,
        cli::PayloadArg::Full => pb::PayloadView::Full,
    };
    let mut letters = Vec::new();
    let mut token = String::new();
    let total = loop {
        let page = c
            .list_dead_letters(pb::ListDeadLettersRequest {
                filter: filter(f)?,
                page_size,
                page_token: token,
                payload_view: view as i32,
                preview_bytes: 0,
            })
            .await?
            .into_inner();
        letters.extend(page.dead_letters);
        if !all_pages || page.next_page_token.is_empty() {
            break page.total_size;
        }
        token = page.next_page_token;
    };
    let json = json!({
        "total_size": total,
        "dead_letters": letters.iter().map(output::dead_letter).collect::<Vec<_>>(),
    });
    let rows: Vec<Vec<String>> = letters.iter().map(output::dead_letter_row).collect();
    let text = format!(
        "{}\nshowing {} of {} matching",
        table(
            &["ID", "TOPIC", "REASON", "ATTEMPTS", "DIED AT", "PAYLOAD"],
            &rows
        ),
        letters.len(),
        total
    );
    show(json, text)
}

async fn replay(c: &mut AdminClient, r: &cli::Replay, format: Format) -> Result<Done, Failure> {
    if let Some(id) = &r.id {
        let payload = match (&r.payload, &r.payload_file) {
            (Some(p), _) => Some(p.clone().into_bytes().into()),
            (None, Some(f)) => Some(read_file(f)?.into()),
            (None, None) => None,
        };
        let answer = c
            .replay_dead_letter(pb::ReplayDeadLetterRequest {
                id: id.clone(),
                payload,
                topic: r.to_topic.clone(),
                schedule: r.delay.map(|d| {
                    pb::replay_dead_letter_request::Schedule::Delay(
                        prost_types::Duration::try_from(d).unwrap_or_default(),
                    )
                }),
            })
            .await?
            .into_inner();
        let text = if answer.edited {
            format!("replayed {id} edited, as {}", answer.message_id)
        } else {
            format!("replayed {id}")
        };
        return show(
            json!({"message_id": answer.message_id, "edited": answer.edited}),
            text,
        );
    }
    let req = pb::ReplayDeadLettersRequest {
        filter: if r.all { None } else { filter(&r.filter)? },
        all: r.all,
        limit: r.limit.unwrap_or(0),
        max_per_second: r.rps.unwrap_or(0.0),
        dry_run: r.dry_run,
    };
    if !r.dry_run {
        let mut count = req.clone();
        count.dry_run = true;
        let n = last_progress(c, count, None).await?.matched;
        confirm(&format!("replay {n} dead letters"), r.yes)?;
    }
    let last = last_progress(c, req, Some(format)).await?;
    let json = json!({"matched": last.matched, "replayed": last.replayed, "failed": last.failed, "dry_run": last.dry_run});
    let text = if last.dry_run {
        format!("would replay {} dead letters", last.matched)
    } else {
        format!(
            "replayed {} of {} ({} failed)",
            last.replayed, last.matched, last.failed
        )
    };
    if last.failed > 0 {
        print(format, &Shown { json, text });
        return Err(Failure::Partial(format!(
            "{} of {} dead letters could not be replayed",
            last.failed, last.matched
        )));
    }
    show(json, text)
}

/// Runs a bulk replay to its end; with `report`, prints each failure on stderr as it comes.
async fn last_progress(
    c: &mut AdminClient,
    req: pb::ReplayDeadLettersRequest,
    report: Option<Format>,
) -> Result<pb::ReplayDeadLettersResponse, Failure> {
    let mut stream = c.replay_dead_letters(req).await?.into_inner();
    let mut last = pb::ReplayDeadLettersResponse::default();
    while let Some(step) = stream.next().await {
        let step = step?;
        if let (Some(_), Some(f)) = (report, &step.failure) {
            eprintln!("ebctl: {} not replayed: {} ({})", f.id, f.message, f.code);
        }
        last = step;
    }
    if !last.done {
        return Err(Failure::Unreachable(
            "the replay stream ended before the server said it was done; list the dead letters to see what is left".to_owned(),
        ));
    }
    Ok(last)
}

async fn watch(c: &mut AdminClient, w: &cli::Watch, format: Format) -> Result<Done, Failure> {
    let kinds = w
        .kinds
        .iter()
        .map(|k| match k {
            cli::WatchKind::DeadLetter => pb::WatchEventKind::DeadLetter as i32,
            cli::WatchKind::Worker => pb::WatchEventKind::Worker as i32,
            cli::WatchKind::Lifecycle => pb::WatchEventKind::Lifecycle as i32,
            cli::WatchKind::Audit => pb::WatchEventKind::Audit as i32,
            cli::WatchKind::Metrics => pb::WatchEventKind::Metrics as i32,
        })
        .collect();
    let mut stream = c
        .watch(pb::WatchRequest {
            kinds,
            topics: w.topics.clone(),
            metrics_interval: w.metrics_interval.and_then(duration),
        })
        .await?
        .into_inner();
    // The server subscribes before it answers: from here on nothing is missed.
    eprintln!("ebctl: watching (Ctrl-C to stop)");
    let mut seen = 0u64;
    while let Some(event) = stream.next().await {
        let (json, text) = output::watch_event(&event?);
        let mut out = std::io::stdout().lock();
        let _ = match format {
            Format::Table => writeln!(out, "{text}"),
            // A stream is one object per line, whichever JSON form was asked for.
            Format::Json | Format::Jsonl => writeln!(out, "{json}"),
        };
        let _ = out.flush();
        seen += 1;
        if w.count.is_some_and(|n| seen >= n) {
            break;
        }
    }
    Ok(Done::Streamed)
}

async fn trace(c: &mut AdminClient, id: &str) -> Result<Done, Failure> {
    let records = c
        .get_message_audit(pb::GetMessageAuditRequest {
            message_id: id.to_owned(),
        })
        .await?
        .into_inner()
        .records;
    let json = Value::Array(records.iter().map(output::audit_record).collect());
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                r.seq.to_string(),
                output::time_text(r.at.as_ref()),
                r.worker.clone(),
                r.attempt.to_string(),
                output::audit_kind(r.event),
                r.reason.clone(),
            ]
        })
        .collect();
    show(
        json,
        table(
            &["SEQ", "AT", "WORKER", "ATTEMPT", "EVENT", "REASON"],
            &rows,
        ),
    )
}

fn duration(d: Duration) -> Option<prost_types::Duration> {
    prost_types::Duration::try_from(d).ok()
}

async fn shutdown(
    c: &mut AdminClient,
    strategy: &Strategy,
    yes: bool,
    reason: &str,
) -> Result<Done, Failure> {
    use pb::shutdown_request::Strategy as S;
    let (what, s) = match strategy {
        Strategy::TwoStage {
            force_timeout,
            poll_interval,
        } => (
            "shut the bus down (two-stage)",
            S::TwoStage(pb::TwoStageStrategy {
                poll_interval: duration(*poll_interval),
                force_timeout: duration(*force_timeout),
            }),
        ),
        Strategy::Force => (
            "shut the bus down now (force)",
            S::Force(pb::ForceStrategy {}),
        ),
        Strategy::Timeout { total } => (
            "shut the bus down (timeout)",
            S::Timeout(pb::TimeoutStrategy {
                total: duration(*total),
            }),
        ),
        Strategy::Graceful {
            worker,
            poll_interval,
        } => (
            "stop the worker",
            S::Graceful(pb::GracefulStrategy {
                worker_name: worker.clone(),
                poll_interval: duration(*poll_interval),
            }),
        ),
        Strategy::StateBasedIdle => (
            "shut the bus down (state-based idle)",
            S::StateBasedIdle(pb::StateBasedIdleStrategy {}),
        ),
        Strategy::Batched {
            batch_size,
            interval,
        } => (
            "shut the bus down (batched)",
            S::Batched(pb::BatchedStrategy {
                batch_size: *batch_size,
                interval: duration(*interval),
            }),
        ),
        Strategy::Drain { timeout } => (
            "shut the bus down (drain)",
            S::Drain(pb::DrainStrategy {
                timeout: duration(*timeout),
            }),
        ),
    };
    confirm(what, yes)?;
    let report = c
        .shutdown(pb::ShutdownRequest {
            strategy: Some(s),
            reason: reason.to_owned(),
        })
        .await?
        .into_inner()
        .report
        .unwrap_or_default();
    show(output::report(&report), output::report_text(&report))
}
