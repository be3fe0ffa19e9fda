//! `GET /`: the page, `page.html`, embedded in the binary. It holds no data, so it is served
//! without a token; everything it shows comes from the `/api/` endpoints, which check it.
//!
//! Served with a Content-Security-Policy that lets the page run its own inline script (by
//! its SHA-256 digest) and talk to this server only: no other script, no other origin, no
//! framing.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// The page.
const PAGE: &str = include_str!("page.html");

/// The page's Content-Security-Policy, with the digest of its script.
static POLICY: LazyLock<String> = LazyLock::new(|| {
    let script = PAGE
        .split_once("<script>")
        .and_then(|(_, rest)| rest.split_once("</script>"))
        .map_or("", |(script, _)| script);
    let digest = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(script));
    format!(
        "default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; \
         connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'"
    )
});

/// `GET /`.
pub(super) async fn page() -> Response {
    (
        [
            (header::CONTENT_SECURITY_POLICY, POLICY.as_str()),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        Html(PAGE),
    )
        .into_response()
}
