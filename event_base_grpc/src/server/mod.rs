//! The server: [`GrpcServer::builder`] → [`GrpcServerBuilder`] → [`ServeHandle`].
//!
//! What it serves, all on one port:
//! - `event_base.admin.v1.AdminService` (`api.rs` dispatches and checks scopes; `read.rs` and
//!   `write.rs` do the work, `patterns.rs` for cancel and schedules; `watch.rs` feeds `Watch`),
//!   behind the token interceptor;
//! - `grpc.health.v1.Health`, never gated: `SERVING` for `""` and the admin service while the
//!   bus accepts sends, `NOT_SERVING` from the moment a shutdown of the bus begins;
//! - server reflection v1 and v1alpha (both descriptor sets: ours and health's), behind the
//!   token interceptor (a read token is enough).
//!
//! On an HTTP address of its own ([`GrpcServerBuilder::http_addr`], `http/`): `GET /metrics`
//! in the Prometheus text format, and the web dashboard at `/` (unless
//! [`GrpcServerBuilder::dashboard`] turns it off), with the same tokens (a read token to look,
//! the admin token to act).
//!
//! Secure by default: without tokens it listens on loopback only (anything else is
//! [`GrpcError::OpenOffLoopback`] unless the builder says
//! [`allow_unauthenticated`](GrpcServerBuilder::allow_unauthenticated)), and every connection
//! has a concurrency limit, every call a deadline and every message a size limit (the
//! `DEFAULT_*` constants below).

mod api;
mod http;
mod patterns;
mod read;
pub(crate) mod watch;
mod write;

pub(crate) use write::code_name;

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use event_base_core::EventBus;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic_health::ServingStatus;

use crate::auth::{Authenticator, Tokens};
use crate::error::GrpcError;
use crate::pb::admin_service_server::AdminServiceServer;
use watch::WatchFeed;

/// The gRPC name of the admin service, as health checks and reflection know it.
pub const SERVICE_NAME: &str = "event_base.admin.v1.AdminService";

/// Calls one connection may have under way at once, unless
/// [`GrpcServerBuilder::concurrency_limit_per_connection`] says otherwise; more wait.
pub const DEFAULT_CONCURRENCY_PER_CONNECTION: usize = 64;

/// How long a call may take to answer, unless [`GrpcServerBuilder::request_timeout`] says
/// otherwise: past it the call ends with `CANCELLED` ("Timeout expired"). A caller's own
/// shorter deadline (`grpc-timeout`) wins. Streams (`Watch`, `ReplayDeadLetters`) are bound
/// only until their first answer; a `Shutdown` cut short goes on in the background.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The largest request the admin service decodes, unless
/// [`GrpcServerBuilder::max_decoding_message_size`] says otherwise: a larger one is refused
/// with `OUT_OF_RANGE`. tonic's own default, 4 MiB.
pub const DEFAULT_MAX_DECODING_MESSAGE_SIZE: usize = 4 << 20;

/// The largest answer the admin service encodes, unless
/// [`GrpcServerBuilder::max_encoding_message_size`] says otherwise: a larger one fails with
/// `OUT_OF_RANGE`. 16 MiB, what [`connect`](crate::client::connect)'s client accepts (a
/// `GetDeadLetter` answer carries the whole payload).
pub const DEFAULT_MAX_ENCODING_MESSAGE_SIZE: usize = 16 << 20;

/// The gRPC management server of one bus. Start with [`GrpcServer::builder`].
#[derive(Debug)]
pub struct GrpcServer {
    _private: (),
}

impl GrpcServer {
    /// A server for `bus`: no tokens (so loopback only), health and reflection on, the
    /// default limits.
    pub fn builder(bus: EventBus) -> GrpcServerBuilder {
        GrpcServerBuilder {
            bus,
            tokens: Tokens::new(),
            allow_unauthenticated: false,
            limits: Limits::default(),
            health: true,
            reflection: true,
            feed: None,
            http_addr: None,
            dashboard: true,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }
}

/// Settings of a [`GrpcServer`]; [`serve`](Self::serve) starts it.
///
/// ```
/// # async fn demo(bus: event_base_core::EventBus) -> Result<(), event_base_grpc::GrpcError> {
/// use event_base_grpc::{GrpcServer, Tokens};
/// let server = GrpcServer::builder(bus)
///     .tokens(Tokens::new().read("r3ad").admin("s3cret"))
///     .serve("127.0.0.1:0")
///     .await?;
/// println!("listening on {}", server.local_addr());
/// server.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a server builder does nothing until `serve` is called"]
pub struct GrpcServerBuilder {
    bus: EventBus,
    tokens: Tokens,
    allow_unauthenticated: bool,
    limits: Limits,
    health: bool,
    reflection: bool,
    feed: Option<WatchFeed>,
    http_addr: Option<String>,
    dashboard: bool,
    #[cfg(feature = "tls")]
    tls: Option<tonic::transport::Identity>,
}

/// The limits a server puts on connections, calls and messages.
#[derive(Debug, Clone, Copy)]
struct Limits {
    concurrency_per_connection: usize,
    request_timeout: Duration,
    max_decoding_message_size: usize,
    max_encoding_message_size: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            concurrency_per_connection: DEFAULT_CONCURRENCY_PER_CONNECTION,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_decoding_message_size: DEFAULT_MAX_DECODING_MESSAGE_SIZE,
            max_encoding_message_size: DEFAULT_MAX_ENCODING_MESSAGE_SIZE,
        }
    }
}

impl Limits {
    /// Refuses a zero limit: it would stall (concurrency), cancel (timeout) or refuse
    /// (sizes) every call.
    fn check(&self) -> Result<(), GrpcError> {
        let zero = [
            (
                self.concurrency_per_connection == 0,
                "concurrency_limit_per_connection",
            ),
            (self.request_timeout.is_zero(), "request_timeout"),
            (
                self.max_decoding_message_size == 0,
                "max_decoding_message_size",
            ),
            (
                self.max_encoding_message_size == 0,
                "max_encoding_message_size",
            ),
        ];
        match zero.iter().find(|(is_zero, _)| *is_zero) {
            Some((_, setting)) => Err(GrpcError::InvalidLimit { setting }),
            None => Ok(()),
        }
    }
}

impl GrpcServerBuilder {
    /// The tokens callers must present. Default: none, and then every caller is admin, so the
    /// server listens on loopback only unless [`allow_unauthenticated`](Self::allow_unauthenticated)
    /// is called.
    pub fn tokens(mut self, tokens: Tokens) -> Self {
        self.tokens = tokens;
        self
    }

    /// Lets a server without tokens listen on an address other than loopback, where everyone
    /// who reaches it is admin (publish, replay, purge, shutdown). Without this call that is
    /// refused with [`GrpcError::OpenOffLoopback`]. Only for a network that is itself
    /// trusted (a private container network, a socket behind an authenticating proxy);
    /// prefer [`tokens`](Self::tokens) and TLS.
    pub fn allow_unauthenticated(mut self) -> Self {
        self.allow_unauthenticated = true;
        self
    }

    /// How many calls one connection may have under way at once (default
    /// [`DEFAULT_CONCURRENCY_PER_CONNECTION`]); further calls wait for a free slot. Zero is
    /// refused by [`serve`](Self::serve) with [`GrpcError::InvalidLimit`].
    pub fn concurrency_limit_per_connection(mut self, limit: usize) -> Self {
        self.limits.concurrency_per_connection = limit;
        self
    }

    /// How long a call may take to answer (default [`DEFAULT_REQUEST_TIMEOUT`]); past it the
    /// call ends with `CANCELLED`. A stream counts until its first answer only. Zero is
    /// refused by [`serve`](Self::serve) with [`GrpcError::InvalidLimit`].
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.limits.request_timeout = timeout;
        self
    }

    /// The largest request message the admin service accepts, in bytes (default
    /// [`DEFAULT_MAX_DECODING_MESSAGE_SIZE`]); a larger one is refused with `OUT_OF_RANGE`
    /// before it is decoded. Zero is refused by [`serve`](Self::serve).
    pub fn max_decoding_message_size(mut self, bytes: usize) -> Self {
        self.limits.max_decoding_message_size = bytes;
        self
    }

    /// The largest answer the admin service sends, in bytes (default
    /// [`DEFAULT_MAX_ENCODING_MESSAGE_SIZE`]); a larger one fails with `OUT_OF_RANGE`. Keep
    /// it within what clients accept. Zero is refused by [`serve`](Self::serve).
    pub fn max_encoding_message_size(mut self, bytes: usize) -> Self {
        self.limits.max_encoding_message_size = bytes;
        self
    }

    /// Whether to serve `grpc.health.v1.Health` (default on). It is never gated.
    pub fn health(mut self, on: bool) -> Self {
        self.health = on;
        self
    }

    /// Whether to serve reflection v1 and v1alpha (default on; gated like reads).
    pub fn reflection(mut self, on: bool) -> Self {
        self.reflection = on;
        self
    }

    /// The feed of `Watch`'s dead-letter and worker events; its handlers must be on the bus
    /// (see [`WatchFeed`]). Without one, `Watch` streams lifecycle and metrics events only.
    pub fn watch_feed(mut self, feed: WatchFeed) -> Self {
        self.feed = Some(feed);
        self
    }

    /// Also serves HTTP/1.1 on `addr` (`"127.0.0.1:0"` picks a free port; see
    /// [`ServeHandle::http_addr`]): `GET /metrics`, the bus's metrics in the Prometheus text
    /// format ([`crate::prometheus`]), and the web dashboard at `/` (topics, subscriptions,
    /// workers, dead letters, the WAL; see [`dashboard`](Self::dashboard)). Default: no HTTP
    /// listener.
    ///
    /// The same tokens as gRPC: with tokens set, a scrape (and every dashboard read) needs
    /// `Authorization: Bearer <token>` with the read (or admin) token and is answered `401`
    /// without one or with a wrong one; the dashboard's actions need the admin token (`403`
    /// with the read token). Without tokens it is open, and `addr` must then be loopback unless
    /// [`allow_unauthenticated`](Self::allow_unauthenticated) is called, as for gRPC. It is
    /// plain HTTP even when gRPC uses TLS: keep it on a network you trust (the token travels
    /// in clear text), or put a TLS proxy in front.
    ///
    /// A port of its own rather than beside gRPC: Prometheus scrapes over HTTP/1.1, the gRPC
    /// port speaks HTTP/2 (and TLS when configured), and apart they can be exposed or
    /// firewalled separately.
    ///
    /// ```
    /// # async fn demo(bus: event_base_core::EventBus) -> Result<(), event_base_grpc::GrpcError> {
    /// use event_base_grpc::{GrpcServer, Tokens};
    /// let server = GrpcServer::builder(bus)
    ///     .tokens(Tokens::new().read("scrape").admin("s3cret"))
    ///     .http_addr("127.0.0.1:0")
    ///     .serve("127.0.0.1:0")
    ///     .await?;
    /// let metrics = server.http_addr().expect("asked for");
    /// println!("curl -H 'Authorization: Bearer scrape' http://{metrics}/metrics");
    /// # server.shutdown().await }
    /// ```
    pub fn http_addr(mut self, addr: impl Into<String>) -> Self {
        self.http_addr = Some(addr.into());
        self
    }

    /// Whether the HTTP listener of [`http_addr`](Self::http_addr) also serves the web
    /// dashboard (default on): the page at `/`, its JSON and event stream under `/api/`. Off,
    /// it serves `GET /metrics` only (and answers `404` elsewhere).
    ///
    /// The page shows the topics and their handlers with rates, the workers, the dead letters
    /// (paged and searchable, shown one by one, replayed as they are or edited, deleted,
    /// purged), the WAL's figures and, on a shared backend, the nodes. A read token sees it
    /// all; the admin token also gets the buttons, each of which asks before it acts.
    pub fn dashboard(mut self, on: bool) -> Self {
        self.dashboard = on;
        self
    }

    /// Serves over TLS (rustls) with this certificate chain and private key, both PEM
    /// (feature `tls`). Clients then connect to `https://` addresses and must trust the
    /// certificate's issuer (`ClientOptions::tls_ca`, `ebctl --tls-ca`). A certificate or key
    /// that does not parse makes [`serve`](Self::serve) fail with [`GrpcError::Tls`].
    ///
    /// ```no_run
    /// # async fn demo(bus: event_base_core::EventBus) -> Result<(), Box<dyn std::error::Error>> {
    /// use event_base_grpc::{GrpcServer, Tokens};
    /// let server = GrpcServer::builder(bus)
    ///     .tls(std::fs::read("server.crt")?, std::fs::read("server.key")?)
    ///     .tokens(Tokens::new().admin("s3cret"))
    ///     .serve("0.0.0.0:50051")
    ///     .await?;
    /// # server.wait().await?; Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls(mut self, cert_pem: impl AsRef<[u8]>, key_pem: impl AsRef<[u8]>) -> Self {
        self.tls = Some(tonic::transport::Identity::from_pem(cert_pem, key_pem));
        self
    }

    /// Listens on `addr` (`"127.0.0.1:0"` picks a free port; see
    /// [`ServeHandle::local_addr`]) and serves in a task of its own.
    ///
    /// Fails with [`GrpcError::OpenOffLoopback`] if no tokens are set, `addr` is not a
    /// loopback address and [`allow_unauthenticated`](Self::allow_unauthenticated) was not
    /// called; with [`GrpcError::InvalidLimit`] for a zero limit.
    pub async fn serve(self, addr: &str) -> Result<ServeHandle, GrpcError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| GrpcError::Bind {
                addr: addr.to_owned(),
                source,
            })?;
        self.serve_with_incoming(listener)
    }

    /// Serves on a listener already bound (tests bind `127.0.0.1:0` themselves). Refuses
    /// what [`serve`](Self::serve) refuses.
    pub fn serve_with_incoming(self, listener: TcpListener) -> Result<ServeHandle, GrpcError> {
        let local_addr = listener.local_addr().map_err(|source| GrpcError::Bind {
            addr: "the given listener".to_owned(),
            source,
        })?;
        self.limits.check()?;
        self.check_open(local_addr)?;
        let http_listener = self.bind_http()?;
        if let Some(l) = &http_listener {
            tracing::info!(http_addr = %l.0, dashboard = self.dashboard, "event_base HTTP listener (GET /metrics, the dashboard at /)");
        }
        tracing::info!(%local_addr, "event_base gRPC server listening");
        let mut transport = self.transport()?;
        let stop = CancellationToken::new();
        let feed = self.feed.clone().unwrap_or_default();
        let api = api::AdminApi::new(self.bus.clone(), feed.clone(), stop.clone());
        let http_api = api.clone();
        let auth = Authenticator::new(self.tokens.clone());
        let admin = AdminServiceServer::new(api)
            .max_decoding_message_size(self.limits.max_decoding_message_size)
            .max_encoding_message_size(self.limits.max_encoding_message_size);
        let admin = InterceptedService::new(admin, auth.clone());

        let mut routes = tonic::service::RoutesBuilder::default();
        routes.add_service(admin);
        let health = self.health.then(tonic_health::server::health_reporter);
        if let Some((_, service)) = &health {
            routes.add_service(service.clone());
        }
        if self.reflection {
            let (v1, v1alpha) = reflection()?;
            routes.add_service(InterceptedService::new(v1, auth.clone()));
            routes.add_service(InterceptedService::new(v1alpha, auth));
        }
        let router = transport.add_routes(routes.routes());

        let watcher = tokio::spawn(watch_lifecycle(
            self.bus.clone(),
            feed,
            health.map(|(reporter, _)| reporter),
            stop.clone(),
        ));
        let http = http_listener.map(|(addr, listener)| {
            let settings = http::HttpSettings {
                tokens: self.tokens.clone(),
                allow_unauthenticated: self.allow_unauthenticated,
                dashboard: self.dashboard,
            };
            let task = tokio::spawn(http::serve(listener, http_api, settings, stop.clone()));
            (addr, task)
        });
        let incoming = TcpListenerStream::new(listener);
        let until = stop.clone();
        let task = tokio::spawn(async move {
            let served = router
                .serve_with_incoming_shutdown(incoming, until.cancelled_owned())
                .await;
            // Awaited, so that its handle on the bus is gone when `shutdown` returns (the
            // last handle of a bus releases its WAL's directory).
            watcher.abort();
            let _ = watcher.await;
            served
        });
        let (http_addr, http_task) = http.unzip();
        Ok(ServeHandle {
            local_addr,
            http_addr,
            stop,
            task: Some(task),
            http_task,
            started_at: SystemTime::now(),
        })
    }

    /// Refuses to serve without tokens on `addr` if it is not loopback, unless
    /// [`allow_unauthenticated`](Self::allow_unauthenticated) was called (then warns).
    fn check_open(&self, addr: SocketAddr) -> Result<(), GrpcError> {
        if !self.tokens.is_open() || addr.ip().to_canonical().is_loopback() {
            return Ok(());
        }
        if !self.allow_unauthenticated {
            return Err(GrpcError::OpenOffLoopback { addr });
        }
        tracing::warn!(%addr, "event_base server listening without tokens on a non-loopback address (allow_unauthenticated): anyone who reaches it is admin");
        Ok(())
    }

    /// Binds the HTTP address, if one was asked for, and checks it as the gRPC one is.
    fn bind_http(&self) -> Result<Option<(SocketAddr, TcpListener)>, GrpcError> {
        let Some(addr) = &self.http_addr else {
            return Ok(None);
        };
        let bind_error = |source| GrpcError::Bind {
            addr: addr.clone(),
            source,
        };
        // std's bind is synchronous, so `serve_with_incoming` can stay so.
        let listener = std::net::TcpListener::bind(addr.as_str()).map_err(bind_error)?;
        let local = listener.local_addr().map_err(bind_error)?;
        self.check_open(local)?;
        listener.set_nonblocking(true).map_err(bind_error)?;
        let listener = TcpListener::from_std(listener).map_err(bind_error)?;
        Ok(Some((local, listener)))
    }
}

impl GrpcServerBuilder {
    /// The transport: plain HTTP/2, or over TLS when a certificate was given, with the
    /// per-connection and per-call limits.
    fn transport(&self) -> Result<tonic::transport::Server, GrpcError> {
        let server = tonic::transport::Server::builder()
            .concurrency_limit_per_connection(self.limits.concurrency_per_connection)
            .timeout(self.limits.request_timeout);
        #[cfg(feature = "tls")]
        if let Some(identity) = &self.tls {
            let config = tonic::transport::ServerTlsConfig::new().identity(identity.clone());
            return server
                .tls_config(config)
                .map_err(|e| GrpcError::Tls(crate::error::chain(&e)));
        }
        Ok(server)
    }
}

/// The reflection services (v1, v1alpha) over our descriptor set and health's.
fn reflection() -> Result<
    (
        tonic_reflection::server::v1::ServerReflectionServer<
            impl tonic_reflection::server::v1::ServerReflection,
        >,
        tonic_reflection::server::v1alpha::ServerReflectionServer<
            impl tonic_reflection::server::v1alpha::ServerReflection,
        >,
    ),
    GrpcError,
> {
    let reflection_error =
        |e: tonic_reflection::server::Error| GrpcError::Reflection(e.to_string());
    let v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(reflection_error)?;
    let v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(reflection_error)?;
    Ok((v1, v1alpha))
}

/// Health SERVING until the bus begins to shut down or its WAL fails (it then refuses every
/// send), then NOT_SERVING; a lifecycle event for watchers when the shutdown begins.
async fn watch_lifecycle(
    bus: EventBus,
    feed: WatchFeed,
    health: Option<tonic_health::server::HealthReporter>,
    stop: CancellationToken,
) {
    let set = |status| {
        let health = health.clone();
        async move {
            if let Some(h) = health {
                h.set_service_status("", status).await;
                h.set_service_status(SERVICE_NAME, status).await;
            }
        }
    };
    let serving = if bus.is_accepting() {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    set(serving).await;
    let wal = bus.wal().clone();
    let failed = wal.wait_failure();
    tokio::pin!(failed);
    let mut wal_failed = false;
    loop {
        tokio::select! {
            () = bus.shutdown_started() => break,
            () = stop.cancelled() => return,
            cause = &mut failed, if !wal_failed => {
                wal_failed = true;
                tracing::error!(target: event_base_core::constant::target::WAL, %cause, "health: NOT_SERVING, the WAL failed");
                set(ServingStatus::NotServing).await;
            }
        }
    }
    set(ServingStatus::NotServing).await;
    feed.lifecycle(crate::pb::LifecycleStage::ShutdownStarted, None);
}

/// A running server. [`shutdown`](Self::shutdown) stops it gracefully: no new calls, open
/// `Watch` and replay streams end, calls under way finish. Dropping the handle stops it too,
/// without waiting.
#[derive(Debug)]
pub struct ServeHandle {
    local_addr: SocketAddr,
    http_addr: Option<SocketAddr>,
    stop: CancellationToken,
    task: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
    http_task: Option<JoinHandle<std::io::Result<()>>>,
    started_at: SystemTime,
}

impl ServeHandle {
    /// The address it listens on (with the port picked, if port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address of the HTTP listener (`GET /metrics`, the dashboard at `/`), if
    /// [`GrpcServerBuilder::http_addr`] asked for one, with the port picked.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// When it started serving.
    pub fn started_at(&self) -> SystemTime {
        self.started_at
    }

    /// Stops serving and waits until the server has ended.
    pub async fn shutdown(mut self) -> Result<(), GrpcError> {
        self.stop.cancel();
        self.join().await
    }

    /// Waits until the server ends (after [`shutdown`](Self::shutdown) elsewhere, or a
    /// transport failure), without stopping it.
    pub async fn wait(mut self) -> Result<(), GrpcError> {
        self.join().await
    }

    async fn join(&mut self) -> Result<(), GrpcError> {
        let grpc = match self.task.take() {
            Some(task) => match task.await {
                Ok(served) => served.map_err(GrpcError::Transport),
                Err(e) => Err(GrpcError::Task(e.to_string())),
            },
            None => Ok(()),
        };
        // The gRPC server ends on the shared stop token or a failure: stop HTTP with it.
        self.stop.cancel();
        let http = match self.http_task.take() {
            Some(task) => match task.await {
                Ok(served) => served.map_err(GrpcError::Http),
                Err(e) => Err(GrpcError::Task(e.to_string())),
            },
            None => Ok(()),
        };
        grpc.and(http)
    }
}

impl Drop for ServeHandle {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
