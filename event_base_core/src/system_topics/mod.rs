pub(crate) mod announce;
pub(crate) mod discovery;
pub(crate) mod handlers;
