//! `ebctl top`: the topics' counters sampled every interval, shown as rates per second.
//!
//! A rate is the difference of a counter between two samples over the time measured between
//! them (not the interval asked for: a slow call stretches it). The first refresh has no
//! earlier sample, so its rates are absent (`-`, JSON `null`). A counter lower than before (the
//! server restarted) counts as no change rather than a negative or wrapped rate.
//!
//! Lag is a level, not a rate: each row shows the largest lag among the topic's handlers
//! (its subscriptions: messages accepted for a handler and not yet finished by it) and
//! names the handlers that are paused.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use event_base_grpc::client::AdminClient;
use event_base_grpc::pb;
use serde_json::{json, Value};

use crate::answer::Done;
use crate::cli::{Format, Top};
use crate::failure::Failure;
use crate::output::{self, table};

/// The counters of one topic that `top` turns into rates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counters {
    accepted: u64,
    handled: u64,
    acked: u64,
    retried: u64,
    dead: u64,
}

impl From<&pb::TopicMetrics> for Counters {
    fn from(m: &pb::TopicMetrics) -> Self {
        Counters {
            accepted: m.accepted,
            handled: m.handled,
            acked: m.acked,
            retried: m.retried,
            dead: m.dead,
        }
    }
}

/// Per second, between two samples of the same counters.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Rates {
    accepted: f64,
    handled: f64,
    acked: f64,
    retried: f64,
    dead: f64,
}

/// `now - before` per second of `elapsed`; a counter that went down (a restarted server)
/// counts as 0. `None` when no time passed (no rate can be told).
fn rates(before: &Counters, now: &Counters, elapsed: Duration) -> Option<Rates> {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 {
        return None;
    }
    let per_s = |a: u64, b: u64| b.saturating_sub(a) as f64 / secs;
    Some(Rates {
        accepted: per_s(before.accepted, now.accepted),
        handled: per_s(before.handled, now.handled),
        acked: per_s(before.acked, now.acked),
        retried: per_s(before.retried, now.retried),
        dead: per_s(before.dead, now.dead),
    })
}

/// One topic's line of a refresh.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    topic: String,
    totals: Counters,
    /// Absent on the first refresh, and for a topic not in the previous sample.
    rates: Option<Rates>,
    in_flight: u64,
    queue_depth: u64,
    /// The largest lag of the topic's subscriptions (0 without any).
    lag: u64,
    /// The topic's subscriptions, by handler.
    subscriptions: Vec<pb::Subscription>,
}

impl Row {
    /// The handlers of the topic that are paused.
    fn paused(&self) -> Vec<&str> {
        self.subscriptions
            .iter()
            .filter(|s| s.paused)
            .map(|s| s.handler.as_str())
            .collect()
    }
}

/// The rows of a sample, compared with the previous one (if any), sorted by handled per
/// second (highest first), then by name; `subscriptions` are the sample's, of every topic.
fn rows(
    topics: &HashMap<String, pb::TopicMetrics>,
    subscriptions: &[pb::Subscription],
    previous: Option<(&HashMap<String, Counters>, Duration)>,
    system: bool,
) -> Vec<Row> {
    let mut rows: Vec<Row> = topics
        .iter()
        .filter(|(name, _)| system || !name.starts_with(event_base_core::constant::SYSTEM_PREFIX))
        .map(|(name, m)| {
            let totals = Counters::from(m);
            let rates = previous.and_then(|(before, elapsed)| {
                before
                    .get(name)
                    .and_then(|before| rates(before, &totals, elapsed))
            });
            let mut subs: Vec<pb::Subscription> = subscriptions
                .iter()
                .filter(|s| &s.topic == name)
                .cloned()
                .collect();
            subs.sort_by(|a, b| a.handler.cmp(&b.handler));
            Row {
                topic: name.clone(),
                totals,
                rates,
                in_flight: m.in_flight,
                queue_depth: m.queue_depth,
                lag: subs.iter().map(|s| s.lag).max().unwrap_or(0),
                subscriptions: subs,
            }
        })
        .collect();
    let handled = |r: &Row| r.rates.map_or(0.0, |r| r.handled);
    rows.sort_by(|a, b| {
        handled(b)
            .total_cmp(&handled(a))
            .then_with(|| a.topic.cmp(&b.topic))
    });
    rows
}

/// One refresh: what the server said, and the rows computed from it.
struct Refresh<'a> {
    number: u64,
    taken_at: Option<&'a prost_types::Timestamp>,
    elapsed: Option<Duration>,
    node: pb::NodeMetrics,
    rows: &'a [Row],
}

fn rate_json(rates: Option<Rates>, pick: fn(&Rates) -> f64) -> Value {
    rates.map_or(Value::Null, |r| json!(pick(&r)))
}

fn refresh_json(r: &Refresh<'_>) -> Value {
    json!({
        "refresh": r.number,
        "taken_at": output::time(r.taken_at),
        "elapsed_ms": r.elapsed.map(|e| e.as_secs_f64() * 1000.0),
        "node": {"in_flight": r.node.in_flight, "waiting_on_timers": r.node.waiting_on_timers,
                 "workers": r.node.workers},
        "topics": r.rows.iter().map(|row| json!({
            "topic": row.topic,
            "accepted_per_s": rate_json(row.rates, |r| r.accepted),
            "handled_per_s": rate_json(row.rates, |r| r.handled),
            "acked_per_s": rate_json(row.rates, |r| r.acked),
            "retried_per_s": rate_json(row.rates, |r| r.retried),
            "dead_per_s": rate_json(row.rates, |r| r.dead),
            "in_flight": row.in_flight,
            "queue_depth": row.queue_depth,
            "lag": row.lag,
            "paused": row.paused(),
            "subscriptions": row.subscriptions.iter().map(|s| json!({
                "handler": s.handler, "lag": s.lag, "paused": s.paused,
            })).collect::<Vec<_>>(),
            "accepted": row.totals.accepted,
            "handled": row.totals.handled,
            "acked": row.totals.acked,
            "retried": row.totals.retried,
            "dead": row.totals.dead,
        })).collect::<Vec<_>>(),
    })
}

fn rate_text(rates: Option<Rates>, pick: fn(&Rates) -> f64) -> String {
    rates.map_or_else(|| "-".to_owned(), |r| format!("{:.1}", pick(&r)))
}

fn refresh_text(r: &Refresh<'_>) -> String {
    let over = match r.elapsed {
        Some(e) => format!("rates per second over the last {:.2}s", e.as_secs_f64()),
        None => "rates from the next refresh on".to_owned(),
    };
    let head = format!(
        "{}  in flight {} ({} on timers), {} workers; {over}",
        output::time_text(r.taken_at),
        r.node.in_flight,
        r.node.waiting_on_timers,
        r.node.workers,
    );
    let lines: Vec<Vec<String>> = r
        .rows
        .iter()
        .map(|row| {
            vec![
                row.topic.clone(),
                rate_text(row.rates, |r| r.accepted),
                rate_text(row.rates, |r| r.handled),
                rate_text(row.rates, |r| r.acked),
                rate_text(row.rates, |r| r.retried),
                rate_text(row.rates, |r| r.dead),
                row.in_flight.to_string(),
                row.queue_depth.to_string(),
                row.lag.to_string(),
                match row.paused() {
                    paused if paused.is_empty() => "-".to_owned(),
                    paused => paused.join(","),
                },
            ]
        })
        .collect();
    format!(
        "{head}\n{}",
        table(
            &[
                "TOPIC",
                "ACCEPTED/S",
                "HANDLED/S",
                "ACKED/S",
                "RETRIED/S",
                "DEAD/S",
                "IN FLIGHT",
                "QUEUED",
                "LAG",
                "PAUSED",
            ],
            &lines,
        )
    )
}

/// Home the cursor and clear the screen (only ever written to a terminal).
const CLEAR: &str = "\x1b[H\x1b[2J";

/// Samples every `top.interval` and prints each refresh until `top.count` refreshes, Ctrl-C,
/// or a closed stdout (e.g. `| head`); all three end with exit code 0.
pub(crate) async fn top(c: &mut AdminClient, top: &Top, format: Format) -> Result<Done, Failure> {
    let terminal = std::io::stdout().is_terminal();
    let mut ticks = tokio::time::interval(top.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut previous: Option<(HashMap<String, Counters>, Instant)> = None;
    let mut number = 0u64;
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        // `biased`: Ctrl-C is polled first, so its handler is in place from the first
        // iteration on (before it, the default handler kills the process).
        tokio::select! {
            biased;
            _ = &mut stop => break,
            _ = ticks.tick() => {}
        }
        let asked = Instant::now();
        let sample = tokio::select! {
            biased;
            _ = &mut stop => break,
            answer = c.get_metrics(pb::GetMetricsRequest {
                topics: Vec::new(),
                include_workers: false,
                include_handlers: false,
                include_subscriptions: true,
            }) => answer?.into_inner(),
        };
        // The server took its snapshot somewhere between the question and the answer: the
        // middle is the best guess, and keeps a slow first call (the connection being set
        // up) out of the next refresh's rates.
        let now = asked + asked.elapsed() / 2;
        number += 1;
        let before = previous
            .as_ref()
            .map(|(counters, at)| (counters, now.saturating_duration_since(*at)));
        let rows = rows(&sample.topics, &sample.subscriptions, before, top.system);
        let refresh = Refresh {
            number,
            taken_at: sample.taken_at.as_ref(),
            elapsed: before.map(|(_, e)| e),
            node: sample.node.unwrap_or_default(),
            rows: &rows,
        };
        let block = match format {
            // One object per refresh, one per line, whichever JSON form was asked for.
            Format::Json | Format::Jsonl => format!("{}\n", refresh_json(&refresh)),
            Format::Table if terminal => format!("{CLEAR}{}\n", refresh_text(&refresh)),
            // Off a terminal, blocks one after another, a blank line between them.
            Format::Table if number == 1 => format!("{}\n", refresh_text(&refresh)),
            Format::Table => format!("\n{}\n", refresh_text(&refresh)),
        };
        let mut out = std::io::stdout().lock();
        if out
            .write_all(block.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            break;
        }
        drop(out);
        previous = Some((
            sample
                .topics
                .iter()
                .map(|(name, m)| (name.clone(), Counters::from(m)))
                .collect(),
            now,
        ));
        if top.count.is_some_and(|n| number >= n) {
            break;
        }
    }
    Ok(Done::Streamed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(accepted: u64, handled: u64) -> pb::TopicMetrics {
        pb::TopicMetrics {
            accepted,
            handled,
            acked: handled,
            ..Default::default()
        }
    }

    #[test]
    fn rates_are_differences_over_the_measured_time() {
        let before = Counters {
            accepted: 10,
            handled: 4,
            acked: 4,
            retried: 0,
            dead: 1,
        };
        let now = Counters {
            accepted: 30,
            handled: 9,
            acked: 8,
            retried: 2,
            dead: 1,
        };
        let r = rates(&before, &now, Duration::from_millis(500)).unwrap();
        assert_eq!(
            r,
            Rates {
                accepted: 40.0,
                handled: 10.0,
                acked: 8.0,
                retried: 4.0,
                dead: 0.0
            }
        );
        assert_eq!(rates(&before, &now, Duration::ZERO), None);
    }

    #[test]
    fn a_counter_that_went_down_is_no_change() {
        // The server restarted between the samples: its counters start again from zero.
        let before = Counters {
            accepted: 100,
            handled: 100,
            acked: 100,
            retried: 5,
            dead: 5,
        };
        let now = Counters {
            accepted: 3,
            handled: 2,
            ..Counters::default()
        };
        let r = rates(&before, &now, Duration::from_secs(1)).unwrap();
        assert_eq!(r, Rates::default());
    }

    #[test]
    fn rows_sort_by_handled_rate_then_name_and_hide_system_topics() {
        let topics: HashMap<String, pb::TopicMetrics> = [
            ("b".to_owned(), metrics(5, 5)),
            ("a".to_owned(), metrics(5, 5)),
            ("busy".to_owned(), metrics(50, 50)),
            ("new".to_owned(), metrics(1, 1)),
            ("_system.workers".to_owned(), metrics(9, 9)),
        ]
        .into();
        let before: HashMap<String, Counters> = [
            ("a".to_owned(), Counters::default()),
            ("b".to_owned(), Counters::default()),
            ("busy".to_owned(), Counters::default()),
        ]
        .into();
        let first = rows(&topics, &[], None, false);
        let names: Vec<&str> = first.iter().map(|r| r.topic.as_str()).collect();
        assert_eq!(names, ["a", "b", "busy", "new"], "no rates yet: by name");
        assert!(first.iter().all(|r| r.rates.is_none()));

        let second = rows(&topics, &[], Some((&before, Duration::from_secs(2))), true);
        let names: Vec<&str> = second.iter().map(|r| r.topic.as_str()).collect();
        assert_eq!(names, ["busy", "a", "b", "_system.workers", "new"]);
        assert_eq!(second[0].rates.unwrap().handled, 25.0);
        assert_eq!(second[4].rates, None, "not in the previous sample");
    }

    #[test]
    fn a_row_shows_its_largest_lag_and_its_paused_handlers() {
        let topics: HashMap<String, pb::TopicMetrics> = [
            ("signup".to_owned(), metrics(9, 4)),
            ("quiet".to_owned(), metrics(0, 0)),
        ]
        .into();
        let sub = |topic: &str, handler: &str, lag: u64, paused: bool| pb::Subscription {
            topic: topic.to_owned(),
            handler: handler.to_owned(),
            lag,
            paused,
            queue_depth: lag,
        };
        let subs = [
            sub("signup", "mailer", 7, true),
            sub("signup", "crm", 2, false),
            sub("signup", "audit", 0, true),
        ];
        let rows = rows(&topics, &subs, None, false);
        let signup = rows.iter().find(|r| r.topic == "signup").unwrap();
        assert_eq!(signup.lag, 7);
        assert_eq!(signup.paused(), ["audit", "mailer"], "by handler name");
        let quiet = rows.iter().find(|r| r.topic == "quiet").unwrap();
        assert_eq!((quiet.lag, quiet.paused().len()), (0, 0));
        let text = refresh_text(&Refresh {
            number: 1,
            taken_at: None,
            elapsed: None,
            node: pb::NodeMetrics::default(),
            rows: &rows,
        });
        let line: Vec<&str> = text
            .lines()
            .find(|l| l.starts_with("signup"))
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(line[line.len() - 2..], ["7", "audit,mailer"]);
        assert!(
            text.lines()
                .nth(1)
                .unwrap()
                .ends_with("QUEUED  LAG  PAUSED"),
            "{text}"
        );
    }
}
