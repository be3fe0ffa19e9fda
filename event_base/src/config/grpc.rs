//! [`Config::grpc_server`]: the admin server's builder from `[admin]` (feature `gRPC`).

use super::Config;
use event_base_core::{ConfigError, EventBus};
use event_base_grpc::{GrpcServerBuilder, Tokens};

impl Config {
    /// A gRPC server builder for `bus` with `[admin]`'s tokens, TLS files, limits and
    /// switches; serve it on `admin.grpc_addr`:
    ///
    /// ```no_run
    /// # async fn demo(bus: event_base::EventBus) -> Result<(), Box<dyn std::error::Error>> {
    /// let config = event_base::config::Config::load("eb.toml")?;
    /// if let Some(addr) = &config.admin.grpc_addr {
    ///     let server = config.grpc_server(bus.clone())?.serve(addr).await?;
    ///     println!("admin API on {}", server.local_addr());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// Errors: a TLS file that cannot be read ([`ConfigError::ReadNamed`], naming the key
    /// and the file), TLS files without the `gRPC-tls` feature. What the server itself
    /// refuses (no tokens off loopback, a zero limit, a certificate that does not parse) is
    /// refused by `serve`.
    pub fn grpc_server(&self, bus: EventBus) -> Result<GrpcServerBuilder, ConfigError> {
        let a = &self.admin;
        let mut tokens = Tokens::new();
        if let Some(t) = &a.read_token {
            tokens = tokens.read(t.clone());
        }
        if let Some(t) = &a.admin_token {
            tokens = tokens.admin(t.clone());
        }
        let mut b = event_base_grpc::GrpcServer::builder(bus).tokens(tokens);
        if a.allow_unauthenticated {
            b = b.allow_unauthenticated();
        }
        if let Some(d) = a.request_timeout {
            b = b.request_timeout(d);
        }
        if let Some(n) = a.concurrency_limit_per_connection {
            b = b.concurrency_limit_per_connection(n);
        }
        if let Some(n) = a.max_decoding_message_size {
            b = b.max_decoding_message_size(n);
        }
        if let Some(n) = a.max_encoding_message_size {
            b = b.max_encoding_message_size(n);
        }
        if let Some(on) = a.health {
            b = b.health(on);
        }
        if let Some(on) = a.reflection {
            b = b.reflection(on);
        }
        if let Some(addr) = &a.http_addr {
            // `GET /metrics` and the dashboard, with the same tokens.
            b = b.http_addr(addr.clone());
        }
        if let Some(on) = a.dashboard {
            b = b.dashboard(on);
        }
        self.tls(b)
    }

    #[cfg(feature = "gRPC-tls")]
    fn tls(&self, b: GrpcServerBuilder) -> Result<GrpcServerBuilder, ConfigError> {
        let (Some(cert), Some(key)) = (&self.admin.tls_cert, &self.admin.tls_key) else {
            return Ok(b);
        };
        let read = |k: &str, path: &std::path::Path| {
            std::fs::read(path).map_err(|source| ConfigError::ReadNamed {
                origin: self.origins.of(k),
                key: k.to_owned(),
                path: path.to_owned(),
                source,
            })
        };
        Ok(b.tls(read("admin.tls_cert", cert)?, read("admin.tls_key", key)?))
    }

    #[cfg(not(feature = "gRPC-tls"))]
    fn tls(&self, b: GrpcServerBuilder) -> Result<GrpcServerBuilder, ConfigError> {
        if self.admin.tls_cert.is_some() {
            return Err(self.origins.invalid(
                "admin.tls_cert",
                "TLS needs the `gRPC-tls` feature of event_base; turn it on in Cargo.toml, or leave out tls_cert and tls_key",
            ));
        }
        Ok(b)
    }
}
