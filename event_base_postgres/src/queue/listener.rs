//! The listener: a connection of its own that `LISTEN`s on the queues' channels and turns
//! each notification into a wake-up of this process's consumers of that subscription (or,
//! on the routes channel, into a fresh read of the routes). Nothing is queried while
//! nothing happens.
//!
//! Notifications sent while the connection was down (or before its `LISTEN` took effect)
//! are lost, so once `LISTEN` answered, after every (re)connect, every consumer here is
//! woken to look once, and the routes are read again.

use std::sync::Weak;
use std::time::Duration;

use tokio_postgres::AsyncMessage;

use crate::queue::shared::Shared;
use crate::queue::sql::{CHANNEL, ROUTES_CHANNEL};

/// Runs until the factory is gone.
pub(crate) async fn run(shared: Weak<Shared>) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let Some(s) = shared.upgrade() else { return };
        let config = s.config.clone();
        let mut stop = s.stop.subscribe();
        drop(s);
        let connected = tokio::select! {
            c = listen(&config) => c,
            _ = stop.changed() => return,
        };
        let (client, mut connection) = match connected {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(target: "event_base::postgres", error = %e, "the queues' listener cannot reach PostgreSQL; trying again");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        backoff = Duration::from_millis(50);
        // The LISTEN statement was sent; the connection is polled here from now on, and
        // the client kept so the session stays open.
        let statement = format!("LISTEN {CHANNEL}; LISTEN {ROUTES_CHANNEL}");
        let mut listening = Box::pin(client.batch_execute(&statement));
        let mut listened = false;
        loop {
            let message = tokio::select! {
                m = std::future::poll_fn(|cx| connection.poll_message(cx)) => m,
                r = &mut listening, if !listened => {
                    listened = true;
                    if let Err(e) = r {
                        tracing::debug!(target: "event_base::postgres", error = %e, "LISTEN failed");
                        break;
                    }
                    // Listening from now on: whatever was notified before is looked at
                    // once by everyone.
                    if let Some(s) = shared.upgrade() {
                        s.wakes.ring_all();
                        s.routes_changed();
                    }
                    continue;
                }
                _ = stop.changed() => return,
            };
            let Some(s) = shared.upgrade() else { return };
            match message {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if n.channel() == ROUTES_CHANNEL {
                        s.routes_changed();
                    } else {
                        s.wakes.ring(n.payload(), &s.owner);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::debug!(target: "event_base::postgres", error = %e, "the queues' listener lost PostgreSQL; listening again");
                    break;
                }
                None => break,
            }
        }
    }
}

/// A new connection, not yet driven: the caller polls it for notifications.
async fn listen(
    config: &tokio_postgres::Config,
) -> Result<
    (
        tokio_postgres::Client,
        tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
    ),
    crate::error::PostgresError,
> {
    config
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|source| crate::error::PostgresError::Unreachable { source })
}
