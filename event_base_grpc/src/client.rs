//! A client of the admin service with the bearer token attached to every call:
//! [`connect`] → [`AdminClient`]. `ebctl` is built on it; so can other tools be.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use event_base_grpc::client::{connect, ClientOptions};
//! use event_base_grpc::pb::GetStatusRequest;
//! let mut client = connect(&ClientOptions::new("http://127.0.0.1:50051").token("s3cret")).await?;
//! let status = client.get_status(GetStatusRequest {}).await?.into_inner();
//! println!("{} is {}", status.node_name, if status.accepting { "up" } else { "stopping" });
//! # Ok(()) }
//! ```

use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

use crate::error::GrpcError;
use crate::pb::admin_service_client::AdminServiceClient;

/// The generated client over a channel that sends the token.
pub type AdminClient = AdminServiceClient<InterceptedService<Channel, BearerToken>>;

/// Where and how to connect.
#[derive(Clone)]
pub struct ClientOptions {
    /// The server, e.g. `http://127.0.0.1:50051` (`http://` is added if missing).
    pub addr: String,
    /// The bearer token, if the server wants one.
    pub token: Option<String>,
    /// A deadline for every call (`None`: none).
    pub timeout: Option<Duration>,
    /// How long to try to connect.
    pub connect_timeout: Duration,
    /// The PEM certificate(s) of the CA to trust for an `https://` server (feature `tls`).
    /// Without it an `https://` server is trusted only if its certificate chains to the
    /// roots tonic was built with (none unless its `tls-native-roots` or
    /// `tls-webpki-roots` feature is on). Setting it makes an address without a scheme
    /// `https://`.
    pub tls_ca: Option<Vec<u8>>,
    /// The name to check the server's certificate against, when it is not the address's
    /// host (e.g. the address is an IP the certificate does not list).
    pub tls_domain: Option<String>,
    /// Whether a token may be sent over plain-text `http://` to a host that is not loopback
    /// (default `false`: refused with [`GrpcError::TokenInClearText`] before connecting).
    /// See [`insecure`](Self::insecure).
    pub insecure: bool,
    /// Ping the server this often on an open connection (HTTP/2 keep-alive), and drop the
    /// connection when a ping is not answered within the same time (default `None`: no
    /// pings). A connection counts as made once TCP (and TLS) is up, so without pings a port
    /// that accepts TCP but never speaks HTTP/2 holds a call until its deadline; with them
    /// the call fails after about twice this. `ebctl` uses 2.5 s.
    pub keep_alive: Option<Duration>,
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("tls_ca", &self.tls_ca.as_ref().map(|_| "<set>"))
            .field("tls_domain", &self.tls_domain)
            .field("insecure", &self.insecure)
            .field("keep_alive", &self.keep_alive)
            .finish()
    }
}

impl ClientOptions {
    /// Options for `addr`, no token, no call deadline, 5 s to connect, no CA of its own, a
    /// token never sent in clear text off loopback.
    pub fn new(addr: impl Into<String>) -> Self {
        ClientOptions {
            addr: addr.into(),
            token: None,
            timeout: None,
            connect_timeout: Duration::from_secs(5),
            tls_ca: None,
            tls_domain: None,
            insecure: false,
            keep_alive: None,
        }
    }

    /// With `true`, lets the token go over plain-text `http://` to a host that is not
    /// loopback, readable by anyone on the path (`ebctl --insecure`). Without it such an
    /// address with a token is refused before any connection is made: use an `https://`
    /// address and [`tls_ca`](Self::tls_ca) instead. Loopback hosts (`127.0.0.0/8`, `::1`,
    /// `localhost`) never need it.
    pub fn insecure(mut self, insecure: bool) -> Self {
        self.insecure = insecure;
        self
    }

    /// The CA certificate (PEM) to trust for an `https://` server (feature `tls`).
    pub fn tls_ca(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_ca = Some(pem.into());
        self
    }

    /// The name the server's certificate must carry, if not the address's host.
    pub fn tls_domain(mut self, name: impl Into<String>) -> Self {
        self.tls_domain = Some(name.into());
        self
    }

    /// The bearer token to send.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// A deadline for every call.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// Adds `authorization: Bearer <token>` to every call (nothing without a token).
#[derive(Clone)]
pub struct BearerToken(Option<MetadataValue<Ascii>>);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "BearerToken(<set>)"
        } else {
            "BearerToken(none)"
        })
    }
}

impl BearerToken {
    /// The interceptor for `token`; fails if it cannot be a header value.
    pub fn new(token: Option<&str>) -> Result<Self, GrpcError> {
        token
            .map(|t| {
                format!("Bearer {t}")
                    .parse::<MetadataValue<Ascii>>()
                    .map_err(|_| GrpcError::InvalidToken)
            })
            .transpose()
            .map(BearerToken)
    }
}

impl tonic::service::Interceptor for BearerToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// `addr` with a scheme: `https://` if a CA is given, else `http://`.
pub(crate) fn with_scheme(addr: &str, tls: bool) -> String {
    if addr.contains("://") {
        addr.to_owned()
    } else if tls {
        format!("https://{addr}")
    } else {
        format!("http://{addr}")
    }
}

/// The endpoint `options` describe: over TLS for an `https://` address.
pub fn endpoint(options: &ClientOptions) -> Result<Endpoint, GrpcError> {
    let addr = with_scheme(&options.addr, options.tls_ca.is_some());
    let mut endpoint =
        Endpoint::from_shared(addr.clone()).map_err(|e| GrpcError::InvalidAddress {
            addr: options.addr.clone(),
            reason: e.to_string(),
        })?;
    let https = endpoint.uri().scheme_str() == Some("https");
    if !https && (options.tls_ca.is_some() || options.tls_domain.is_some()) {
        return Err(GrpcError::InvalidAddress {
            addr: options.addr.clone(),
            reason: "a TLS CA or domain was given for a plain-text address".to_owned(),
        });
    }
    if https {
        endpoint = tls(endpoint, options)?;
    } else if options.token.is_some() && !options.insecure {
        let host = endpoint.uri().host().unwrap_or_default();
        if !is_loopback_host(host) {
            return Err(GrpcError::TokenInClearText {
                host: host.to_owned(),
            });
        }
    }
    endpoint = endpoint.connect_timeout(options.connect_timeout);
    if let Some(t) = options.timeout {
        endpoint = endpoint.timeout(t);
    }
    Ok(endpoint)
}

/// Whether `host` (as a URI writes it: IPv6 in brackets) is this machine: `localhost`, an
/// address in `127.0.0.0/8`, or `::1`.
fn is_loopback_host(host: &str) -> bool {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// `endpoint` over TLS, trusting `options.tls_ca` (and any roots tonic was built with).
#[cfg(feature = "tls")]
fn tls(endpoint: Endpoint, options: &ClientOptions) -> Result<Endpoint, GrpcError> {
    let mut config = tonic::transport::ClientTlsConfig::new().with_enabled_roots();
    if let Some(ca) = &options.tls_ca {
        config = config.ca_certificate(tonic::transport::Certificate::from_pem(ca));
    }
    if let Some(domain) = &options.tls_domain {
        config = config.domain_name(domain.clone());
    }
    endpoint
        .tls_config(config)
        .map_err(|e| GrpcError::Tls(crate::error::chain(&e)))
}

/// Without the `tls` feature an `https://` address is refused (tonic would speak plain text).
#[cfg(not(feature = "tls"))]
fn tls(_endpoint: Endpoint, options: &ClientOptions) -> Result<Endpoint, GrpcError> {
    Err(GrpcError::TlsNotBuilt(format!("`{}`", options.addr)))
}

/// Connects to the server `options` names. The options are checked before any connection
/// is made: a token for a plain-text address off loopback is refused with
/// [`GrpcError::TokenInClearText`] unless [`ClientOptions::insecure`] says otherwise.
pub async fn connect(options: &ClientOptions) -> Result<AdminClient, GrpcError> {
    let interceptor = BearerToken::new(options.token.as_deref())?;
    let mut endpoint = endpoint(options)?;
    if let Some(every) = options.keep_alive {
        endpoint = endpoint
            .http2_keep_alive_interval(every)
            .keep_alive_timeout(every)
            .keep_alive_while_idle(true);
    }
    let channel = endpoint
        .connect()
        .await
        .map_err(|source| GrpcError::Connect {
            addr: options.addr.clone(),
            source,
        })?;
    Ok(AdminServiceClient::with_interceptor(channel, interceptor)
        // Dead-letter pages with whole payloads can be large; the server keeps them under 4 MiB.
        .max_decoding_message_size(16 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for host in ["127.0.0.1", "127.8.9.10", "[::1]", "localhost", "LOCALHOST"] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "192.0.2.1",
            "[2001:db8::1]",
            "example.com",
            "localhost.example",
            "",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }
}
