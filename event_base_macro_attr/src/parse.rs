//! Parse: `#[handler(..)]`'s arguments and the function it is on, checked, into a
//! [`HandlerSpec`].
//!
//! Everything the user can get wrong is found here, and every mistake is a `syn::Error`
//! spanned on the offending token (the parameter's name, its value, the `fn` keyword, the
//! arguments). [`expand`](crate::expand) then only turns a valid spec into tokens.
//!
//! Checks run in a fixed order and the first failure is the one reported: the argument
//! syntax, then each parameter in the order written, then the missing `topic`, then the
//! signature (`async`, not a method, not generic, parameters it can bind, a return type it
//! can answer with; see [`signature`](crate::signature)).

use proc_macro2::{Span, TokenStream as TokenStream2};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, ItemFn, Lit, LitInt, LitStr, Token};

use crate::signature::{signature, Signature};

/// Prefix of the reserved topics (the same as `event_base_core::constant::SYSTEM_PREFIX`).
pub(crate) const SYSTEM_PREFIX: &str = "_system.";

/// Reserved topics a handler may subscribe to (the same as
/// `event_base_core::constant::SYSTEM_TOPICS`; a unit test keeps the two in step). The macro
/// does not depend on `event_base_core` (that would build the runtime into the macro), so it
/// keeps its own copy.
pub(crate) const SYSTEM_TOPICS: [&str; 10] = [
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

/// The parameters `#[handler]` knows, for the "unknown parameter" error.
const PARAMS: &str =
    "topic, workers, timeout, retries, shutdown_timeout, middleware, outbox, batch, linger_ms, rate";

/// Example shown when `topic` is not a string literal.
const TOPIC_EXAMPLE: &str = "`topic` must be a string literal, e.g. `topic = \"order.created\"`";

/// A checked `#[handler]`: everything [`expand`](crate::expand) needs.
pub(crate) struct HandlerSpec {
    /// The function the attribute is on, unchanged.
    pub(crate) item: ItemFn,
    /// What its parameters bind and what it returns.
    pub(crate) signature: Signature,
    /// `topic = ".."` (required, not empty, not an unknown `_system.` topic).
    pub(crate) topic: LitStr,
    /// `workers = n`, at least 1; 1 when not given.
    pub(crate) workers: u64,
    /// `timeout = secs`, at least 1.
    pub(crate) timeout: Option<u64>,
    /// `retries = n`.
    pub(crate) retries: Option<u32>,
    /// `shutdown_timeout = secs`.
    pub(crate) shutdown_timeout: Option<u64>,
    /// The elements of `middleware = [..]`, outermost first; empty when not given.
    pub(crate) middleware: Vec<Expr>,
    /// `outbox` (or `outbox = true`): the handler's sends are released with its `Ack`.
    pub(crate) outbox: bool,
    /// `batch = n` (at least 1) and `linger_ms = ms` (0 when not given): a batch handler.
    pub(crate) batch: Option<(u64, u64)>,
    /// `rate = "100/s"`: checked by the expansion, as a constant (`check_rate`).
    pub(crate) rate: Option<LitStr>,
}

/// Parses and checks the attribute's arguments `attr` and the function `item`.
pub(crate) fn parse(attr: TokenStream2, item: ItemFn) -> syn::Result<HandlerSpec> {
    let params: Params = syn::parse2(attr)?;
    let settings = Settings::from_params(params)?;
    let topic = settings.topic.ok_or_else(|| {
        syn::Error::new(
            Span::call_site(),
            "missing `topic`: write `#[handler(topic = \"order.created\")]`",
        )
    })?;
    let batch = settings.batch.map(|n| (n, settings.linger_ms.unwrap_or(0)));
    let signature = signature(&item, batch.is_some())?;
    Ok(HandlerSpec {
        item,
        signature,
        topic,
        workers: settings.workers.unwrap_or(1),
        timeout: settings.timeout,
        retries: settings.retries,
        shutdown_timeout: settings.shutdown_timeout,
        middleware: settings
            .middleware
            .map(|a| a.elems.into_iter().collect())
            .unwrap_or_default(),
        outbox: settings.outbox.unwrap_or(false),
        batch,
        rate: settings.rate,
    })
}

/// One `name = value` argument, or a bare `name` (a flag: `outbox`), read as `name = true`.
struct Param {
    name: Ident,
    value: Expr,
}

impl Parse for Param {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name: Ident = input.parse()?;
        if input.is_empty() || input.peek(Token![,]) {
            let value: Expr = syn::parse_quote_spanned!(name.span()=> true);
            return Ok(Param { name, value });
        }
        input.parse::<Token![=]>()?;
        let value: Expr = input.parse()?;
        Ok(Param { name, value })
    }
}

/// The comma-separated arguments.
struct Params(Punctuated<Param, Token![,]>);

impl Parse for Params {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        Ok(Params(Punctuated::parse_terminated(input)?))
    }
}

/// The parameters given, each checked, before the required ones are enforced.
#[derive(Default)]
struct Settings {
    topic: Option<LitStr>,
    workers: Option<u64>,
    timeout: Option<u64>,
    retries: Option<u32>,
    shutdown_timeout: Option<u64>,
    middleware: Option<syn::ExprArray>,
    outbox: Option<bool>,
    batch: Option<u64>,
    linger_ms: Option<u64>,
    rate: Option<LitStr>,
    /// Where each parameter was named, for errors about two that do not go together.
    names: Vec<Ident>,
}

impl Settings {
    /// Checks every parameter in the order written; a repeated or unknown name is an error
    /// on the name.
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
            s.set(&key, &p)?;
            seen.push(key);
            s.names.push(p.name);
        }
        s.check_batch()?;
        Ok(s)
    }

    /// `linger_ms` needs `batch`; `outbox` and `middleware` do not go with it.
    fn check_batch(&self) -> syn::Result<()> {
        let named = |key: &str| self.names.iter().find(|n| *n == key);
        if self.batch.is_none() {
            if let Some(name) = named("linger_ms") {
                return Err(syn::Error::new_spanned(
                    name,
                    "`linger_ms` is for batch handlers: add `batch = n` (the most messages per call)",
                ));
            }
            return Ok(());
        }
        if let (Some(name), Some(true)) = (named("outbox"), self.outbox) {
            return Err(syn::Error::new_spanned(
                name,
                "a batch handler has no outbox (it holds one delivery's sends): drop `outbox` or `batch`",
            ));
        }
        if let Some(name) = named("middleware") {
            return Err(syn::Error::new_spanned(
                name,
                "middleware wraps single deliveries and cannot wrap a batch handler: drop `middleware` or `batch`",
            ));
        }
        Ok(())
    }

    /// Checks the value of parameter `key` and stores it.
    fn set(&mut self, key: &str, p: &Param) -> syn::Result<()> {
        match key {
            "topic" => self.topic = Some(topic(&p.value)?),
            "rate" => match &p.value {
                Expr::Lit(syn::ExprLit {
                    lit: Lit::Str(s), ..
                }) => self.rate = Some(s.clone()),
                other => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "`rate` must be a string literal, e.g. `rate = \"100/s\"`",
                    ))
                }
            },
            "workers" => {
                let n = at_least_one(&p.value, "workers", "`workers` must be at least 1")?;
                self.workers = Some(n);
            }
            "timeout" => {
                let n = at_least_one(
                    &p.value,
                    "timeout",
                    "`timeout` is in seconds and must be at least 1; leave it out for no timeout",
                )?;
                self.timeout = Some(n);
            }
            "batch" => {
                let n = at_least_one(
                    &p.value,
                    "batch",
                    "`batch` is the most messages per call and must be at least 1",
                )?;
                self.batch = Some(n);
            }
            "linger_ms" => self.linger_ms = Some(lit_int(&p.value, "linger_ms")?.base10_parse()?),
            "retries" => self.retries = Some(lit_int(&p.value, "retries")?.base10_parse()?),
            "shutdown_timeout" => {
                let i = lit_int(&p.value, "shutdown_timeout")?;
                self.shutdown_timeout = Some(i.base10_parse()?);
            }
            "outbox" => match &p.value {
                Expr::Lit(syn::ExprLit {
                    lit: Lit::Bool(b), ..
                }) => self.outbox = Some(b.value),
                other => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "`outbox` is a flag: write `outbox` (or `outbox = true`)",
                    ))
                }
            },
            "middleware" => match &p.value {
                Expr::Array(a) => self.middleware = Some(a.clone()),
                other => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "`middleware` must be a list, e.g. `middleware = [LoggerMiddleware]`",
                    ))
                }
            },
            _ => {
                return Err(syn::Error::new_spanned(
                    &p.name,
                    format!("unknown parameter `{key}`; expected one of: {PARAMS}"),
                ))
            }
        }
        Ok(())
    }
}

/// `topic`'s value: a string literal, not blank, and not a `_system.` name outside
/// [`SYSTEM_TOPICS`].
fn topic(e: &Expr) -> syn::Result<LitStr> {
    let lit = match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Str(s) => s.clone(),
            other => return Err(syn::Error::new_spanned(other, TOPIC_EXAMPLE)),
        },
        other => return Err(syn::Error::new_spanned(other, TOPIC_EXAMPLE)),
    };
    let value = lit.value();
    if value.trim().is_empty() {
        return Err(syn::Error::new_spanned(&lit, "`topic` must not be empty"));
    }
    if value.starts_with(SYSTEM_PREFIX) && !SYSTEM_TOPICS.contains(&value.as_str()) {
        return Err(syn::Error::new_spanned(
            &lit,
            format!(
                "`{value}` is under the reserved `_system.` prefix and is not a system topic; pick another name"
            ),
        ));
    }
    Ok(lit)
}

/// A whole number literal that is at least 1; `zero` is the error for 0.
fn at_least_one(e: &Expr, what: &str, zero: &str) -> syn::Result<u64> {
    let i = lit_int(e, what)?;
    let n: u64 = i.base10_parse()?;
    if n == 0 {
        return Err(syn::Error::new_spanned(&i, zero));
    }
    Ok(n)
}

/// The value of parameter `what` as an integer literal.
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

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn item(tokens: TokenStream2) -> ItemFn {
        syn::parse2(tokens).unwrap()
    }

    fn handler_fn() -> ItemFn {
        item(quote!(
            async fn h(msg: &EMessage) -> Ack {
                Ack::Ack
            }
        ))
    }

    fn error_of(attr: TokenStream2, f: ItemFn) -> String {
        match parse(attr, f) {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn system_topics_are_the_cores() {
        assert_eq!(SYSTEM_PREFIX, event_base_core::constant::SYSTEM_PREFIX);
        // Slices, so a topic added to the core fails here instead of not compiling.
        assert_eq!(&SYSTEM_TOPICS[..], event_base_core::constant::SYSTEM_TOPICS);
    }

    #[test]
    fn every_parameter_lands_in_the_spec() {
        let spec = parse(
            quote!(
                topic = "order.created",
                workers = 4,
                timeout = 30,
                retries = 5,
                shutdown_timeout = 7,
                middleware = [A, B::new()]
            ),
            handler_fn(),
        )
        .unwrap();
        assert_eq!(spec.topic.value(), "order.created");
        assert_eq!(spec.workers, 4);
        assert_eq!(spec.timeout, Some(30));
        assert_eq!(spec.retries, Some(5));
        assert_eq!(spec.shutdown_timeout, Some(7));
        assert_eq!(spec.middleware.len(), 2);
        assert_eq!(spec.item.sig.ident, "h");
    }

    #[test]
    fn batch_and_linger_land_in_the_spec_and_refuse_what_does_not_go_with_them() {
        let batch_fn = || {
            item(quote!(
                async fn store(batch: &[EMessage]) -> Vec<Ack> {
                    vec![]
                }
            ))
        };
        let spec = parse(quote!(topic = "t", batch = 500, linger_ms = 10), batch_fn()).unwrap();
        assert_eq!(spec.batch, Some((500, 10)));
        let spec = parse(quote!(topic = "t", batch = 8), batch_fn()).unwrap();
        assert_eq!(spec.batch, Some((8, 0)));
        let e = error_of(quote!(topic = "t", batch = 0), batch_fn());
        assert!(e.contains("at least 1"), "{e}");
        let e = error_of(quote!(topic = "t", linger_ms = 5), handler_fn());
        assert!(e.contains("add `batch = n`"), "{e}");
        let e = error_of(quote!(topic = "t", batch = 2, outbox), batch_fn());
        assert!(e.contains("no outbox"), "{e}");
        let e = error_of(quote!(topic = "t", batch = 2, middleware = [A]), batch_fn());
        assert!(e.contains("cannot wrap a batch handler"), "{e}");
        // A batch handler takes the batch, and a single handler does not.
        let e = error_of(quote!(topic = "t", batch = 2), handler_fn());
        assert!(
            e.contains("a batch handler takes `batch: &[EMessage]`"),
            "{e}"
        );
        let e = error_of(quote!(topic = "t"), batch_fn());
        assert!(e.contains("add `batch = n`"), "{e}");
    }

    #[test]
    fn defaults_when_only_the_topic_is_given() {
        let spec = parse(quote!(topic = "t"), handler_fn()).unwrap();
        assert_eq!(spec.workers, 1);
        assert_eq!(spec.timeout, None);
        assert_eq!(spec.retries, None);
        assert_eq!(spec.shutdown_timeout, None);
        assert!(spec.middleware.is_empty());
    }

    #[test]
    fn system_topics_are_accepted_and_other_reserved_names_refused() {
        for t in SYSTEM_TOPICS {
            assert!(parse(quote!(topic = #t), handler_fn()).is_ok(), "{t}");
        }
        let e = error_of(quote!(topic = "_system.mine"), handler_fn());
        assert!(e.contains("reserved `_system.` prefix"), "{e}");
    }

    #[test]
    fn parameter_errors_come_before_signature_errors() {
        let not_async = item(quote!(
            fn h(msg: &EMessage) -> Ack {
                Ack::Ack
            }
        ));
        let e = error_of(quote!(topic = "t", workers = 0), not_async.clone());
        assert_eq!(e, "`workers` must be at least 1");
        let e = error_of(quote!(topic = "t"), not_async);
        assert_eq!(e, "a handler must be an `async fn(msg: &EMessage) -> Ack`");
    }

    #[test]
    fn signature_errors() {
        let two_args = item(quote!(
            async fn h(a: &EMessage, b: u8) -> Ack {
                Ack::Ack
            }
        ));
        let e = error_of(quote!(topic = "t"), two_args);
        assert!(e.starts_with("expected `Json<T>` or `&EMessage`"), "{e}");
        let generic = item(quote!(
            async fn h<T>(a: &EMessage) -> Ack {
                Ack::Ack
            }
        ));
        assert_eq!(
            error_of(quote!(topic = "t"), generic),
            "a handler cannot be generic"
        );
    }

    fn sig_of(f: TokenStream2) -> Signature {
        match parse(quote!(topic = "t"), item(f)) {
            Ok(spec) => spec.signature,
            Err(e) => panic!("expected a valid handler: {e}"),
        }
    }

    #[test]
    fn the_forms_bind_their_parameters_in_order() {
        use crate::signature::{Input, Output};
        let s = sig_of(quote!(
            async fn h(msg: &EMessage) -> Ack {
                Ack::Ack
            }
        ));
        assert!(matches!(s.inputs[..], [Input::Message]));
        assert!(matches!(s.output, Output::Ack));
        let s = sig_of(quote!(
            async fn h(Json(o): Json<Order>, m: &event_base::EMessage) -> Result<(), String> {
                Ok(())
            }
        ));
        assert!(matches!(s.inputs[..], [Input::Json(_), Input::Message]));
        assert!(matches!(s.output, Output::Result(_)));
        let s = sig_of(quote!(
            async fn h(o: Json<Order>) -> anyhow::Result<Ack> {
                Ok(Ack::Ack)
            }
        ));
        assert!(matches!(s.inputs[..], [Input::Json(_)]));
        assert!(matches!(s.output, Output::Result(_)));
    }

    #[test]
    fn parameters_and_returns_it_cannot_bind() {
        let cases = [
            (
                quote!(
                    async fn h() -> Ack {}
                ),
                "a handler takes `msg: &EMessage`",
            ),
            (
                quote!(
                    async fn h(o: Order) -> Ack {}
                ),
                "expected `Json<T>` or `&EMessage`",
            ),
            (
                quote!(
                    async fn h(m: EMessage) -> Ack {}
                ),
                "take the message by reference",
            ),
            (
                quote!(
                    async fn h(m: &mut EMessage) -> Ack {}
                ),
                "not `&mut EMessage`",
            ),
            (
                quote!(
                    async fn h(o: &Json<Order>) -> Ack {}
                ),
                "take the payload by value",
            ),
            (
                quote!(
                    async fn h(o: Json) -> Ack {}
                ),
                "name the payload's type",
            ),
            (
                quote!(
                    async fn h(a: Json<A>, b: Json<B>) -> Ack {}
                ),
                "one `Json<T>` parameter",
            ),
            (
                quote!(
                    async fn h(a: &EMessage, b: &EMessage) -> Ack {}
                ),
                "the message is passed once",
            ),
            (
                quote!(
                    async fn h(a: Json<A>, b: &EMessage, c: &EMessage) -> Ack {}
                ),
                "at most two parameters",
            ),
            (
                quote!(
                    async fn h(m: &EMessage) {}
                ),
                "add `-> Ack`",
            ),
            (
                quote!(
                    async fn h(m: &EMessage) -> bool {}
                ),
                "a handler returns `Ack`, `Result<(), E>` or `Result<Ack, E>`",
            ),
        ];
        for (f, expected) in cases {
            let shown = f.to_string();
            let e = error_of(quote!(topic = "t"), item(f));
            assert!(e.contains(expected), "{shown}: {e}");
        }
    }
}
