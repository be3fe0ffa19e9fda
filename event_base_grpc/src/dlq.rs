//! Dead letters as operators see them: a [`Filter`] (every set condition must hold), stable
//! pages ordered by (time of death, id), and the per-item rules of the bulk operations.
//!
//! Bulk operations never take "everything" by accident: an empty filter is refused unless
//! the request says `all` (a filtered "delete all" that deleted everything is a classic
//! operator accident). Each replay is per item: the message is sent first, and only then is
//! the dead letter gone, so a replay stopped half-way loses nothing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use event_base_core::{DeadLetterMessage, EMessage, EventBus, MessageId};
use tonic::Status;

use crate::convert;
use crate::pb;
use crate::status::core;

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

/// The bus's dead letters matching `filter`, oldest first (ties by id).
pub(crate) async fn matching(
    bus: &EventBus,
    filter: &Filter,
) -> Result<Vec<DeadLetterMessage>, Status> {
    let mut all: Vec<DeadLetterMessage> = bus
        .dead_letters()
        .await
        .map_err(core)?
        .into_iter()
        .filter(|d| filter.matches(d))
        .collect();
    all.sort_by(|a, b| position(a).cmp(&position(b)));
    Ok(all)
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

/// One page of dead letters.
pub(crate) async fn list(
    bus: &EventBus,
    req: &pb::ListDeadLettersRequest,
) -> Result<pb::ListDeadLettersResponse, Status> {
    let filter = Filter::from_pb(req.filter.as_ref())?;
    let cut = payload_cut(req.payload_view, req.preview_bytes)?;
    let page_size = page_size(req.page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)?;
    let all = matching(bus, &filter).await?;
    let total_size = i32::try_from(all.len()).unwrap_or(i32::MAX);
    let start = if req.page_token.is_empty() {
        0
    } else {
        let (nanos, id) = parse_page_token(&req.page_token)?;
        // The first dead letter after the token's position: letters purged in between
        // shift nothing.
        all.partition_point(|d| position(d) <= (nanos, id.as_str()))
    };
    let mut page = Vec::new();
    let mut bytes = 0usize;
    let mut last = None;
    for d in all.iter().skip(start).take(page_size) {
        let item = convert::dead_letter(d, cut);
        let size = prost::Message::encoded_len(&item);
        if !page.is_empty() && bytes + size > PAGE_BYTE_BUDGET {
            break;
        }
        bytes += size;
        page.push(item);
        last = Some(d);
    }
    let more = start + page.len() < all.len();
    Ok(pb::ListDeadLettersResponse {
        dead_letters: page,
        next_page_token: match (more, last) {
            (true, Some(last)) => page_token_after(last),
            _ => String::new(),
        },
        total_size,
    })
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
    let targets = matching(bus, &filter).await?;
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
    let dead = bus
        .dead_letters()
        .await
        .map_err(core)?
        .into_iter()
        .find(|d| d.message.id == id)
        .ok_or_else(|| core(event_base_core::CoreError::NotFound(id.to_owned())))?;
    let old = dead.message;
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

    #[test]
    fn page_sizes() {
        assert_eq!(page_size(0, 50, 500).unwrap(), 50);
        assert_eq!(page_size(500, 50, 500).unwrap(), 500);
        assert!(page_size(501, 50, 500).is_err());
        assert!(page_size(-1, 50, 500).is_err());
    }
}
