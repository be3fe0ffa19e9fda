pub(crate) mod ack;
pub(crate) mod context;
pub(crate) mod dead_letter;
pub(crate) mod emessage;
pub(crate) mod id;
