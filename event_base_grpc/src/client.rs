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
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl ClientOptions {
    /// Options for `addr`, no token, no call deadline, 5 s to connect.
    pub fn new(addr: impl Into<String>) -> Self {
        ClientOptions {
            addr: addr.into(),
            token: None,
            timeout: None,
            connect_timeout: Duration::from_secs(5),
        }
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

/// `addr` with a scheme.
pub(crate) fn with_scheme(addr: &str) -> String {
    if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("http://{addr}")
    }
}

/// The endpoint `options` describe.
pub fn endpoint(options: &ClientOptions) -> Result<Endpoint, GrpcError> {
    let addr = with_scheme(&options.addr);
    let mut endpoint =
        Endpoint::from_shared(addr.clone()).map_err(|e| GrpcError::InvalidAddress {
            addr: options.addr.clone(),
            reason: e.to_string(),
        })?;
    endpoint = endpoint.connect_timeout(options.connect_timeout);
    if let Some(t) = options.timeout {
        endpoint = endpoint.timeout(t);
    }
    Ok(endpoint)
}

/// Connects to the server `options` names.
pub async fn connect(options: &ClientOptions) -> Result<AdminClient, GrpcError> {
    let interceptor = BearerToken::new(options.token.as_deref())?;
    let channel = endpoint(options)?
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
