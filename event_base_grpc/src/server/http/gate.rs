//! Who may do what on the HTTP listener: the extractors [`Reader`] (any known token: `/metrics`
//! and every dashboard read) and [`Admin`] (the admin token: the dashboard's actions), both
//! over `Tokens::scope_of_header`, the code the gRPC interceptor uses.
//!
//! Refusals are plain text that says what to send: `401` with a `WWW-Authenticate: Bearer`
//! challenge (no token, not a bearer token, an unknown one), `403` (a read token on an action).
//!
//! An action is also refused unless it comes as JSON (`Content-Type: application/json`, else
//! `415`) and, when the browser names its origin, from the page's own origin (else `403`). A
//! cross-site form cannot send JSON, and a cross-site script cannot without a CORS preflight
//! this server never answers: so another web page open in the operator's browser cannot make
//! it act, even on an open (tokenless, loopback) server, where no token stands in the way.
//!
//! An open server on loopback also answers only requests whose `Host` names loopback
//! (`localhost`, `127.0.0.1`, `[::1]`, with any port), else `403`: a web page on another
//! site that has its own name re-resolved to 127.0.0.1 (DNS rebinding) would otherwise be the
//! page's "own origin" and read everything. A server with tokens, or an open one told
//! `allow_unauthenticated` (its network is trusted), takes any `Host`.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::HttpState;
use crate::auth::{AuthFailure, Scope};

/// A caller with a known token (or any caller of an open server): its scope.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reader(pub(super) Scope);

/// A caller with the admin token (or any caller of an open server), sending an action as
/// JSON from the page's own origin.
#[derive(Debug, Clone, Copy)]
pub(super) struct Admin;

impl FromRequestParts<HttpState> for Reader {
    type Rejection = Refusal;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &HttpState,
    ) -> Result<Self, Self::Rejection> {
        scope(&parts.headers, state).map(Reader)
    }
}

impl FromRequestParts<HttpState> for Admin {
    type Rejection = Refusal;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &HttpState,
    ) -> Result<Self, Self::Rejection> {
        let scope = scope(&parts.headers, state)?;
        if scope < Scope::Admin {
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                "this action needs the admin token; this token has the read scope only \
                 (it may look, not act)",
            ));
        }
        if !is_json(&parts.headers) {
            return Err(Refusal::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "send an action as JSON: `Content-Type: application/json` (a body of `{}` \
                 when it takes no arguments)",
            ));
        }
        if !same_origin(&parts.headers) {
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                "this action comes from another web origin than the dashboard's; actions are \
                 taken from the dashboard's own page only",
            ));
        }
        Ok(Admin)
    }
}

/// The scope of the caller, or the `401` (or `403`, see the module docs on `Host`) that
/// refuses it.
fn scope(headers: &HeaderMap, state: &HttpState) -> Result<Scope, Refusal> {
    if state.loopback_hosts_only && !names_loopback(headers) {
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            "this server has no tokens and answers on loopback only: ask for it as \
             localhost or 127.0.0.1 (the Host header names another host); to serve under \
             another name, give it tokens",
        ));
    }
    let authorization = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes());
    state
        .tokens
        .scope_of_header(authorization)
        .map_err(unauthorized)
}

/// Whether the `Host` header names a loopback host: `localhost` (or a name under
/// `.localhost`) or a loopback address, with or without a port.
fn names_loopback(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = if let Some(rest) = host.strip_prefix('[') {
        // `[v6]` or `[v6]:port`
        rest.split_once(']').map_or(rest, |(ip, _)| ip)
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        }
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// Whether the body is declared JSON.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

/// Whether the request's `Origin`, if the browser sent one, is this server as the request
/// names it (`Host`). Clients other than browsers send no `Origin`, and pass.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, host)| host);
    matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
}

/// A refusal: its status and a plain-text body that says what to send; a `401` carries a
/// `WWW-Authenticate: Bearer` challenge.
#[derive(Debug)]
pub(super) struct Refusal {
    status: StatusCode,
    why: &'static str,
}

impl Refusal {
    fn new(status: StatusCode, why: &'static str) -> Self {
        Refusal { status, why }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = format!("{}\n", self.why);
        if self.status == StatusCode::UNAUTHORIZED {
            (
                self.status,
                [(header::WWW_AUTHENTICATE, "Bearer realm=\"event_base\"")],
                body,
            )
                .into_response()
        } else {
            (self.status, body).into_response()
        }
    }
}

/// The `401` of an authentication failure.
fn unauthorized(failure: AuthFailure) -> Refusal {
    let why = match failure {
        AuthFailure::Missing => {
            "this server needs a token: send `Authorization: Bearer <token>` with its read or admin token (Prometheus: `authorization: {credentials: ...}` in the scrape config; the dashboard: open it as `/#token=<token>`)"
        }
        AuthFailure::NotBearer => {
            "the Authorization header is not `Bearer <token>`; send the token as a bearer token"
        }
        AuthFailure::Unknown => {
            "the token is not one this server accepts; use its read or admin token"
        }
    };
    Refusal::new(StatusCode::UNAUTHORIZED, why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        h
    }

    #[test]
    fn json_is_application_json_with_or_without_parameters() {
        assert!(is_json(&headers(&[(
            header::CONTENT_TYPE,
            "application/json"
        )])));
        assert!(is_json(&headers(&[(
            header::CONTENT_TYPE,
            "Application/JSON; charset=utf-8"
        )])));
        assert!(!is_json(&headers(&[(header::CONTENT_TYPE, "text/plain")])));
        assert!(!is_json(&headers(&[(
            header::CONTENT_TYPE,
            "application/x-www-form-urlencoded"
        )])));
        assert!(!is_json(&HeaderMap::new()));
    }

    #[test]
    fn loopback_hosts_are_localhost_and_loopback_addresses() {
        for host in [
            "localhost",
            "localhost:8080",
            "LOCALHOST.:80",
            "app.localhost:1",
            "127.0.0.1",
            "127.0.0.1:8080",
            "127.9.9.9:8080",
            "[::1]:8080",
            "[::1]",
            "[::ffff:127.0.0.1]:8080",
        ] {
            assert!(names_loopback(&headers(&[(header::HOST, host)])), "{host}");
        }
        for host in [
            "evil.example:8080",
            "localhost.evil.example",
            "10.0.0.1:8080",
            "[::2]:80",
            "",
        ] {
            assert!(!names_loopback(&headers(&[(header::HOST, host)])), "{host}");
        }
        assert!(!names_loopback(&HeaderMap::new()));
    }

    #[test]
    fn an_origin_must_be_the_host_asked() {
        assert!(same_origin(&headers(&[(header::HOST, "127.0.0.1:8080")])));
        assert!(same_origin(&headers(&[
            (header::HOST, "127.0.0.1:8080"),
            (header::ORIGIN, "http://127.0.0.1:8080"),
        ])));
        assert!(!same_origin(&headers(&[
            (header::HOST, "127.0.0.1:8080"),
            (header::ORIGIN, "https://evil.example"),
        ])));
        assert!(!same_origin(&headers(&[
            (header::HOST, "127.0.0.1:8080"),
            (header::ORIGIN, "null"),
        ])));
        assert!(!same_origin(&headers(&[(
            header::ORIGIN,
            "http://127.0.0.1:8080"
        )])));
    }
}
