//! Middleware: code that wraps every delivery of a handler, tower style.
//!
//! A [`Middleware`] receives the message and a [`Next`], the rest of the chain. It may act
//! before calling `next.run(msg)`, after it, or not call it at all and answer an [`Ack`]
//! itself (short-circuit). A [`Pipeline`](crate::Pipeline) is the handler with its middleware;
//! with no middleware it calls the handler directly, so an empty chain costs nothing.
//!
//! ```
//! use event_base_core::{async_trait, Ack, EMessage, Middleware, Next};
//!
//! /// Refuses empty payloads before the handler sees them.
//! struct RejectEmpty;
//!
//! #[async_trait]
//! impl Middleware for RejectEmpty {
//!     async fn handle(&self, msg: &EMessage, next: Next<'_>) -> Ack {
//!         if msg.payload.0.is_empty() {
//!             return Ack::dead();
//!         }
//!         next.run(msg).await
//!     }
//! }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;

use crate::handler::ehandler::EHandler;
use crate::message::ack::Ack;
use crate::message::emessage::EMessage;

/// The boxed future a handler or middleware returns.
pub type BoxAckFuture<'a> = Pin<Box<dyn Future<Output = Ack> + Send + 'a>>;

/// One layer around a handler.
#[async_trait]
pub trait Middleware: Send + Sync + 'static {
    /// Handles `msg`, usually by calling `next.run(msg)` somewhere inside.
    async fn handle(&self, msg: &EMessage, next: Next<'_>) -> Ack;
}

/// The rest of the chain: the inner middleware, then the handler.
pub struct Next<'a> {
    rest: &'a [Arc<dyn Middleware>],
    handler: &'a dyn EHandler,
}

impl std::fmt::Debug for Next<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Next")
            .field("layers_left", &self.rest.len())
            .finish_non_exhaustive()
    }
}

impl<'a> Next<'a> {
    /// The chain from `rest` inwards, ending at `handler`.
    pub(crate) fn new(rest: &'a [Arc<dyn Middleware>], handler: &'a dyn EHandler) -> Self {
        Next { rest, handler }
    }

    /// Runs the rest of the chain.
    pub async fn run(self, msg: &EMessage) -> Ack {
        match self.rest.split_first() {
            Some((first, rest)) => {
                first
                    .handle(
                        msg,
                        Next {
                            rest,
                            handler: self.handler,
                        },
                    )
                    .await
            }
            None => self.handler.handler(msg).await,
        }
    }
}
