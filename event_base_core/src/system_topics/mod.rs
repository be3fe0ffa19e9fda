pub(crate) mod discovery;
pub(crate) mod handlers;
