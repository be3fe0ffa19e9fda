//! `#[handler]`: turns an `async fn(&EMessage) -> Ack` into a registered event_base handler.
//!
//! ```ignore
//! use event_base::prelude::*;
//!
//! #[handler(topic = "order.created", workers = 4, timeout = 30, retries = 5)]
//! async fn handle_order(msg: &EMessage) -> Ack {
//!     Ack::Ack
//! }
//! ```
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
//! | `retries = n` | retries for panics and timeouts, and the `max_retries` of `Ack::retry()` | 3 |
//! | `shutdown_timeout = secs` | time to finish the current message at shutdown | none |
//! | `middleware = [A, B::new()]` | middleware values, outermost first | none |
//!
//! Every mistake (unknown or repeated parameter, wrong type, a topic under the reserved
//! `_system.` prefix that is not a system topic, a function that is not `async` or takes other
//! arguments) is a compile error pointing at the offending part.
//!
//! The crate is two steps: `parse` checks the arguments and the function into a plain
//! `HandlerSpec` (every error found there), `expand` turns that into tokens. This file is
//! only the entry point.

use proc_macro::TokenStream;
use quote::quote;
use syn::ItemFn;

mod expand;
mod parse;

/// Declares an event_base handler. See the crate docs for the parameters.
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
