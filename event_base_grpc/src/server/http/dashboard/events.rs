//! `GET /api/events`: server-sent events (`text/event-stream`), an `overview` event at once and
//! then every [`EVENTS_EVERY`], each the JSON of `GET /api/overview`. The stream ends when the
//! server stops; the page reconnects.
//!
//! Why a snapshot every second rather than the `Watch` stream: the page's figures are the
//! bus's counters, and rates need them sampled at a known pace anyway; a snapshot costs no
//! I/O and does not depend on the watch feed's handlers being on the bus.
//!
//! The token comes in the `Authorization` header, as for every endpoint: the page reads the
//! stream with `fetch` (a browser's `EventSource` cannot send headers), so the token is never
//! in a URL, where proxies and access logs would keep it.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use tokio::time::{interval, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::server::http::gate::Reader;
use crate::server::http::HttpState;

/// How often the page gets a new overview.
pub(super) const EVENTS_EVERY: Duration = Duration::from_secs(1);

/// `GET /api/events`.
pub(super) async fn events(
    _reader: Reader,
    State(state): State<HttpState>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut every = interval(EVENTS_EVERY);
    every.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let stop = state.api.stop.clone();
    let stream = futures_util::stream::unfold(
        (state, every, stop),
        |(state, mut every, stop): (HttpState, Interval, CancellationToken)| async move {
            tokio::select! {
                () = stop.cancelled() => None,
                _ = every.tick() => {
                    let data = super::overview::overview(&state.api.bus).to_string();
                    let event = Event::default().event("overview").data(data);
                    Some((Ok(event), (state, every, stop)))
                }
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}
