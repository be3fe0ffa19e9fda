//! [`GrpcError`]: what can go wrong starting, running or reaching a server (not the errors
//! of single calls, which are [`tonic::Status`]).

/// Errors of the server's life and of connecting a client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GrpcError {
    /// The address could not be listened on.
    #[error("could not listen on {addr}: {source}; is another process using the port? pick another address (EB_GRPC_ADDR in the example), or port 0 for any free one")]
    Bind {
        /// The address asked for.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A server without tokens was asked to listen on an address other than loopback:
    /// everyone who could reach it would be admin. Refused unless the builder says
    /// [`allow_unauthenticated`](crate::GrpcServerBuilder::allow_unauthenticated).
    #[error("refusing to serve without tokens on {addr}, which is not a loopback address: anyone who reaches it would be admin; add a token (`.tokens(Tokens::new().admin(..))`, EB_GRPC_TOKEN in the example), listen on 127.0.0.1, or call `.allow_unauthenticated()` if the network itself is trusted")]
    OpenOffLoopback {
        /// The address it would have listened on.
        addr: std::net::SocketAddr,
    },
    /// A client was asked to send its token over plain-text `http://` to a host that is not
    /// loopback, where anyone on the path could read it. Checked before connecting.
    #[error("refusing to send the token in clear text over http:// to {host}, which is not a loopback address; use an https:// address with the server's CA (`--tls-ca`, `ClientOptions::tls_ca`), or, on a network you trust, allow plain text with `--insecure` (`ClientOptions::insecure(true)`)")]
    TokenInClearText {
        /// The host the token would have gone to.
        host: String,
    },
    /// A server limit that cannot be used (zero).
    #[error("`{setting}` must be more than zero; leave it unset for the default")]
    InvalidLimit {
        /// The builder method.
        setting: &'static str,
    },
    /// The transport failed while serving or connecting.
    #[error("gRPC transport error: {0}")]
    Transport(#[source] tonic::transport::Error),
    /// The HTTP listener (`GET /metrics`, the dashboard) failed while serving.
    #[error("the HTTP listener (/metrics, the dashboard) failed: {0}")]
    Http(#[source] std::io::Error),
    /// The reflection service could not be built from the descriptor sets.
    #[error(
        "could not build the reflection service: {0}; serve without it with `.reflection(false)`"
    )]
    Reflection(String),
    /// The server's task ended abnormally (it panicked or was aborted).
    #[error("the gRPC server task failed: {0}")]
    Task(String),
    /// A client address that is not a URI.
    #[error("`{addr}` is not a server address ({reason}); give one like http://127.0.0.1:50051")]
    InvalidAddress {
        /// The address given.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A token that cannot be sent in a header (it has non-visible-ASCII characters).
    #[error(
        "the token cannot be sent as an HTTP header value (use visible ASCII characters only)"
    )]
    InvalidToken,
    /// The TLS setup was refused: a certificate, key or CA that does not parse (feature `tls`).
    #[error("TLS setup failed: {0}; give PEM files: the server a certificate chain and its private key, the client the CA certificate that signed the server's")]
    Tls(String),
    /// TLS was asked for (an `https://` address, a CA certificate) in a build without the
    /// `tls` feature.
    #[error("{0} needs TLS, which this build does not have; build event_base_grpc (or ebctl) with the `tls` feature, or use an http:// address")]
    TlsNotBuilt(String),
    /// The client could not reach the server.
    #[error("could not connect to {addr}: {source}; is the server running and listening there?")]
    Connect {
        /// The address.
        addr: String,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
}

/// An error's message and its causes on one line (`a: b: c`), each said once.
#[cfg(feature = "tls")]
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}
