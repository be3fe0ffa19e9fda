//! `#[handler]`: turns an `async fn(&EMessage) -> Ack` into a registered event_base handler.
//!
//! Applications use it as `event_base::handler` (in `event_base::prelude`); the parameters
//! and a compiling example are on [`macro@handler`].
//!
//! ```
//! use event_base::prelude::*;
//!
//! #[handler(topic = "order.created", workers = 4, timeout = 30, retries = 5)]
//! async fn handle_order(msg: &EMessage) -> Ack {
//!     Ack::Ack
//! }
//! # fn main() {}
//! ```
//!
//! The function may also take the payload decoded (`order: Json<Order>`, alone or with
//! `msg: &EMessage`) and return `Result<(), E>` or `Result<Ack, E>`; see
//! [Typed handlers](macro@handler#typed-handlers).
//!
//! The function stays callable as written. Beside it the macro generates a unit struct named
//! after it in PascalCase with a `Handler` suffix (`HandleOrderHandler`) that implements
//! `EHandler`, and a `HandlerRegistration` in `HANDLER_REGISTRY`, which `start_system!` reads.
//!
//! | parameter | meaning | default |
//! |---|---|---|
//! | `topic = "name"` | topic to subscribe to (required) | — |
//! | `workers = n` | concurrent workers, at least 1 | 1 |
//! | `timeout = secs` | per-delivery timeout; a handler past it is cancelled and retried | none |
//! | `retries = n` | retries for panics, timeouts and `Err` returns, and the `max_retries` of `Ack::retry()` | 3 |
//! | `shutdown_timeout = secs` | time to finish the current message at shutdown | none |
//! | `rate = "100/s"` | at most that many handler starts per period, across workers and nodes | no limit |
//! | `middleware = [A, B::new()]` | middleware values, outermost first | none |
//! | `outbox` | sends made by the handler are held until it acks, then written with its completion | off |
//! | `batch = n` | a batch handler: `async fn(batch: &[EMessage])` gets up to `n` ready messages per call | off |
//! | `linger_ms = ms` | with `batch`: how long to wait for a batch to fill | 0 |
//!
//! Every mistake (unknown or repeated parameter, wrong type, a topic under the reserved
//! `_system.` prefix that is not a system topic, a function that is not `async`, a parameter
//! that is not `Json<T>` or `&EMessage`, a return type that is not an answer) is a compile
//! error pointing at the offending part.
//!
//! The crate is two steps: `parse` checks the arguments and the function into a plain
//! `HandlerSpec` (every error found there; the function's signature in `signature`), `expand`
//! turns that into tokens. This file is only the entry point.

use proc_macro::TokenStream;
use quote::quote;
use syn::ItemFn;

mod expand;
mod parse;
mod signature;

/// Declares an event_base handler: an `async fn(msg: &EMessage) -> Ack` (or one of the
/// [typed forms](#typed-handlers)) that every bus started with `start_system!` (or built with
/// `.with_registered_handlers()`) runs for its topic.
///
/// ```text
/// #[handler(topic = "..", workers = n, timeout = secs, retries = n, shutdown_timeout = secs, rate = "n/s", middleware = [..])]
/// #[handler(topic = "..", batch = n, linger_ms = ms, ..)]
/// ```
///
/// # Parameters
///
/// Each at most once, in any order; only `topic` is required.
///
/// | parameter | value | default | meaning |
/// |---|---|---|---|
/// | `topic` | string literal, **required** | — | the topic to subscribe to. Not empty; a name under the reserved `_system.` prefix only if it is one of the bus's system topics (`_system.dead_letter`, `_system.audit`, ..) |
/// | `workers` | whole number, at least 1 | `1` | how many workers run this handler, i.e. how many deliveries of the topic run at once |
/// | `timeout` | whole seconds, at least 1 | none (no limit) | per-delivery time limit: a handler past it is cancelled and the delivery counts as failed (retried, then a dead letter with `DeadReason::Timeout`) |
/// | `retries` | whole number | `3` | retries after the first delivery for panics, timeouts and `Err` returns, and the `max_retries` that `Ack::retry()` and `Ack::retry_after(..)` answer with |
/// | `shutdown_timeout` | whole seconds | none (the strategy's own limit) | the longest a shutdown waits for each of this handler's workers to finish its message; past it the worker is cancelled and the message is left in the WAL for the next start |
/// | `middleware` | a list of expressions, `[A, B::new(..)]` | none | middleware values (each an `impl Middleware`) wrapped around this handler, outermost first, inside the bus-wide middleware of `EventBusBuilder::middleware` |
/// | `outbox` | a flag (`outbox`, or `outbox = true`) | off | the messages the handler sends while it runs (to its own bus, from its own task) are held and released only with its `Ack`, in the same WAL record as its completion; on `NoAck`, `Dead`, a panic or a timeout they are discarded (`HandlerSpec::outbox`) |
/// | `rate` | a string `"<count>/<period>"`: `"100/s"`, `"30/m"`, `"1000/h"`, `"5/250ms"` | no limit | at most that many handler starts per period, spaced evenly, across the handler's workers and, on Redis, every node running it; messages beyond it wait, never dropped (`HandlerSpec::rate`). A rate that does not parse fails to compile |
/// | `batch` | whole number, at least 1 | off | a [batch handler](#batch-handlers): its worker hands it up to `batch` ready messages per call (`HandlerSpec::batch`) |
/// | `linger_ms` | whole milliseconds, with `batch` | `0` | how long a worker holding fewer than `batch` messages waits for more before it calls; never while the bus shuts down |
///
/// Any other name is a compile error that lists these. Every mistake (an unknown or repeated
/// parameter, a value of the wrong type, `workers = 0`, `timeout = 0`, an empty or reserved
/// topic, a function that is not `async`, is a method or is generic, a parameter that is
/// neither `Json<T>` nor `&EMessage`, a return type that is not an answer) is a compile error
/// spanned on the offending token, never a panic at start-up.
///
/// # Typed handlers
///
/// | the function takes | it gets |
/// |---|---|
/// | `msg: &EMessage` | the delivered message |
/// | `order: Json<Order>` (`Order: Deserialize`) | the payload decoded from JSON; `Json(order): Json<Order>` unpacks it |
/// | both, in either order | both |
///
/// A payload that does not decode is a dead letter at once (no retries: bad input does not
/// get better), with `DeadReason::Other` naming the type and serde's message; the function
/// does not run.
///
/// | the function returns | the bus does |
/// |---|---|
/// | `Ack` | what it says (the function is called and nothing else) |
/// | `Result<(), E>`, `Result<Ack, E>` with `E: Display` | `Ok(())` is `Ack::Ack`, `Ok(ack)` is `ack`; `Err(e)` is a failed delivery, as a panic is: retried under `retries` with the handler's backoff, then a dead letter with `DeadReason::Other(e.to_string())` |
///
/// The `Err` text is also each retry's audit reason. The conversion is `event_base::IntoAck`.
/// Types are recognised as written (`Json<..>`, `&EMessage`, `Ack`, `Result<..>`, so
/// `anyhow::Result<()>` works), and a type alias of your own for one of them is refused:
/// write it out.
///
/// ```
/// use event_base::prelude::*;
/// use std::time::Duration;
///
/// #[derive(serde::Deserialize)]
/// struct Order {
///     id: u32,
/// }
///
/// #[handler(topic = "order.placed", retries = 0)]
/// async fn place_order(Json(order): Json<Order>, msg: &EMessage) -> Result<(), String> {
///     if order.id == 0 {
///         return Err(format!("message {}: order 0 does not exist", msg.id));
///     }
///     Ok(())
/// }
///
/// #[tokio::main(flavor = "current_thread")]
/// async fn main() -> Result<(), CoreError> {
///     let bus = event_base::builder().with_registered_handlers().build().await?;
///     bus.send("order.placed", r#"{"id":7}"#).await?;
///     let missing = bus.send("order.placed", r#"{"id":0}"#).await?;
///     bus.send("order.placed", "not an order").await?;
///     bus.wait_idle(Duration::from_secs(5)).await?;
///     let mut reasons: Vec<String> =
///         bus.dead_letters().await?.iter().map(|d| d.reason.to_string()).collect();
///     reasons.sort();
///     assert!(reasons[0].starts_with("could not decode the payload as"));
///     assert_eq!(reasons[1], format!("message {missing}: order 0 does not exist"));
///     bus.shutdown(ShutdownStrategy::Force).await?;
///     Ok(())
/// }
/// ```
///
/// # Batch handlers
///
/// With `batch = n` the function takes `batch: &[EMessage]` (at least one, at most `n`
/// messages, in the order taken) and returns `Ack` (the answer for every message), `Vec<Ack>`
/// (one per message, in order; a list of another length fails every message of the batch), or
/// `Result<(), E>` / `Result<Ack, E>` (for every message). A panic or a timeout fails every
/// message of the batch; retries, backoff and dead letters then apply to each message on its
/// own count (`event_base::EBatchHandler` has the table). The generated struct implements
/// `EBatchHandler`. `outbox` and `middleware` do not go with `batch` (compile errors).
///
/// ```
/// use event_base::prelude::*;
///
/// #[handler(topic = "metrics.points", batch = 500, linger_ms = 10)]
/// async fn store(batch: &[EMessage]) -> Vec<Ack> {
///     batch.iter().map(|m| if m.payload.0.is_empty() { Ack::dead() } else { Ack::Ack }).collect()
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let points = [EMessage::standard("metrics.points", b"cpu=1".to_vec())];
/// assert_eq!(StoreHandler.handle_batch(&points).await, BatchAck::Each(vec![Ack::Ack]));
/// # }
/// ```
///
/// # What it generates
///
/// The function stays callable as written. Beside it: a unit struct named after it in
/// PascalCase with a `Handler` suffix (`handle_order` → `HandleOrderHandler`) that implements
/// `EHandler`, and a `HandlerRegistration` in `HANDLER_REGISTRY` (handler name: the function's
/// name; workers are named `<name>-0`, `<name>-1`, ..). The registry is filled by the linker:
/// when handlers live in a library crate, name it in the binary (`use my_handlers as _;`).
///
/// # Example
///
/// Every parameter (`LoggerMiddleware` needs event_base's `middleware` feature):
///
/// ```
/// use event_base::prelude::*;
/// use std::time::Duration;
///
/// #[handler(
///     topic = "order.created",
///     workers = 2,
///     timeout = 30,
///     retries = 5,
///     shutdown_timeout = 10,
///     middleware = [LoggerMiddleware]
/// )]
/// async fn handle_order(msg: &EMessage) -> Ack {
///     if msg.payload.0.is_empty() {
///         return Ack::dead(); // bad input: a dead letter now
///     }
///     Ack::Ack
/// }
///
/// #[tokio::main(flavor = "current_thread")]
/// async fn main() -> Result<(), CoreError> {
///     // The function is still a function, and the generated struct an `EHandler`.
///     let msg = EMessage::standard("order.created", b"#1".to_vec());
///     assert_eq!(handle_order(&msg).await, Ack::Ack);
///     assert_eq!(HandleOrderHandler.handler(&msg).await, Ack::Ack);
///
///     let bus = event_base::builder().with_registered_handlers().build().await?;
///     assert_eq!(bus.workers("order.created"), ["handle_order-0", "handle_order-1"]);
///     bus.send("order.created", b"#2".to_vec()).await?;
///     bus.wait_idle(Duration::from_secs(5)).await?;
///     assert_eq!(bus.metrics().topic("order.created").unwrap().acked, 1);
///     bus.shutdown(ShutdownStrategy::Force).await?;
///     Ok(())
/// }
/// ```
#[proc_macro_attribute]
pub fn handler(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item = match syn::parse::<ItemFn>(item) {
        Ok(f) => f,
        Err(e) => return e.to_compile_error().into(),
    };
    match parse::parse(attr.into(), item.clone()) {
        Ok(spec) => expand::expand(&spec).into(),
        Err(e) => {
            // Keep the function so the error above is the only one the user sees.
            let err = e.to_compile_error();
            quote!(#err #item).into()
        }
    }
}
