//! [`Pipeline`]: a handler wrapped in its middleware, the unit a worker runs.

use std::sync::Arc;

use crate::handler::ehandler::EHandler;
use crate::handler::middleware::{BoxAckFuture, Middleware, Next};
use crate::message::ack::Ack;
use crate::message::emessage::EMessage;

/// A handler and its middleware, outermost first.
#[derive(Clone)]
pub struct Pipeline {
    middleware: Arc<[Arc<dyn Middleware>]>,
    handler: Arc<dyn EHandler>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("layers", &self.middleware.len())
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// Builds a pipeline.
    pub fn new(handler: Arc<dyn EHandler>, middleware: Vec<Arc<dyn Middleware>>) -> Self {
        Pipeline {
            middleware: middleware.into(),
            handler,
        }
    }

    /// Number of middleware layers.
    pub fn len(&self) -> usize {
        self.middleware.len()
    }

    /// Whether the pipeline has no middleware.
    pub fn is_empty(&self) -> bool {
        self.middleware.is_empty()
    }

    /// Runs the message through the middleware and the handler.
    pub async fn run(&self, msg: &EMessage) -> Ack {
        self.call(msg).await
    }

    /// The future of one run. It is the handler's (or the outermost middleware's) own boxed
    /// future, so running a pipeline adds no allocation of its own.
    pub fn call<'a>(&'a self, msg: &'a EMessage) -> BoxAckFuture<'a> {
        match self.middleware.split_first() {
            None => self.handler.handler(msg),
            Some((first, rest)) => first.handle(msg, Next::new(rest, &*self.handler)),
        }
    }
}
