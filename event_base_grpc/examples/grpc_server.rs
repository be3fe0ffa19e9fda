//! A bus with two demo handlers, served over gRPC for `ebctl` (or any gRPC client).
//!
//! ```text
//! cargo run -p event_base_grpc --example grpc_server
//! EB_GRPC_ADDR=127.0.0.1:50052 EB_GRPC_TOKEN=s3cret cargo run -p event_base_grpc --example grpc_server
//! EB_HTTP_ADDR=127.0.0.1:8080 cargo run -p event_base_grpc --example grpc_server
//! ```
//!
//! - `orders` (2 workers) acks everything; `payments` answers `Ack::Dead`, so every payment
//!   becomes a dead letter to list, show, replay and purge.
//! - Listens on `EB_GRPC_ADDR` (default `127.0.0.1:50051`). With `EB_GRPC_TOKEN` set, that
//!   is the admin token (and `EB_GRPC_READ_TOKEN`, if set, the read token); without it every
//!   caller is admin, so the server refuses any address but loopback (set a token to serve on
//!   `0.0.0.0`, and TLS too, or `ebctl` will not send the token there without `--insecure`).
//! - With `EB_HTTP_ADDR` set (e.g. `127.0.0.1:8080`), it also serves `GET /metrics` there, in
//!   the Prometheus text format, with the same tokens (the read token is enough): `curl -s
//!   $EB_HTTP_ADDR/metrics`, adding `-H "Authorization: Bearer $EB_GRPC_READ_TOKEN"` when a
//!   token is set. And the web dashboard, at `http://$EB_HTTP_ADDR/`: the page asks for the
//!   token when one is set (or give it as `http://$EB_HTTP_ADDR/#token=...`); the read token
//!   looks, the admin token also replays, deletes and purges. Plain HTTP, even with TLS on
//!   gRPC.
//! - Built with `--features tls`, and with `EB_GRPC_TLS_CERT` and `EB_GRPC_TLS_KEY` naming a
//!   PEM certificate chain and its key, it serves over TLS (`ebctl --addr https://… --tls-ca
//!   ca.pem`).
//! - Runs until Ctrl-C, then drains the bus and stops serving. A `Shutdown` RPC stops the
//!   bus; the server goes on answering reads until Ctrl-C.
//!
//! Then, in another shell:
//!
//! ```text
//! cargo run -p event_base_grpc --bin ebctl -- publish payments --data '{"amount": 12}'
//! cargo run -p event_base_grpc --bin ebctl -- dlq list
//! ```

use std::time::Duration;

use event_base_core::{handler_fn, Ack, EMessage, EventBus, HandlerSpec, ShutdownStrategy};
use event_base_grpc::{GrpcServer, Tokens, WatchFeed};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("EB_GRPC_ADDR").unwrap_or_else(|_| "127.0.0.1:50051".to_owned());
    let mut tokens = Tokens::new();
    if let Ok(admin) = std::env::var("EB_GRPC_TOKEN") {
        tokens = tokens.admin(admin);
        if let Ok(read) = std::env::var("EB_GRPC_READ_TOKEN") {
            tokens = tokens.read(read);
        }
    }

    // Dead letters, worker changes and audit records for `Watch` (`ebctl watch --kind audit`).
    let feed = WatchFeed::default().with_audit(true);
    let builder = EventBus::builder()
        .wal(event_base_wal::MemoryWal::new())
        .queue(event_base_queue::FlumeQueueFactory::default())
        .handler(
            HandlerSpec::new(
                "orders",
                "orders",
                handler_fn(|m: EMessage| async move {
                    println!("orders: handled {} ({} bytes)", m.id, m.payload.len());
                    Ack::Ack
                }),
            )
            .workers(2),
        )
        .handler(HandlerSpec::new(
            "payments",
            "payments",
            handler_fn(|m: EMessage| async move {
                println!("payments: refusing {} (it becomes a dead letter)", m.id);
                Ack::dead()
            }),
        ));
    let bus = feed.register(builder).build().await?;

    let open = tokens.is_open();
    let mut server = GrpcServer::builder(bus.clone())
        .tokens(tokens)
        .watch_feed(feed);
    if let Ok(http) = std::env::var("EB_HTTP_ADDR") {
        server = server.http_addr(http);
    }
    #[cfg(feature = "tls")]
    let (server, scheme) = match (
        std::env::var_os("EB_GRPC_TLS_CERT"),
        std::env::var_os("EB_GRPC_TLS_KEY"),
    ) {
        (Some(cert), Some(key)) => (
            server.tls(std::fs::read(cert)?, std::fs::read(key)?),
            "https",
        ),
        _ => (server, "http"),
    };
    #[cfg(not(feature = "tls"))]
    let scheme = "http";
    let server = server.serve(&addr).await?;
    println!(
        "event_base gRPC server on {} ({}); Ctrl-C to stop",
        server.local_addr(),
        if open { "no token" } else { "token required" }
    );
    println!(
        "try: cargo run -p event_base_grpc --bin ebctl -- --addr {scheme}://{} status",
        server.local_addr()
    );
    if let Some(http) = server.http_addr() {
        println!("metrics: curl -s http://{http}/metrics");
        // The token itself is never printed: the page asks for it.
        println!(
            "dashboard: http://{http}/{}",
            if open {
                ""
            } else {
                " (it asks for the token: the read one to look, the admin one to act)"
            }
        );
    }

    tokio::signal::ctrl_c().await?;
    println!("stopping: draining the bus, then the server");
    let report = bus
        .shutdown(ShutdownStrategy::Drain {
            timeout: Duration::from_secs(10),
        })
        .await?;
    println!(
        "bus stopped ({}; drained: {})",
        report.strategy, report.drained
    );
    server.shutdown().await?;
    Ok(())
}
