//! Dead letters as operators see them: a [`Filter`] (every set condition must hold), stable
//! pages ordered by (time of death, id), and the per-item rules of the bulk operations.
//!
//! Bulk operations never take "everything" by accident: an empty filter is refused unless
//! the request says `all` (a filtered "delete all" that deleted everything is a classic
//! operator accident). Each replay is per item: the message is sent first, and only then is
//! the dead letter gone, so a replay stopped half-way loses nothing.
//!
//! Sorting, filtering (a payload search reads every payload) and cutting payloads run on
//! tokio's blocking threads (`spawn_blocking`), not on the runtime's workers, and a list
//! examines at most [`MAX_DEAD_LETTERS_SCANNED`] dead letters per call: a read token cannot
//! make one call scan an unbounded dead-letter store.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use event_base_core::{DeadLetterMessage, EMessage, EventBus, MessageId};
use tonic::Status;

use crate::convert;
use crate::pb;
use crate::status::core;

/// The most dead letters one `ListDeadLetters` call examines against its filter, from the
/// page token's position on. A page that reaches it before it is full ends there, with a
/// `next_page_token` to go on from (it may even be empty); with more dead letters than this
/// in all, `total_size` is `-1` (unknown) instead of the count of matches.
pub const MAX_DEAD_LETTERS_SCANNED: usize = 10_000;
/// Most dead letters on one page.
pub(crate) const MAX_PAGE_SIZE: usize = 500;
/// Dead letters on a page when the request says nothing.
pub(crate) const DEFAULT_PAGE_SIZE: usize = 50;
/// A page ends before its payloads pass this many bytes: under tonic's 4 MiB decode limit.
pub(crate) const PAGE_BYTE_BUDGET: usize = 3 << 20;
/// Payload bytes of a preview when the request says nothing.
pub(crate) const DEFAULT_PREVIEW_BYTES: usize = 64;
/// Ids a purge lists in its answer.
pub(crate) const PURGE_IDS_LISTED: usize = 1000;

/// A checked `DeadLetterFilter`.
#[derive(Debug, Default)]
pub(crate) struct Filter {
    ids: Vec<String>,
    topics: Vec<String>,
    topic_prefix: String,
    reasons: Vec<pb::DeadReasonKind>,
    died_after: Option<SystemTime>,
    died_before: Option<SystemTime>,
    min_attempts: u32,
    payload_contains: Vec<u8>,
    correlation_id: String,
    trace_id: String,
}

impl Filter {
    /// Checks a wire filter (absent: empty).
    pub(crate) fn from_pb(f: Option<&pb::DeadLetterFilter>) -> Result<Filter, Status> {
        let Some(f) = f else {
            return Ok(Filter::default());
        };
        let mut reasons = Vec::new();
        for r in &f.reasons {
            match pb::DeadReasonKind::try_from(*r) {
                Ok(pb::DeadReasonKind::Unspecified) => {}
                Ok(kind) => reasons.push(kind),
                Err(_) => {
                    return Err(Status::invalid_argument(format!(
                        "`filter.reasons` has {r}, which is not a DeadReasonKind"
                    )))
                }
            }
        }
        Ok(Filter {
            ids: f.ids.clone(),
            topics: f.topics.clone(),
            topic_prefix: f.topic_prefix.clone(),
            reasons,
            died_after: f
                .died_after
                .as_ref()
                .map(|t| convert::system_time(t, "filter.died_after"))
                .transpose()?,
            died_before: f
                .died_before
                .as_ref()
                .map(|t| convert::system_time(t, "filter.died_before"))
                .transpose()?,
            min_attempts: f.min_attempts,
            payload_contains: f.payload_contains.to_vec(),
            correlation_id: f.correlation_id.clone(),
            trace_id: f.trace_id.clone(),
        })
    }

    /// Whether no condition is set (it matches every dead letter).
    pub(crate) fn is_empty(&self) -> bool {
        self.ids.is_empty()
            && self.topics.is_empty()
            && self.topic_prefix.is_empty()
            && self.reasons.is_empty()
            && self.died_after.is_none()
            && self.died_before.is_none()
            && self.min_attempts == 0
            && self.payload_contains.is_empty()
            && self.correlation_id.is_empty()
            && self.trace_id.is_empty()
    }

    /// Whether `d` passes every condition.
    pub(crate) fn matches(&self, d: &DeadLetterMessage) -> bool {
        let m = &d.message;
        (self.ids.is_empty() || self.ids.contains(&m.id))
            && (self.topics.is_empty() || self.topics.iter().any(|t| m.topic == t.as_str()))
            && m.topic.as_str().starts_with(&self.topic_prefix)
            && (self.reasons.is_empty()
                || self.reasons.contains(&convert::dead_reason_kind(&d.reason)))
            && self.died_after.is_none_or(|t| d.died_at >= t)
            && self.died_before.is_none_or(|t| d.died_at < t)
            && d.attempts >= self.min_attempts
            && contains(m.payload.as_bytes(), &self.payload_contains)
            && (self.correlation_id.is_empty()
                || m.metadata.correlation_id.as_deref() == Some(self.correlation_id.as_str()))
            && (self.trace_id.is_empty()
                || m.metadata.trace_id.as_deref() == Some(self.trace_id.as_str()))
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// Refuses a bulk operation whose scope is unclear: an empty filter without `all`, or a
/// filter together with `all`.
pub(crate) fn check_scope(filter: &Filter, all: bool, rpc: &str) -> Result<(), Status> {
    match (filter.is_empty(), all) {
        (true, false) => Err(Status::invalid_argument(format!(
            "{rpc} got an empty filter; set a filter (ids, topics, reasons, ...) or `all` \
             to mean every dead letter"
        ))),
        (false, true) => Err(Status::invalid_argument(format!(
            "{rpc} got both a filter and `all`; give one of them"
        ))),
        _ => Ok(()),
    }
}

/// Runs `work` on a blocking thread: scans of dead letters and their payloads stay off the
/// runtime's workers.
async fn off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Status::internal(format!("a dead-letter scan failed: {e}")))
}

/// The bus's dead letters matching `filter`, oldest first (ties by id). For the admin bulk
/// operations: every match, scanned off the runtime.
pub(crate) async fn matching(
    bus: &EventBus,
    filter: Filter,
) -> Result<Vec<DeadLetterMessage>, Status> {
    let all = bus.dead_letters().await.map_err(core)?;
    off_runtime(move || {
        let mut matched: Vec<DeadLetterMessage> =
            all.into_iter().filter(|d| filter.matches(d)).collect();
        sort(&mut matched);
        matched
    })
    .await
}

/// The dead letter with message id `id`, looked for off the runtime.
pub(crate) async fn find(bus: &EventBus, id: &str) -> Result<DeadLetterMessage, Status> {
    let all = bus.dead_letters().await.map_err(core)?;
    let wanted = id.to_owned();
    off_runtime(move || all.into_iter().find(|d| d.message.id == wanted))
        .await?
        .ok_or_else(|| core(event_base_core::CoreError::NotFound(id.to_owned())))
}

/// Oldest first, ties by id: the order of pages.
fn sort(letters: &mut [DeadLetterMessage]) {
    letters.sort_by(|a, b| position(a).cmp(&position(b)));
}

/// Where a dead letter sits in the order of pages.
fn position(d: &DeadLetterMessage) -> (u128, &str) {
    let nanos = d
        .died_at
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos();
    (nanos, d.message.id.as_str())
}

/// The token of the page after `last`: its position, as `<nanos>:<id>` in hex.
pub(crate) fn page_token_after(last: &DeadLetterMessage) -> String {
    let (nanos, id) = position(last);
    let text = format!("{nanos}:{id}");
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The position a page token names.
fn parse_page_token(token: &str) -> Result<(u128, String), Status> {
    let bad = || {
        Status::invalid_argument(
            "`page_token` is not a token this server gave; pass `next_page_token` of the \
             previous page unchanged, or leave it empty for the first page",
        )
    };
    if !token.len().is_multiple_of(2) {
        return Err(bad());
    }
    let bytes: Vec<u8> = (0..token.len())
        .step_by(2)
        .map(|i| {
            token
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let (nanos, id) = text.split_once(':').ok_or_else(bad)?;
    Ok((nanos.parse().map_err(|_| bad())?, id.to_owned()))
}

/// How much of each payload a list returns.
pub(crate) fn payload_cut(view: i32, preview_bytes: u32) -> Result<convert::PayloadCut, Status> {
    let preview = if preview_bytes == 0 {
        DEFAULT_PREVIEW_BYTES
    } else {
        preview_bytes as usize
    };
    match pb::PayloadView::try_from(view) {
        Ok(pb::PayloadView::None) => Ok(convert::PayloadCut::Nothing),
        Ok(pb::PayloadView::Unspecified | pb::PayloadView::Preview) => {
            Ok(convert::PayloadCut::Preview(preview))
        }
        Ok(pb::PayloadView::Full) => Ok(convert::PayloadCut::Whole),
        Err(_) => Err(Status::invalid_argument(format!(
            "`payload_view` {view} is not a PayloadView; use NONE, PREVIEW or FULL"
        ))),
    }
}

/// One page of dead letters, examining at most [`MAX_DEAD_LETTERS_SCANNED`] of them.
pub(crate) async fn list(
    bus: &EventBus,
    req: &pb::ListDeadLettersRequest,
) -> Result<pb::ListDeadLettersResponse, Status> {
    let filter = Filter::from_pb(req.filter.as_ref())?;
    let cut = payload_cut(req.payload_view, req.preview_bytes)?;
    let page_size = page_size(req.page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)?;
    let after = if req.page_token.is_empty() {
        None
    } else {
        Some(parse_page_token(&req.page_token)?)
    };
    let all = bus.dead_letters().await.map_err(core)?;
    off_runtime(move || {
        page(
            all,
            &filter,
            after,
            cut,
            page_size,
            MAX_DEAD_LETTERS_SCANNED,
        )
    })
    .await
}

/// The page of `all` after position `after`: the first `page_size` letters that match
/// `filter` (within [`PAGE_BYTE_BUDGET`]), examining at most `scan` letters.
fn page(
    mut all: Vec<DeadLetterMessage>,
    filter: &Filter,
    after: Option<(u128, String)>,
    cut: convert::PayloadCut,
    page_size: usize,
    scan: usize,
) -> pb::ListDeadLettersResponse {
    sort(&mut all);
    // Every letter is examined only when there are no more than `scan`: then the count of
    // matches is known.
    let total_size = if all.len() <= scan {
        let matched = all.iter().filter(|d| filter.matches(d)).count();
        i32::try_from(matched).unwrap_or(i32::MAX)
    } else {
        -1
    };
    // The first dead letter after the token's position: letters purged in between shift
    // nothing.
    let start = after.map_or(0, |(nanos, id)| {
        all.partition_point(|d| position(d) <= (nanos, id.as_str()))
    });
    let window = all.get(start..).unwrap_or_default();
    let window = window.get(..scan).unwrap_or(window);
    let mut page = Vec::new();
    let mut bytes = 0usize;
    let mut last_listed = None;
    let mut full = false;
    for d in window.iter().filter(|d| filter.matches(d)) {
        if page.len() == page_size {
            full = true;
            break;
        }
        let item = convert::dead_letter(d, cut);
        let size = prost::Message::encoded_len(&item);
        if !page.is_empty() && bytes + size > PAGE_BYTE_BUDGET {
            full = true;
            break;
        }
        bytes += size;
        page.push(item);
        last_listed = Some(d);
    }
    let next_page_token = if full {
        // More matches wait after the last one listed.
        last_listed.map(page_token_after).unwrap_or_default()
    } else if start + window.len() < all.len() {
        // The scan stopped before the end: go on after the last letter examined.
        window.last().map(page_token_after).unwrap_or_default()
    } else {
        String::new()
    };
    pb::ListDeadLettersResponse {
        dead_letters: page,
        next_page_token,
        total_size,
    }
}

/// A page size: `0` is the default, more than `max` is refused.
pub(crate) fn page_size(asked: i32, default: usize, max: usize) -> Result<usize, Status> {
    match asked {
        0 => Ok(default),
        n if n < 0 => Err(Status::invalid_argument(format!(
            "`page_size` is {n}; give 1 to {max}, or 0 for the default ({default})"
        ))),
        n if n as usize > max => Err(Status::invalid_argument(format!(
            "`page_size` is {n}, over the limit of {max}; ask for fewer and page on"
        ))),
        n => Ok(n as usize),
    }
}

/// Purges the dead letters a request names (or counts them, in a dry run).
pub(crate) async fn purge(
    bus: &EventBus,
    req: &pb::PurgeDeadLettersRequest,
) -> Result<pb::PurgeDeadLettersResponse, Status> {
    let filter = Filter::from_pb(req.filter.as_ref())?;
    check_scope(&filter, req.all, "PurgeDeadLetters")?;
    let targets = matching(bus, filter).await?;
    let mut ids = Vec::new();
    let mut purged = 0u64;
    for d in &targets {
        if !req.dry_run {
            match bus.delete_dead_letter(&d.message.id).await {
                Ok(_) => {}
                // Replayed or purged by someone else meanwhile: not ours to count.
                Err(event_base_core::CoreError::NotFound(_)) => continue,
                Err(e) => return Err(core(e)),
            }
        }
        purged += 1;
        if ids.len() < PURGE_IDS_LISTED {
            ids.push(d.message.id.clone());
        }
    }
    Ok(pb::PurgeDeadLettersResponse {
        purged,
        ids,
        dry_run: req.dry_run,
    })
}

/// What an edited replay changes.
#[derive(Debug, Default)]
pub(crate) struct Edit {
    pub(crate) payload: Option<event_base_core::Bytes>,
    pub(crate) topic: Option<String>,
    pub(crate) deliver_at: Option<SystemTime>,
}

impl Edit {
    pub(crate) fn is_empty(&self) -> bool {
        self.payload.is_none() && self.topic.is_none() && self.deliver_at.is_none()
    }
}

/// Replays one dead letter; with an edit, as a new message sent before the dead letter is
/// removed. Returns the id sent.
pub(crate) async fn replay_one(bus: &EventBus, id: &str, edit: Edit) -> Result<MessageId, Status> {
    if edit.is_empty() {
        return bus.replay_dead_letter(id).await.map_err(core);
    }
    let old = find(bus, id).await?.message;
    let topic = edit.topic.unwrap_or_else(|| old.topic.as_str().to_owned());
    let payload = edit.payload.map_or(old.payload.clone(), Into::into);
    let mut fresh = EMessage::new(
        topic.as_str(),
        payload,
        old.delivery_mode,
        old.to_worker.clone(),
    )
    .with_causation_id(old.id.clone());
    if let Some(t) = &old.metadata.trace_id {
        fresh = fresh.with_trace_id(t.clone());
    }
    if let Some(c) = &old.metadata.correlation_id {
        fresh = fresh.with_correlation_id(c.clone());
    }
    if let Some(s) = &old.metadata.source {
        fresh = fresh.with_source(s.clone());
    }
    if let Some(at) = edit.deliver_at {
        fresh = fresh.with_deliver_at(at);
    }
    let sent = bus.send(topic.as_str(), fresh).await.map_err(core)?;
    // Sent: now the dead letter may go. Gone already (replayed meanwhile) is fine.
    match bus.delete_dead_letter(id).await {
        Ok(_) | Err(event_base_core::CoreError::NotFound(_)) => Ok(sent),
        Err(e) => Err(core(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_tokens_round_trip() {
        let d = DeadLetterMessage {
            message: EMessage::standard("t", b"x".to_vec()).with_id("m:1"),
            reason: event_base_core::DeadReason::Explicit,
            attempts: 1,
            died_at: UNIX_EPOCH + Duration::from_nanos(1_234_567_890),
            handlers: vec![],
        };
        let token = page_token_after(&d);
        assert_eq!(
            parse_page_token(&token).unwrap(),
            (1_234_567_890, "m:1".to_owned())
        );
        assert!(parse_page_token("zz").is_err());
        assert!(parse_page_token("abc").is_err());
    }

    fn letters(n: u64) -> Vec<DeadLetterMessage> {
        (0..n)
            .map(|i| DeadLetterMessage {
                message: EMessage::standard("t", format!("p{i}").into_bytes())
                    .with_id(format!("m{i}")),
                reason: event_base_core::DeadReason::Explicit,
                attempts: 1,
                died_at: UNIX_EPOCH + Duration::from_secs(i),
                handlers: vec![],
            })
            .collect()
    }

    fn ids(page: &pb::ListDeadLettersResponse) -> Vec<String> {
        page.dead_letters
            .iter()
            .filter_map(|d| d.message.as_ref().map(|m| m.id.clone()))
            .collect()
    }

    #[test]
    fn a_page_examines_at_most_the_scan_limit_and_says_where_to_go_on() {
        // Ten letters, only the last two match; three examined per call.
        let filter = Filter {
            ids: vec!["m8".into(), "m9".into()],
            ..Filter::default()
        };
        let cut = convert::PayloadCut::Nothing;
        let mut after = None;
        let mut seen = Vec::new();
        let mut calls = 0;
        loop {
            calls += 1;
            let page = page(letters(10), &filter, after, cut, 50, 3);
            assert!(page.dead_letters.len() <= 3);
            assert_eq!(page.total_size, -1, "more letters than one call examines");
            seen.extend(ids(&page));
            if page.next_page_token.is_empty() {
                break;
            }
            after = Some(parse_page_token(&page.next_page_token).unwrap());
        }
        assert_eq!(seen, ["m8", "m9"]);
        assert_eq!(calls, 4, "10 letters, 3 a call");

        // Within the limit: one call, every match counted, as before.
        let page = page(letters(10), &filter, None, cut, 50, 10);
        assert_eq!(ids(&page), ["m8", "m9"]);
        assert_eq!(page.total_size, 2);
        assert!(page.next_page_token.is_empty());
    }

    #[test]
    fn a_full_page_goes_on_after_its_last_letter() {
        let cut = convert::PayloadCut::Nothing;
        let first = page(letters(5), &Filter::default(), None, cut, 2, 100);
        assert_eq!(ids(&first), ["m0", "m1"]);
        assert_eq!(first.total_size, 5);
        let after = Some(parse_page_token(&first.next_page_token).unwrap());
        let second = page(letters(5), &Filter::default(), after, cut, 2, 100);
        assert_eq!(ids(&second), ["m2", "m3"]);
        let after = Some(parse_page_token(&second.next_page_token).unwrap());
        let last = page(letters(5), &Filter::default(), after, cut, 2, 100);
        assert_eq!(ids(&last), ["m4"]);
        assert!(last.next_page_token.is_empty());
    }

    #[test]
    fn page_sizes() {
        assert_eq!(page_size(0, 50, 500).unwrap(), 50);
        assert_eq!(page_size(500, 50, 500).unwrap(), 500);
        assert!(page_size(501, 50, 500).is_err());
        assert!(page_size(-1, 50, 500).is_err());
    }
}
