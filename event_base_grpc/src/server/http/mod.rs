//! The server's HTTP/1.1 listener ([`GrpcServerBuilder::http_addr`](super::GrpcServerBuilder::http_addr)):
//! `GET /metrics` in the Prometheus text format (`metrics.rs`), and the web dashboard
//! (`dashboard/`: one static page at `/`, JSON and server-sent events under `/api/`).
//!
//! A port of its own rather than beside gRPC: the gRPC port speaks HTTP/2 only (and TLS when
//! configured), while Prometheus scrapes and browsers browse over HTTP/1.1, usually in plain
//! text on an internal network. Keeping them apart leaves the gRPC transport, its limits and
//! interceptors as they are, and lets the two be exposed (or firewalled) separately.
//!
//! Same tokens as gRPC, checked by the same code (`Tokens::scope_of_header`, in `gate.rs`):
//! with tokens set, every endpoint but the page itself needs `Authorization: Bearer <token>`
//! and answers `401` otherwise; reads take the read (or admin) token, the dashboard's actions
//! the admin token (`403` for a read token). Without tokens everything is open (and the
//! server listens on loopback only, unless `allow_unauthenticated`).
//!
//! What a request may use here: the bus, through the gRPC service's own code
//! (`AdminApi`, `crate::dlq`), so an answer means the same on both transports.

mod dashboard;
mod gate;
mod metrics;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::Tokens;
use crate::server::api::AdminApi;

/// What the handlers need: the admin service's code (the bus, the watch feed and the
/// server's stop signal) and the tokens.
#[derive(Clone)]
pub(crate) struct HttpState {
    api: AdminApi,
    tokens: Tokens,
    /// An open server on loopback: only requests to a loopback `Host` (see `gate.rs`).
    loopback_hosts_only: bool,
}

/// What the HTTP listener serves, and to whom.
#[derive(Debug, Clone)]
pub(crate) struct HttpSettings {
    /// The tokens (those of gRPC).
    pub(crate) tokens: Tokens,
    /// Whether the server was told its network is trusted (`allow_unauthenticated`).
    pub(crate) allow_unauthenticated: bool,
    /// Whether to serve the dashboard besides `/metrics`.
    pub(crate) dashboard: bool,
}

/// Serves `listener` until `stop` is cancelled; connections under way finish first (the
/// dashboard's event streams end on `stop`). Without `settings.dashboard`, `/metrics` only.
pub(crate) async fn serve(
    listener: TcpListener,
    api: AdminApi,
    settings: HttpSettings,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let mut app = metrics::routes();
    if settings.dashboard {
        app = app.merge(dashboard::routes());
    }
    let state = HttpState {
        api,
        loopback_hosts_only: settings.tokens.is_open() && !settings.allow_unauthenticated,
        tokens: settings.tokens,
    };
    let app: Router = app.with_state(state);
    axum::serve(listener, app)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}
