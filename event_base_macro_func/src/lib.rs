//! `send_msg!` and `start_system!`, the function-like macros of event_base.
//!
//! Both expand to calls into the `event_base` umbrella crate, so a user needs only
//! `event_base` and `tokio` as dependencies. Mistakes in their arguments (an unknown key, a key
//! given twice, the wrong number of arguments) are compile errors pointing at the argument.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, Token};

struct KeyValue {
    key: Ident,
    value: Expr,
}

impl Parse for KeyValue {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let key: Ident = input.parse()?;
        input.parse::<Token![:]>()?;
        let value: Expr = input.parse()?;
        Ok(KeyValue { key, value })
    }
}

struct StartArgs(Punctuated<KeyValue, Token![,]>);

impl Parse for StartArgs {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        Ok(StartArgs(Punctuated::parse_terminated(input)?))
    }
}

fn expand_start(input: TokenStream2) -> syn::Result<TokenStream2> {
    let args: StartArgs = syn::parse2(input)?;
    let mut wal = None;
    let mut queue = None;
    let mut batch = None;
    let mut audit = None;
    let mut config = None;
    for kv in args.0 {
        let slot = match kv.key.to_string().as_str() {
            "wal" => &mut wal,
            "queue" => &mut queue,
            "batch_size" => &mut batch,
            "audit" => &mut audit,
            "config" => &mut config,
            other => {
                return Err(syn::Error::new_spanned(
                    &kv.key,
                    format!("unknown key `{other}`; start_system! takes `wal: ..`, `queue: ..`, `batch_size: ..`, `audit: ..` and `config: ..`"),
                ))
            }
        };
        if slot.is_some() {
            return Err(syn::Error::new_spanned(
                &kv.key,
                format!("`{}` is given twice", kv.key),
            ));
        }
        *slot = Some(kv.value);
    }
    if let Some(config) = config {
        return expand_start_config(config, &wal, &queue, batch, audit);
    }
    let batch =
        batch.map(|b| quote!(let __event_base_builder = __event_base_builder.batch_size(#b);));
    let audit = audit.map(|a| quote!(let __event_base_builder = __event_base_builder.audit(#a);));
    // A left-out backend comes from the umbrella's `__private::backends!`: the default one
    // with its `memory` feature, a compile error naming the keys to give without it. The
    // arguments are evaluated where the macro is written (so `?` in them works there); the
    // returned future does the rest.
    let backends = match (wal, queue) {
        (Some(wal), Some(queue)) => quote!((#wal, #queue)),
        (wal, queue) => {
            let wal = wal.iter();
            let queue = queue.iter();
            quote!(::event_base::__private::backends!(wal = [#(#wal)*], queue = [#(#queue)*]))
        }
    };
    Ok(quote! {{
        let (__event_base_wal, __event_base_queue) = #backends;
        let __event_base_builder = ::event_base::EventBus::builder()
            .with_registered_handlers()
            .wal(__event_base_wal)
            .queue(__event_base_queue);
        #batch
        #audit
        ::event_base::__private::start_global(__event_base_builder)
    }})
}

/// `start_system!(config: path_or_config, batch_size: .., audit: ..)`: the backends come from
/// the file, so `wal:` and `queue:` are refused; `batch_size` and `audit` are defaults the
/// file (and its `EB_…` variables) may change.
fn expand_start_config(
    config: Expr,
    wal: &Option<Expr>,
    queue: &Option<Expr>,
    batch: Option<Expr>,
    audit: Option<Expr>,
) -> syn::Result<TokenStream2> {
    if let Some(given) = wal.as_ref().or(queue.as_ref()) {
        return Err(syn::Error::new_spanned(
            given,
            "`config:` takes the backends from the file ([wal] and [queue]); leave out `wal:` and `queue:`, or leave out `config:`",
        ));
    }
    let batch =
        batch.map(|b| quote!(let __event_base_builder = __event_base_builder.batch_size(#b);));
    let audit = audit.map(|a| quote!(let __event_base_builder = __event_base_builder.audit(#a);));
    Ok(quote! {{
        let __event_base_builder = ::event_base::EventBus::builder().with_registered_handlers();
        #batch
        #audit
        ::event_base::__private::config!(__event_base_builder, #config)
    }})
}

/// Starts the global system and returns a future of `Result<EventBus, CoreError>`.
///
/// - `start_system!()`: `MemoryWal`, a bounded flume queue per topic, every `#[handler]`.
/// - `start_system!(wal: W, queue: Q, batch_size: N, audit: A)`: any subset of the keys, in
///   any order. `audit: 0` turns the audit ring off; the default keeps the newest 10,000
///   records.
/// - `start_system!(config: "eb.toml")` (feature `config` of event_base): the backends,
///   bus settings and handler overrides of a TOML file with `EB_…` variables over it (or of
///   an `event_base::config::Config`); `batch_size:` and `audit:` may come with it, as
///   defaults the file may change, `wal:` and `queue:` may not.
///
/// The defaults come with the umbrella's `memory` feature (on by default). Without it, leaving
/// out `wal:` or `queue:` is a compile error that says which keys to give.
///
/// ```ignore
/// let bus = start_system!().await?;
/// let bus = start_system!(queue: FlumeQueueFactory::bounded(100), batch_size: 16).await?;
/// let bus = start_system!(config: "eb.toml").await?;
/// ```
#[proc_macro]
pub fn start_system(input: TokenStream) -> TokenStream {
    match expand_start(input.into()) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

struct SendArgs(Punctuated<Expr, Token![,]>);

impl Parse for SendArgs {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        Ok(SendArgs(Punctuated::parse_terminated(input)?))
    }
}

fn expand_send(input: TokenStream2) -> syn::Result<TokenStream2> {
    let args: SendArgs = syn::parse2(input)?;
    let args: Vec<Expr> = args.0.into_iter().collect();
    match args.as_slice() {
        [topic, message] => Ok(quote! {
            ::event_base::__private::send_msg(#topic, #message)
        }),
        [topic, message, try_send, timeout] => Ok(quote! {
            ::event_base::__private::send_msg_with(#topic, #message, #try_send, #timeout)
        }),
        [] => Err(syn::Error::new(
            Span::call_site(),
            "send_msg! needs a topic and a message: `send_msg!(\"orders\", payload)`",
        )),
        [_] => Err(syn::Error::new(
            Span::call_site(),
            "send_msg! needs a message after the topic: `send_msg!(\"orders\", payload)`",
        )),
        [_, _, extra] => Err(syn::Error::new_spanned(
            extra,
            "send_msg! takes 2 arguments (topic, message) or 4 (topic, message, try_send, timeout)",
        )),
        [_, _, _, _, extra, ..] => Err(syn::Error::new_spanned(
            extra,
            "too many arguments: send_msg! takes (topic, message) or (topic, message, try_send, timeout)",
        )),
    }
}

/// Sends through the global system; a future of `Result<MessageId, CoreError>`.
///
/// - `send_msg!(topic, msg_or_payload)`: an `EMessage`, bytes (`Vec<u8>`, `&'static [u8]`,
///   `Bytes`, `String`) that become a standard message, or `Json(&value)`, encoded as JSON
///   (anything `TryIntoMessage`). Waits while the queue is full.
/// - `send_msg!(topic, msg, try_send, timeout)`: `try_send: Option<bool>`,
///   `timeout: Option<Duration>`, as in `TopicRouter::send`.
#[proc_macro]
pub fn send_msg(input: TokenStream) -> TokenStream {
    match expand_send(input.into()) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}
