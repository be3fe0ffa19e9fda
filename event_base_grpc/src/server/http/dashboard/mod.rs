//! The web dashboard: one static page (`page.html`: HTML, inline CSS and plain script, no
//! build step, nothing fetched from elsewhere) and the JSON it reads, on the server's HTTP
//! listener.
//!
//! | path | scope | what |
//! |---|---|---|
//! | `GET /` | none | the page (it holds no data; it asks for the token, or reads `#token=`) |
//! | `GET /api/whoami` | read | the caller's scope: the page hides its buttons for a read token |
//! | `GET /api/overview` | read | status, WAL, and the topics, subscriptions and workers tables (`overview.rs`) |
//! | `GET /api/events` | read | the overview again every second, as server-sent events (`events.rs`) |
//! | `GET /api/nodes` | read | the nodes sharing the queue backend (Redis), or `null` (`nodes.rs`) |
//! | dead letters | read / admin | list, show, replay (edited), delete, replay and purge matches (`dead_letters.rs`) |
//! | `POST /api/workers/{name}/stop` | admin | stop one worker (`workers.rs`) |
//! | `POST /api/subscriptions/{topic}/{handler}/pause`, `/resume` | admin | pause or resume one handler of a topic (`subscriptions.rs`) |
//!
//! Reads take the read or the admin token; actions (`POST`) take the admin token, as JSON,
//! from the page's own origin (`gate.rs`). Each table is described by the server
//! (`table.rs`: columns, rows, and the buttons of each row), so the page's script draws them
//! all the same way; what a table shows is decided in its own file (`topics.rs`,
//! `subscriptions.rs`, `workers.rs`).
//!
//! May use: the bus and the gRPC service's code (`AdminApi`, `crate::dlq`, `crate::convert`),
//! never a second copy of what they do.

mod answer;
mod dead_letters;
mod events;
mod nodes;
mod overview;
mod page;
mod subscriptions;
mod table;
mod topics;
mod workers;

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use event_base_core::constant::SYSTEM_PREFIX;
use serde_json::json;

use super::gate::Reader;
use super::HttpState;
use answer::{ok, Answer};

/// Every route of the dashboard.
pub(super) fn routes() -> Router<HttpState> {
    Router::new()
        .route("/", get(page::page))
        .route("/api/whoami", get(whoami))
        .route("/api/overview", get(overview))
        .route("/api/events", get(events::events))
        .route("/api/nodes", get(nodes::nodes))
        .merge(dead_letters::routes())
        .merge(workers::routes())
        .merge(subscriptions::routes())
}

/// Whether `topic` is one of the bus's own (`_system.`): left off the tables.
fn is_system(topic: &str) -> bool {
    topic.starts_with(SYSTEM_PREFIX)
}

/// `GET /api/whoami`: the caller's scope, and whether the server takes no token at all.
async fn whoami(Reader(scope): Reader, State(state): State<HttpState>) -> Answer {
    ok(json!({
        "scope": scope.name(),
        "open": state.tokens.is_open(),
    }))
}

/// `GET /api/overview`.
async fn overview(_reader: Reader, State(state): State<HttpState>) -> Answer {
    ok(overview::overview(&state.api.bus))
}
