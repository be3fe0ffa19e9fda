pub(crate) mod backoff;
pub(crate) mod ehandler;
pub(crate) mod middleware;
pub(crate) mod pipeline;
pub(crate) mod runtime;
pub(crate) mod spec;
