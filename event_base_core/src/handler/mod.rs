pub(crate) mod backoff;
pub(crate) mod middleware;
pub(crate) mod runtime;
pub(crate) mod spec;
