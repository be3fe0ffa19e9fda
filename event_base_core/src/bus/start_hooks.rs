//! [`ON_START`]: what the concerns above the bus (`patterns/`) run at each bus's start, after
//! replay, gathered at link time so that the builder runs them without naming them.

/// What a concern above the bus runs at each bus's start, after replay: a future that
/// takes the bus being built.
pub(crate) type StartHook = for<'a> fn(
    &'a crate::bus::event_bus::EventBus,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<(), crate::error::CoreError>> + Send + 'a>,
>;

/// The start hooks, gathered at link time: the concerns above the bus (`patterns/`) add
/// theirs, so that the builder runs them without naming them.
#[linkme::distributed_slice]
pub(crate) static ON_START: [StartHook];

/// Makes the handler of the reply subscription (`constant::REPLY_TOPIC`), which a bus built with
/// `EventBusBuilder::replies(true)` runs: `patterns/request.rs` adds it.
pub(crate) type ReplySubscription = fn() -> crate::handler::spec::HandlerSpec;

/// The reply subscription's maker, gathered at link time (one entry).
#[linkme::distributed_slice]
pub(crate) static REPLY_SUBSCRIPTION: [ReplySubscription];
