pub(crate) mod assemble;
pub(crate) mod builder;
pub(crate) mod cache_padded;
pub(crate) mod event_bus;
pub(crate) mod global;
pub(crate) mod in_flight;
pub(crate) mod shared;
pub(crate) mod tasks;
