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
//! | `retries = n` | retries for `NoAck` without `max_retries`, panics and timeouts | 3 |
//! | `shutdown_timeout = secs` | time to finish the current message at shutdown | none |
//! | `middleware = [A, B::new()]` | middleware values, outermost first | none |
//!
//! Every mistake (unknown or repeated parameter, wrong type, a topic under the reserved
//! `_system.` prefix that is not a system topic, a function that is not `async` or takes other
//! arguments) is a compile error pointing at the offending part.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, ExprArray, Ident, ItemFn, Lit, LitInt, LitStr, Token};

/// Reserved topics a handler may subscribe to (kept in step with `event_base_core::constant`).
const SYSTEM_TOPICS: [&str; 10] = [
    "_system.audit",
    "_system.trace",
    "_system.wal_sync",
    "_system.shutdown",
    "_system.shutdown_ack",
    "_system.worker_discovery",
    "_system.worker_heartbeat",
    "_system.topic_sync",
    "_system.topic_discovery",
    "_system.dead_letter",
];

const PARAMS: &str = "topic, workers, timeout, retries, shutdown_timeout, middleware";

struct Param {
    name: Ident,
    value: Expr,
}

impl Parse for Param {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name: Ident = input.parse()?;
        input.parse::<Token![=]>()?;
        let value: Expr = input.parse()?;
        Ok(Param { name, value })
    }
}

struct Params(Punctuated<Param, Token![,]>);

impl Parse for Params {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        Ok(Params(Punctuated::parse_terminated(input)?))
    }
}

#[derive(Default)]
struct Settings {
    topic: Option<LitStr>,
    workers: Option<u64>,
    timeout: Option<u64>,
    retries: Option<u32>,
    shutdown_timeout: Option<u64>,
    middleware: Option<ExprArray>,
}

fn lit_int(e: &Expr, what: &str) -> syn::Result<LitInt> {
    match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => Ok(i.clone()),
            other => Err(syn::Error::new_spanned(
                other,
                format!("`{what}` must be a whole number, e.g. `{what} = 4`"),
            )),
        },
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{what}` must be a whole number literal, e.g. `{what} = 4`"),
        )),
    }
}

impl Settings {
    fn from_params(params: Params) -> syn::Result<Settings> {
        let mut s = Settings::default();
        let mut seen: Vec<String> = Vec::new();
        for p in params.0 {
            let key = p.name.to_string();
            if seen.contains(&key) {
                return Err(syn::Error::new_spanned(
                    &p.name,
                    format!("`{key}` is given twice"),
                ));
            }
            seen.push(key.clone());
            match key.as_str() {
                "topic" => {
                    let lit = match &p.value {
                        Expr::Lit(l) => match &l.lit {
                            Lit::Str(s) => s.clone(),
                            other => {
                                return Err(syn::Error::new_spanned(
                                    other,
                                    "`topic` must be a string literal, e.g. `topic = \"order.created\"`",
                                ))
                            }
                        },
                        other => {
                            return Err(syn::Error::new_spanned(
                                other,
                                "`topic` must be a string literal, e.g. `topic = \"order.created\"`",
                            ))
                        }
                    };
                    let value = lit.value();
                    if value.trim().is_empty() {
                        return Err(syn::Error::new_spanned(&lit, "`topic` must not be empty"));
                    }
                    if value.starts_with("_system.") && !SYSTEM_TOPICS.contains(&value.as_str()) {
                        return Err(syn::Error::new_spanned(
                            &lit,
                            format!("`{value}` is under the reserved `_system.` prefix and is not a system topic; pick another name"),
                        ));
                    }
                    s.topic = Some(lit);
                }
                "workers" => {
                    let i = lit_int(&p.value, "workers")?;
                    let n: u64 = i.base10_parse()?;
                    if n == 0 {
                        return Err(syn::Error::new_spanned(&i, "`workers` must be at least 1"));
                    }
                    s.workers = Some(n);
                }
                "timeout" => {
                    let i = lit_int(&p.value, "timeout")?;
                    let n: u64 = i.base10_parse()?;
                    if n == 0 {
                        return Err(syn::Error::new_spanned(
                            &i,
                            "`timeout` is in seconds and must be at least 1; leave it out for no timeout",
                        ));
                    }
                    s.timeout = Some(n);
                }
                "retries" => {
                    let i = lit_int(&p.value, "retries")?;
                    s.retries = Some(i.base10_parse()?);
                }
                "shutdown_timeout" => {
                    let i = lit_int(&p.value, "shutdown_timeout")?;
                    s.shutdown_timeout = Some(i.base10_parse()?);
                }
                "middleware" => {
                    match &p.value {
                        Expr::Array(a) => s.middleware = Some(a.clone()),
                        other => return Err(syn::Error::new_spanned(
                            other,
                            "`middleware` must be a list, e.g. `middleware = [LoggerMiddleware]`",
                        )),
                    }
                }
                _ => {
                    return Err(syn::Error::new_spanned(
                        &p.name,
                        format!("unknown parameter `{key}`; expected one of: {PARAMS}"),
                    ))
                }
            }
        }
        Ok(s)
    }
}

fn pascal_case(name: &str) -> String {
    name.split('_')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            match c.next() {
                Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

fn expand(attr: TokenStream2, item: ItemFn) -> syn::Result<TokenStream2> {
    let params: Params = syn::parse2(attr)?;
    let settings = Settings::from_params(params)?;
    let topic = settings.topic.ok_or_else(|| {
        syn::Error::new(
            Span::call_site(),
            "missing `topic`: write `#[handler(topic = \"order.created\")]`",
        )
    })?;
    if item.sig.asyncness.is_none() {
        return Err(syn::Error::new_spanned(
            item.sig.fn_token,
            "a handler must be an `async fn(msg: &EMessage) -> Ack`",
        ));
    }
    if item.sig.inputs.len() != 1 {
        return Err(syn::Error::new_spanned(
            &item.sig.inputs,
            "a handler takes exactly one argument: `msg: &EMessage`",
        ));
    }
    if let Some(syn::FnArg::Receiver(r)) = item.sig.inputs.first() {
        return Err(syn::Error::new_spanned(
            r,
            "a handler is a free function, not a method; implement `EHandler` for a type instead",
        ));
    }
    if !item.sig.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &item.sig.generics,
            "a handler cannot be generic",
        ));
    }

    let fn_name = &item.sig.ident;
    let vis = &item.vis;
    let name_str = fn_name.to_string();
    let struct_name = format_ident!("{}Handler", pascal_case(&name_str));
    let reg_name = format_ident!("__EVENT_BASE_HANDLER_{}", name_str.to_uppercase());
    let workers = settings.workers.unwrap_or(1) as usize;
    let opt_u64 = |v: Option<u64>| match v {
        Some(n) => quote!(::core::option::Option::Some(#n)),
        None => quote!(::core::option::Option::None),
    };
    let timeout = opt_u64(settings.timeout);
    let shutdown_timeout = opt_u64(settings.shutdown_timeout);
    let retries = match settings.retries {
        Some(n) => quote!(::core::option::Option::Some(#n)),
        None => quote!(::core::option::Option::None),
    };
    let middleware = settings
        .middleware
        .map(|a| a.elems.into_iter().collect::<Vec<_>>())
        .unwrap_or_default();
    let doc = format!(
        "Handler generated by `#[handler]` from `{name_str}` (topic `{}`).",
        topic.value()
    );

    Ok(quote! {
        #item

        #[doc = #doc]
        #[derive(Debug, Clone, Copy, Default)]
        #vis struct #struct_name;

        #[::event_base::__private::async_trait]
        impl ::event_base::EHandler for #struct_name {
            async fn handler(&self, msg: &::event_base::EMessage) -> ::event_base::Ack {
                #fn_name(msg).await
            }
        }

        #[::event_base::__private::linkme::distributed_slice(::event_base::HANDLER_REGISTRY)]
        #[linkme(crate = ::event_base::__private::linkme)]
        #[allow(non_upper_case_globals)]
        static #reg_name: ::event_base::HandlerRegistration = ::event_base::HandlerRegistration {
            name: #name_str,
            topic: #topic,
            workers: #workers,
            timeout_secs: #timeout,
            retries: #retries,
            shutdown_timeout_secs: #shutdown_timeout,
            make_handler: || ::std::sync::Arc::new(#struct_name),
            make_middleware: || {
                ::std::vec![
                    #( ::std::sync::Arc::new(#middleware) as ::std::sync::Arc<dyn ::event_base::Middleware> ),*
                ]
            },
        };
    })
}

/// Declares an event_base handler. See the crate docs for the parameters.
#[proc_macro_attribute]
pub fn handler(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item = match syn::parse::<ItemFn>(item) {
        Ok(f) => f,
        Err(e) => return e.to_compile_error().into(),
    };
    match expand(attr.into(), item.clone()) {
        Ok(ts) => ts.into(),
        Err(e) => {
            // Keep the function so the error above is the only one the user sees.
            let err = e.to_compile_error();
            quote!(#err #item).into()
        }
    }
}
