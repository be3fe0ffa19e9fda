//! Dead letters over gRPC, checked against the bus: ListDeadLetters (filters, stable pages,
//! total_size, payload views), GetDeadLetter, ReplayDeadLetter (plain and edited),
//! PurgeDeadLetters (empty filter refused, dry run, filtered), and the streaming
//! ReplayDeadLetters (filter, rate limit, dry run, a dropped stream loses nothing).

// A test's unwrap is its assertion (as in event_base_test); helpers here too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{dead, start, Probe, Served};
use event_base_core::{Ack, EMessage};
use event_base_grpc::pb;
use tokio_stream::StreamExt;

/// A bus whose `bad` and `worse` topics dead-letter everything; `n` letters on `bad`
/// (payload `letter-<i>`, correlation id `c<i % 2>`) and one on `worse`.
async fn seeded(n: usize) -> (Served, std::sync::Arc<Probe>) {
    let probe = Probe::new();
    let s = start(vec![
        probe.handler("bad", "bad", dead),
        probe.handler("worse", "worse", dead),
    ])
    .await;
    for i in 0..n {
        let msg = EMessage::standard("bad", format!("letter-{i}").into_bytes())
            .with_correlation_id(format!("c{}", i % 2));
        s.bus.send("bad", msg).await.unwrap();
    }
    s.bus.send("worse", b"other".to_vec()).await.unwrap();
    s.bus.wait_idle(common::WAIT).await.unwrap();
    (s, probe)
}

fn topic_filter(topic: &str) -> Option<pb::DeadLetterFilter> {
    Some(pb::DeadLetterFilter {
        topics: vec![topic.into()],
        ..Default::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_filter_and_page_stably_while_purging() {
    let (s, _) = seeded(7).await;
    let mut c = s.admin().await;
    let all = c
        .list_dead_letters(pb::ListDeadLettersRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.total_size, 8);
    assert_eq!(all.dead_letters.len(), 8);
    let core: HashSet<String> = s
        .bus
        .dead_letters()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.message.id)
        .collect();
    let listed: HashSet<String> = all
        .dead_letters
        .iter()
        .map(|d| d.message.as_ref().unwrap().id.clone())
        .collect();
    assert_eq!(listed, core);
    let first = &all.dead_letters[0];
    assert_eq!(
        first.reason.as_ref().unwrap().kind,
        pb::DeadReasonKind::Explicit as i32
    );

    // Filters: a topic, a correlation id, a payload substring.
    let by_corr = c
        .list_dead_letters(pb::ListDeadLettersRequest {
            filter: Some(pb::DeadLetterFilter {
                correlation_id: "c1".into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(by_corr.total_size, 3, "letters 1, 3 and 5");
    let grep = c
        .list_dead_letters(pb::ListDeadLettersRequest {
            filter: Some(pb::DeadLetterFilter {
                payload_contains: b"ther".to_vec().into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(grep.total_size, 1);
    assert_eq!(
        grep.dead_letters[0].message.as_ref().unwrap().topic,
        "worse"
    );

    // Pages of 3 over `bad`, purging the first letter of each page before asking for the
    // next: every letter is seen once, none skipped.
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = c
            .list_dead_letters(pb::ListDeadLettersRequest {
                filter: topic_filter("bad"),
                page_size: 3,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let ids: Vec<String> = page
            .dead_letters
            .iter()
            .map(|d| d.message.as_ref().unwrap().id.clone())
            .collect();
        seen.extend(ids.iter().cloned());
        s.bus.delete_dead_letter(&ids[0]).await.unwrap();
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen.len(), 7);
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 7, "no repeats");

    let err = c
        .list_dead_letters(pb::ListDeadLettersRequest {
            page_size: 501,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("500"), "{}", err.message());
    let err = c
        .list_dead_letters(pb::ListDeadLettersRequest {
            page_token: "not a token".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_views_and_get_dead_letter() {
    let probe = Probe::new();
    let s = start(vec![probe.handler("bad", "bad", dead)]).await;
    let big = vec![b'x'; 1000];
    let id = s.bus.send("bad", big.clone()).await.unwrap();
    s.bus.wait_idle(common::WAIT).await.unwrap();
    let mut c = s.admin().await;
    for (view, preview, want) in [
        (pb::PayloadView::None, 0, 0usize),
        (pb::PayloadView::Unspecified, 0, 64),
        (pb::PayloadView::Preview, 10, 10),
        (pb::PayloadView::Full, 0, 1000),
    ] {
        let page = c
            .list_dead_letters(pb::ListDeadLettersRequest {
                payload_view: view as i32,
                preview_bytes: preview,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let m = page.dead_letters[0].message.clone().unwrap();
        assert_eq!(m.payload.len(), want, "{view:?}");
        assert_eq!(m.payload_size, 1000);
        assert_eq!(m.payload_truncated, want < 1000);
    }
    let one = c
        .get_dead_letter(pb::GetDeadLetterRequest { id: id.to_string() })
        .await
        .unwrap()
        .into_inner()
        .dead_letter
        .unwrap();
    assert_eq!(one.message.unwrap().payload.as_ref(), big.as_slice());
    assert_eq!(one.attempts, 1);
    assert_eq!(one.handlers, ["bad"]);
    let missing = c
        .get_dead_letter(pb::GetDeadLetterRequest { id: "nope".into() })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    assert!(missing.message().contains("nope"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_plain_and_edited() {
    // `fixable` dies unless its payload says "fixed".
    let probe = Probe::new();
    let s = start(vec![probe.handler("fixable", "fixable", |m: &EMessage| {
        if m.payload.as_bytes() == b"fixed" {
            Ack::Ack
        } else {
            Ack::dead()
        }
    })])
    .await;
    let a = s.bus.send("fixable", b"broken-a".to_vec()).await.unwrap();
    let b = s.bus.send("fixable", b"broken-b".to_vec()).await.unwrap();
    s.bus.wait_idle(common::WAIT).await.unwrap();
    let mut c = s.admin().await;

    // Plain: the same id, dead again (nothing fixed it).
    let plain = c
        .replay_dead_letter(pb::ReplayDeadLetterRequest {
            id: a.to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (plain.message_id.as_str(), plain.edited),
        (a.as_str(), false)
    );
    probe.wait_for(3).await;
    s.bus.wait_idle(common::WAIT).await.unwrap();

    // Edited: a new message with the new payload reaches the handler and is acked; the
    // dead letter is gone.
    let edited = c
        .replay_dead_letter(pb::ReplayDeadLetterRequest {
            id: b.to_string(),
            payload: Some(b"fixed".to_vec().into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(edited.edited);
    assert_ne!(edited.message_id, b.as_str());
    s.bus.wait_idle(common::WAIT).await.unwrap();
    assert_eq!(probe.payloads().last().unwrap().1, b"fixed");
    assert_eq!(s.bus.metrics().topic("fixable").unwrap().acked, 1);
    let left: Vec<String> = s
        .bus
        .dead_letters()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.message.id)
        .collect();
    assert_eq!(left, [a.to_string()], "b was replayed edited; a died again");

    let missing = c
        .replay_dead_letter(pb::ReplayDeadLetterRequest {
            id: "nope".into(),
            payload: Some(b"x".to_vec().into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    let to_nowhere = c
        .replay_dead_letter(pb::ReplayDeadLetterRequest {
            id: a.to_string(),
            topic: Some("no-such-topic".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(to_nowhere.code(), tonic::Code::FailedPrecondition);
    assert_eq!(
        s.bus.dead_letters().await.unwrap().len(),
        1,
        "a refused edited replay keeps the dead letter"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_refuses_an_empty_filter_counts_dry_runs_and_purges_only_matches() {
    let (s, _) = seeded(4).await;
    let mut c = s.admin().await;
    let refused = c
        .purge_dead_letters(pb::PurgeDeadLettersRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("all"), "{}", refused.message());
    let both = c
        .purge_dead_letters(pb::PurgeDeadLettersRequest {
            filter: topic_filter("bad"),
            all: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(both.code(), tonic::Code::InvalidArgument);

    let dry = c
        .purge_dead_letters(pb::PurgeDeadLettersRequest {
            filter: topic_filter("bad"),
            dry_run: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((dry.purged, dry.ids.len(), dry.dry_run), (4, 4, true));
    assert_eq!(
        s.bus.dead_letters().await.unwrap().len(),
        5,
        "a dry run changes nothing"
    );

    let done = c
        .purge_dead_letters(pb::PurgeDeadLettersRequest {
            filter: topic_filter("bad"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(done.purged, 4);
    let left = s.bus.dead_letters().await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].message.topic.as_str(), "worse");

    let all = c
        .purge_dead_letters(pb::PurgeDeadLettersRequest {
            all: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.purged, 1);
    assert!(s.bus.dead_letters().await.unwrap().is_empty());
}

/// Collects a bulk replay's stream to its end.
async fn replay_all(
    c: &mut event_base_grpc::client::AdminClient,
    req: pb::ReplayDeadLettersRequest,
) -> Vec<pb::ReplayDeadLettersResponse> {
    let mut stream = c.replay_dead_letters(req).await.unwrap().into_inner();
    let mut out = Vec::new();
    while let Some(step) = stream.next().await {
        out.push(step.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_replay_touches_only_matches_and_dry_runs_change_nothing() {
    let (s, probe) = seeded(4).await;
    let mut c = s.admin().await;
    let before = probe.count();
    let refused = c
        .replay_dead_letters(pb::ReplayDeadLettersRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);

    let dry = replay_all(
        &mut c,
        pb::ReplayDeadLettersRequest {
            filter: topic_filter("worse"),
            dry_run: true,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(dry.len(), 1);
    assert!(dry[0].done && dry[0].dry_run);
    assert_eq!((dry[0].matched, dry[0].replayed), (1, 0));
    assert_eq!(s.bus.dead_letters().await.unwrap().len(), 5);

    let steps = replay_all(
        &mut c,
        pb::ReplayDeadLettersRequest {
            filter: topic_filter("worse"),
            ..Default::default()
        },
    )
    .await;
    let last = steps.last().unwrap();
    assert!(last.done);
    assert_eq!((last.matched, last.replayed, last.failed), (1, 1, 0));
    s.bus.wait_idle(common::WAIT).await.unwrap();
    assert_eq!(
        probe.count(),
        before + 1,
        "only the `worse` letter was delivered again"
    );
    let topics: Vec<String> = probe
        .payloads()
        .iter()
        .skip(before)
        .map(|p| p.0.clone())
        .collect();
    assert_eq!(topics, ["worse"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_replay_keeps_to_max_per_second() {
    let (s, _) = seeded(20).await;
    let mut c = s.admin().await;
    let started = Instant::now();
    let steps = replay_all(
        &mut c,
        pb::ReplayDeadLettersRequest {
            filter: topic_filter("bad"),
            max_per_second: 10.0,
            ..Default::default()
        },
    )
    .await;
    let took = started.elapsed();
    assert_eq!(steps.last().unwrap().replayed, 20);
    assert_eq!(steps.len(), 21, "a step per letter and the last");
    assert!(
        took >= Duration::from_millis(1900),
        "20 letters at 10 per second start over at least 1.9 s; took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_too_low_to_wait_for_is_refused_not_a_panic() {
    // 1 / rate seconds overflows a duration (a panic in `Duration::from_secs_f64`), or is
    // past what the server waits for: refused before anything is replayed.
    let (s, _) = seeded(2).await;
    let mut c = s.admin().await;
    for rate in [f64::MIN_POSITIVE, 1e-300, 1e-9] {
        let refused = c
            .replay_dead_letters(pb::ReplayDeadLettersRequest {
                filter: topic_filter("bad"),
                max_per_second: rate,
                ..Default::default()
            })
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(
            refused.code(),
            tonic::Code::InvalidArgument,
            "{rate}: {refused:?}"
        );
        assert!(
            refused.message().contains("max_per_second"),
            "{}",
            refused.message()
        );
    }
    assert_eq!(
        s.bus.dead_letters().await.unwrap().len(),
        3,
        "nothing replayed"
    );
    // A slow but possible rate is taken: the first letter goes at once.
    let mut stream = c
        .replay_dead_letters(pb::ReplayDeadLettersRequest {
            filter: topic_filter("bad"),
            max_per_second: 0.001,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first.replayed, 1);
}

/// Whether `healing` handlers ack (after the fix) or dead-letter (before).
static HEALED: AtomicBool = AtomicBool::new(false);

fn healing(_: &EMessage) -> Ack {
    if HEALED.load(Ordering::SeqCst) {
        Ack::Ack
    } else {
        Ack::dead()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_dropped_mid_replay_loses_nothing() {
    let probe = Probe::new();
    let s = start(vec![probe.handler("heal", "heal", healing)]).await;
    for i in 0..20u8 {
        s.bus.send("heal", vec![i]).await.unwrap();
    }
    s.bus.wait_idle(common::WAIT).await.unwrap();
    let original: HashSet<String> = s
        .bus
        .dead_letters()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.message.id)
        .collect();
    assert_eq!(original.len(), 20);
    HEALED.store(true, Ordering::SeqCst);

    let mut c = s.admin().await;
    let mut stream = c
        .replay_dead_letters(pb::ReplayDeadLettersRequest {
            all: true,
            max_per_second: 20.0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    // Read three steps, then hang up.
    for _ in 0..3 {
        let step = stream.next().await.unwrap().unwrap();
        assert!(!step.replayed_id.is_empty());
    }
    drop(stream);
    drop(c);
    // The replay is driven by the stream: once the server has let go of it (a graceful stop
    // waits for every call), nothing more is replayed. What it replayed is acked, the rest
    // are still dead letters.
    s.handle.shutdown().await.unwrap();
    s.bus.wait_idle(common::WAIT).await.unwrap();
    let acked: HashSet<String> = s
        .bus
        .audit()
        .recent(1000)
        .into_iter()
        .filter(|r| {
            matches!(
                r.event,
                event_base_core::AuditEvent::Finished {
                    outcome: event_base_core::AuditOutcome::Acked,
                    ..
                }
            )
        })
        .map(|r| r.message_id)
        .collect();
    let still_dead: HashSet<String> = s
        .bus
        .dead_letters()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.message.id)
        .collect();
    assert!(acked.len() >= 3, "the three steps read were replayed");
    assert!(!still_dead.is_empty(), "the replay stopped with the stream");
    assert!(acked.is_disjoint(&still_dead));
    let union: HashSet<String> = acked.union(&still_dead).cloned().collect();
    assert_eq!(union, original, "replayed + remaining = original");
}
