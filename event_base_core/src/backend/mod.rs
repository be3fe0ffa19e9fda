pub(crate) mod queue;
pub(crate) mod wal;
