//! # event_base_grpc
//!
//! The gRPC management API of an event_base bus, and `ebctl`, its command-line client.
//!
//! Service `event_base.admin.v1.AdminService` (the proto is
//! `proto/event_base/admin/v1/admin.proto` in this package, compiled by `build.rs` with
//! `protox`: no system `protoc`): status, topics, workers, metrics, WAL stats, dead letters
//! (list with filters and pages, show, replay with edits, bulk replay at a bounded rate,
//! purge), publish, audit of a message, watch, scaling and shutdown. Beside it on the same
//! port: the standard health service and server reflection.
//!
//! ```
//! use event_base_core::{Ack, EMessage, EventBus, HandlerSpec, handler_fn};
//! use event_base_grpc::client::{connect, ClientOptions};
//! use event_base_grpc::{pb, GrpcServer, Tokens};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let bus = EventBus::builder()
//! #   .wal(event_base_wal::MemoryWal::new())
//! #   .queue(event_base_queue::FlumeQueueFactory::default())
//!     .handler(HandlerSpec::new("orders", "orders", handler_fn(|_m: EMessage| async { Ack::Ack })))
//!     .build()
//!     .await?;
//! let server = GrpcServer::builder(bus.clone())
//!     .tokens(Tokens::new().read("look").admin("touch"))
//!     .serve("127.0.0.1:0")
//!     .await?;
//!
//! let addr = format!("http://{}", server.local_addr());
//! let mut client = connect(&ClientOptions::new(addr).token("touch")).await?;
//! let topics = client
//!     .list_topics(pb::ListTopicsRequest::default())
//!     .await?
//!     .into_inner();
//! assert_eq!(topics.topics[0].name, "orders");
//!
//! server.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! ## What is where
//!
//! - [`GrpcServer`] / [`GrpcServerBuilder`] / [`ServeHandle`]: serving a bus. Secure by
//!   default: without tokens, loopback only; limits on concurrency, call time and message
//!   size (see the guide's "Deploying it safely").
//! - [`Tokens`], [`Scope`]: bearer tokens with a read and an admin scope (module [`auth`]).
//! - [`WatchFeed`]: the handlers that let `Watch` see dead letters, worker changes and (with
//!   `with_audit(true)`) audit records.
//! - [`code_for`] / [`status_for`]: how every `CoreError` becomes a gRPC status.
//! - [`prometheus`]: the bus's metrics in the Prometheus text format, served at `GET /metrics`
//!   on [`GrpcServerBuilder::http_addr`].
//! - [`client`]: connecting with a token; [`pb`]: the generated messages, client and server.
//!
//! The guide's gRPC page (`event_base::guide::ch10_grpc`) walks through the server, auth and
//! every `ebctl` command.

#![deny(unsafe_code)]
// docs.rs (`--cfg docsrs`, nightly) marks what each feature adds; stable builds ignore it.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod auth;
pub mod client;
mod convert;
mod dlq;
mod error;
pub mod prometheus;
mod server;
mod status;

pub use auth::{Authenticator, Scope, Tokens};
pub use convert::MAX_WIRE_DURATION;
pub use dlq::MAX_DEAD_LETTERS_SCANNED;
pub use error::GrpcError;
pub use server::watch::{
    WatchFeed, AUDIT_HANDLER, DEAD_LETTER_HANDLER, DEFAULT_METRICS_INTERVAL,
    DEFAULT_WATCH_CAPACITY, WORKER_HANDLER,
};
pub use server::{
    GrpcServer, GrpcServerBuilder, ServeHandle, DEFAULT_CONCURRENCY_PER_CONNECTION,
    DEFAULT_MAX_DECODING_MESSAGE_SIZE, DEFAULT_MAX_ENCODING_MESSAGE_SIZE, DEFAULT_REQUEST_TIMEOUT,
    SERVICE_NAME,
};
pub use status::{code_for, status_for};

/// The generated code of `event_base.admin.v1`: messages, enums, the client
/// (`admin_service_client::AdminServiceClient`) and the server trait
/// (`admin_service_server::AdminService`). Its docs are the proto's comments.
#[allow(
    missing_docs,
    unreachable_pub,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]
pub mod pb {
    tonic::include_proto!("event_base.admin.v1");
}

/// The encoded `FileDescriptorSet` of the admin proto (with its imports): what reflection
/// serves, and what tools that decode the messages dynamically need.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/event_base_admin_v1.bin"));

/// The canonical name of a gRPC code (`NOT_FOUND`).
pub fn code_name(code: tonic::Code) -> &'static str {
    server::code_name(code)
}
