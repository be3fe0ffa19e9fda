//! Dead letters on the dashboard, through the gRPC service's own code (`crate::dlq`,
//! `AdminApi`): the same filters, stable pages, scan cap and per-item replay rules.
//!
//! | endpoint | does | gRPC twin |
//! |---|---|---|
//! | `GET api/dead-letters?id=&topic=&reason=&text=&page_size=&page_token=` | one page (default 50, at most 500), oldest first | `ListDeadLetters` |
//! | `GET api/dead-letter/{id}` | one, whole payload | `GetDeadLetter` |
//! | `POST api/dead-letter/{id}/replay` `{payload?, payload_encoding?, topic?, delay_ms?}` | replay, edited if anything is given | `ReplayDeadLetter` |
//! | `POST api/dead-letter/{id}/delete` `{}` | delete one | `PurgeDeadLetters` with its id |
//! | `POST api/dead-letters/replay` `{filter?, all?, dry_run?}` | replay every match | `ReplayDeadLetters` |
//! | `POST api/dead-letters/purge` `{filter?, all?, dry_run?}` | delete every match | `PurgeDeadLetters` |
//!
//! A filter is `{id, topic, reason, text}`: `topic` is a prefix, `reason` a kind
//! (`explicit`, `max_retries_exceeded`, `timeout`, `no_handler`, `unknown_worker`, `other`),
//! `text` bytes the payload contains. A bulk action with an empty filter needs `all: true`,
//! as over gRPC. A list examines at most `MAX_DEAD_LETTERS_SCANNED` dead letters per page
//! (then `total` is `null` and the page may be short, with a token to go on).
//!
//! One (`dead-letter/{id}`) and many (`dead-letters`) have paths of their own, so no id can
//! be taken for an action's name.

use axum::extract::{Path, Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};

use super::answer::{ok, Answer, Failure};
use crate::pb;
use crate::server::http::gate::{Admin, Reader};
use crate::server::http::HttpState;

/// Failures a bulk replay lists in its answer (it counts them all).
const FAILURES_LISTED: usize = 20;
/// Payload bytes of each list item's preview.
const PREVIEW_BYTES: u32 = 80;

/// The routes of dead letters.
pub(super) fn routes() -> Router<HttpState> {
    Router::new()
        .route("/api/dead-letters", get(list))
        .route("/api/dead-letters/replay", post(replay_matching))
        .route("/api/dead-letters/purge", post(purge))
        .route("/api/dead-letter/{id}", get(show))
        .route("/api/dead-letter/{id}/replay", post(replay))
        .route("/api/dead-letter/{id}/delete", post(delete))
}

/// A search, as the page's form and query string give it; empty fields are not conditions.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Search {
    id: String,
    topic: String,
    reason: String,
    text: String,
}

impl Search {
    /// The wire filter, or `None` when no condition is set.
    fn filter(&self) -> Result<Option<pb::DeadLetterFilter>, Failure> {
        let mut f = pb::DeadLetterFilter::default();
        if !self.id.trim().is_empty() {
            f.ids.push(self.id.trim().to_owned());
        }
        f.topic_prefix = self.topic.trim().to_owned();
        if !self.reason.is_empty() {
            let name = format!("DEAD_REASON_KIND_{}", self.reason.to_ascii_uppercase());
            let kind = pb::DeadReasonKind::from_str_name(&name)
                .filter(|k| *k != pb::DeadReasonKind::Unspecified)
                .ok_or_else(|| {
                    Failure::bad_request(format!(
                        "`reason` is `{}`; give one of explicit, max_retries_exceeded, \
                         timeout, no_handler, unknown_worker, other",
                        self.reason
                    ))
                })?;
            f.reasons.push(kind as i32);
        }
        f.payload_contains = self.text.clone().into_bytes().into();
        let empty = f.ids.is_empty()
            && f.topic_prefix.is_empty()
            && f.reasons.is_empty()
            && f.payload_contains.is_empty();
        Ok((!empty).then_some(f))
    }
}

/// The query string of a list: a search and where the page starts.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ListQuery {
    id: String,
    topic: String,
    reason: String,
    text: String,
    page_size: i32,
    page_token: String,
}

/// `GET api/dead-letters`: one page.
async fn list(_reader: Reader, State(state): State<HttpState>, query: Query<ListQuery>) -> Answer {
    let Query(q) = query;
    let search = Search {
        id: q.id,
        topic: q.topic,
        reason: q.reason,
        text: q.text,
    };
    let req = pb::ListDeadLettersRequest {
        filter: search.filter()?,
        page_size: q.page_size,
        page_token: q.page_token,
        payload_view: pb::PayloadView::Preview as i32,
        preview_bytes: PREVIEW_BYTES,
    };
    let page = crate::dlq::list(&state.api.bus, &req).await?;
    ok(json!({
        "dead_letters": page.dead_letters.iter().map(item).collect::<Vec<_>>(),
        "next_page_token": page.next_page_token,
        "total": (page.total_size >= 0).then_some(page.total_size),
        "scan_limit": crate::MAX_DEAD_LETTERS_SCANNED,
    }))
}

/// `GET api/dead-letter/{id}`: one, with its whole payload.
async fn show(_reader: Reader, State(state): State<HttpState>, Path(id): Path<String>) -> Answer {
    let answer = state
        .api
        .dead_letter(&pb::GetDeadLetterRequest { id })
        .await?;
    let d = answer.dead_letter.unwrap_or_default();
    let mut value = item(&d);
    let m = d.message.unwrap_or_default();
    let meta = m.metadata.unwrap_or_default();
    let (encoding, payload) = match std::str::from_utf8(&m.payload) {
        Ok(text) => ("utf8", text.to_owned()),
        Err(_) => (
            "base64",
            base64::engine::general_purpose::STANDARD.encode(&m.payload),
        ),
    };
    if let Some(object) = value.as_object_mut() {
        object.insert("payload".into(), payload.into());
        object.insert("payload_encoding".into(), encoding.into());
        object.insert("trace_id".into(), meta.trace_id.into());
        object.insert("correlation_id".into(), meta.correlation_id.into());
        object.insert("causation_id".into(), meta.causation_id.into());
        object.insert("source".into(), meta.source.into());
        object.insert("to_worker".into(), m.to_worker.into());
    }
    ok(value)
}

/// A dead letter as a list shows it: the payload as a text preview (bytes that are not UTF-8
/// shown as `�`).
fn item(d: &pb::DeadLetter) -> Value {
    let default = pb::Message::default();
    let m = d.message.as_ref().unwrap_or(&default);
    let reason = d.reason.clone().unwrap_or_default();
    let kind = pb::DeadReasonKind::try_from(reason.kind)
        .map(|k| {
            k.as_str_name()
                .trim_start_matches("DEAD_REASON_KIND_")
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    let died_at_ms = d
        .died_at
        .map_or(0, |t| t.seconds * 1000 + i64::from(t.nanos) / 1_000_000);
    json!({
        "id": m.id,
        "topic": m.topic,
        "reason": kind,
        "reason_text": reason.description,
        "attempts": d.attempts,
        "died_at_ms": died_at_ms,
        "handlers": d.handlers,
        "preview": String::from_utf8_lossy(&m.payload),
        "payload_size": m.payload_size,
        "payload_truncated": m.payload_truncated,
    })
}

/// What an edited replay changes; nothing given: replayed as it is.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Edit {
    payload: Option<String>,
    /// `utf8` (default) or `base64`: how `payload` is written.
    payload_encoding: Option<String>,
    topic: Option<String>,
    delay_ms: Option<u64>,
}

impl Edit {
    fn payload(&self) -> Result<Option<event_base_core::Bytes>, Failure> {
        let Some(text) = &self.payload else {
            return Ok(None);
        };
        match self.payload_encoding.as_deref().unwrap_or("utf8") {
            "utf8" => Ok(Some(text.clone().into_bytes().into())),
            "base64" => base64::engine::general_purpose::STANDARD
                .decode(text)
                .map(|b| Some(b.into()))
                .map_err(|e| {
                    Failure::bad_request(format!("`payload` is not base64 ({e}); fix it"))
                }),
            other => Err(Failure::bad_request(format!(
                "`payload_encoding` is `{other}`; give utf8 or base64"
            ))),
        }
    }
}

/// `POST api/dead-letter/{id}/replay`: as it is, or edited.
async fn replay(
    _admin: Admin,
    State(state): State<HttpState>,
    Path(id): Path<String>,
    Json(edit): Json<Edit>,
) -> Answer {
    let schedule = edit.delay_ms.filter(|ms| *ms > 0).map(|ms| {
        pb::replay_dead_letter_request::Schedule::Delay(prost_types::Duration {
            seconds: (ms / 1000) as i64,
            nanos: ((ms % 1000) * 1_000_000) as i32,
        })
    });
    let req = pb::ReplayDeadLetterRequest {
        id,
        payload: edit.payload()?,
        topic: edit.topic.clone().filter(|t| !t.is_empty()),
        schedule,
    };
    let answer = state.api.replay_single(req).await?;
    ok(json!({"message_id": answer.message_id, "edited": answer.edited}))
}

/// `POST api/dead-letter/{id}/delete`.
async fn delete(
    _admin: Admin,
    State(state): State<HttpState>,
    Path(id): Path<String>,
    Json(_): Json<Value>,
) -> Answer {
    let req = pb::PurgeDeadLettersRequest {
        filter: Some(pb::DeadLetterFilter {
            ids: vec![id.clone()],
            ..Default::default()
        }),
        all: false,
        dry_run: false,
    };
    let answer = crate::dlq::purge(&state.api.bus, &req).await?;
    if answer.purged == 0 {
        return Err(Failure(tonic::Status::not_found(format!(
            "no dead letter `{id}`: replayed or deleted already? list them again"
        ))));
    }
    ok(json!({"deleted": id}))
}

/// A bulk action: a search, or `all`; with `dry_run`, only counted.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Bulk {
    filter: Search,
    all: bool,
    dry_run: bool,
}

/// `POST api/dead-letters/replay`: replays every match, one at a time, to the end.
async fn replay_matching(
    _admin: Admin,
    State(state): State<HttpState>,
    Json(bulk): Json<Bulk>,
) -> Answer {
    let req = pb::ReplayDeadLettersRequest {
        filter: bulk.filter.filter()?,
        all: bulk.all,
        limit: 0,
        max_per_second: 0.0,
        dry_run: bulk.dry_run,
    };
    let mut steps = state.api.replay_bulk(req).await?;
    let mut last = pb::ReplayDeadLettersResponse::default();
    let mut failures = Vec::new();
    while let Some(step) = steps.next().await {
        let step = step?;
        if let Some(f) = &step.failure {
            if failures.len() < FAILURES_LISTED {
                failures.push(json!({"id": f.id, "code": f.code, "error": f.message}));
            }
        }
        last = step;
    }
    ok(json!({
        "matched": last.matched,
        "replayed": last.replayed,
        "failed": last.failed,
        "failures": failures,
        "dry_run": last.dry_run,
    }))
}

/// `POST api/dead-letters/purge`: deletes every match (or counts them).
async fn purge(_admin: Admin, State(state): State<HttpState>, Json(bulk): Json<Bulk>) -> Answer {
    let req = pb::PurgeDeadLettersRequest {
        filter: bulk.filter.filter()?,
        all: bulk.all,
        dry_run: bulk.dry_run,
    };
    let answer = crate::dlq::purge(&state.api.bus, &req).await?;
    ok(json!({"purged": answer.purged, "dry_run": answer.dry_run}))
}
