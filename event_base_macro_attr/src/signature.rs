//! The handler function's signature, checked: what each parameter binds and what the function
//! returns.
//!
//! The macro reads types as written, so it recognises them by their last path segment:
//! `&EMessage` (or `&event_base::EMessage`) is the message, `Json<T>` the payload decoded into
//! `T`, `Ack` an answer used as is and `Result<..>` (also `anyhow::Result<()>`, `io::Result<()>`)
//! an answer through `IntoAck`, whose bound (`E: Display`, `Ok` of `()` or `Ack`) the compiler
//! checks on the expansion. A type alias for any of them is not recognised: write the type
//! out.

use proc_macro2::Span;
use syn::{FnArg, GenericArgument, ItemFn, PathArguments, ReturnType, Type};

/// What a parameter gets, in the order the function takes them.
pub(crate) enum Input {
    /// `msg: &EMessage`: the delivered message.
    Message,
    /// `order: Json<Order>`: the payload decoded; the type as written.
    Json(Box<Type>),
    /// `batch: &[EMessage]`: a batch handler's messages.
    Batch,
}

/// What the function returns.
pub(crate) enum Output {
    /// `-> Ack`: the answer as is (the expansion calls the function and nothing else).
    Ack,
    /// `-> Result<..>`: turned into an `Ack` by `IntoAck`; the type as written.
    Result(Box<Type>),
    /// `-> Vec<Ack>`: a batch handler's answer per message.
    Acks,
}

/// A checked handler signature.
pub(crate) struct Signature {
    /// One or two inputs, at most one of each kind.
    pub(crate) inputs: Vec<Input>,
    /// The return type.
    pub(crate) output: Output,
}

/// The forms a handler can take, for the error messages.
const FORMS: &str = "`msg: &EMessage`, `order: Json<Order>`, or both";

/// The answers a handler can return, for the error messages.
const ANSWERS: &str = "`Ack`, `Result<(), E>` or `Result<Ack, E>` with `E: Display`";

/// The batch handler's form, for the error messages.
const BATCH_FORM: &str = "a batch handler takes `batch: &[EMessage]` and returns `Ack` (for every message), `Vec<Ack>` (one per message, in order), `Result<(), E>` or `Result<Ack, E>`";

/// Checks the function: `async`, not generic, not a method, one or two parameters it can
/// bind, and a return type it can turn into an `Ack`; for a batch handler (`batch`), the one
/// parameter `&[EMessage]` and a return type it can turn into a `BatchAck`.
pub(crate) fn signature(item: &ItemFn, batch: bool) -> syn::Result<Signature> {
    let sig = &item.sig;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new_spanned(
            sig.fn_token,
            "a handler must be an `async fn(msg: &EMessage) -> Ack`",
        ));
    }
    if let Some(FnArg::Receiver(r)) = sig.inputs.first() {
        return Err(syn::Error::new_spanned(
            r,
            "a handler is a free function, not a method; implement `EHandler` for a type instead",
        ));
    }
    if !sig.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &sig.generics,
            "a handler cannot be generic",
        ));
    }
    if batch {
        return batch_signature(item);
    }
    let inputs = inputs(item)?;
    let output = output(&sig.output, sig.ident.span())?;
    Ok(Signature { inputs, output })
}

/// A batch handler: `(batch: &[EMessage]) -> Ack | Vec<Ack> | Result<..>`.
fn batch_signature(item: &ItemFn) -> syn::Result<Signature> {
    let sig = &item.sig;
    let mut args = sig.inputs.iter();
    let (Some(arg), None) = (args.next(), args.next()) else {
        return Err(match sig.inputs.iter().nth(1) {
            Some(extra) => syn::Error::new_spanned(extra, BATCH_FORM),
            None => syn::Error::new(sig.paren_token.span.join(), BATCH_FORM),
        });
    };
    let FnArg::Typed(t) = arg else {
        return Err(syn::Error::new_spanned(arg, BATCH_FORM));
    };
    if !is_message_slice(&t.ty) {
        return Err(syn::Error::new_spanned(&t.ty, BATCH_FORM));
    }
    let output = match &sig.output {
        ReturnType::Default => return Err(syn::Error::new(sig.ident.span(), BATCH_FORM)),
        ReturnType::Type(_, ty) if is_ack_vec(ty) => Output::Acks,
        ReturnType::Type(_, ty) => match output(&sig.output, sig.ident.span()) {
            Ok(o) => o,
            Err(_) => return Err(syn::Error::new_spanned(ty, BATCH_FORM)),
        },
    };
    Ok(Signature {
        inputs: vec![Input::Batch],
        output,
    })
}

/// `&[EMessage]` (shared, a slice of `EMessage` by any path).
fn is_message_slice(ty: &Type) -> bool {
    match ty {
        Type::Group(g) => is_message_slice(&g.elem),
        Type::Paren(p) => is_message_slice(&p.elem),
        Type::Reference(r) if r.mutability.is_none() => match &*r.elem {
            Type::Slice(s) => matches!(last_segment(&s.elem), Some(("EMessage", _))),
            _ => false,
        },
        _ => false,
    }
}

/// `Vec<Ack>`.
fn is_ack_vec(ty: &Type) -> bool {
    let Type::Path(p) = ty else { return false };
    let Some(seg) = p.path.segments.last() else {
        return false;
    };
    if seg.ident != "Vec" {
        return false;
    }
    match &seg.arguments {
        PathArguments::AngleBracketed(a) if a.args.len() == 1 => matches!(
            a.args.first(),
            Some(GenericArgument::Type(t)) if matches!(last_segment(t), Some(("Ack", PathArguments::None)))
        ),
        _ => false,
    }
}

fn inputs(item: &ItemFn) -> syn::Result<Vec<Input>> {
    let sig = &item.sig;
    if sig.inputs.is_empty() {
        return Err(syn::Error::new(
            sig.paren_token.span.join(),
            format!("a handler takes {FORMS}"),
        ));
    }
    let mut inputs: Vec<Input> = Vec::with_capacity(2);
    for arg in &sig.inputs {
        let ty = match arg {
            FnArg::Typed(t) => &*t.ty,
            FnArg::Receiver(r) => {
                return Err(syn::Error::new_spanned(
                    r,
                    "a handler is a free function, not a method",
                ))
            }
        };
        if inputs.len() == 2 {
            return Err(syn::Error::new_spanned(
                arg,
                format!("a handler takes at most two parameters: {FORMS}"),
            ));
        }
        let input = input(ty)?;
        let repeated = inputs.iter().any(|i| {
            matches!(
                (i, &input),
                (Input::Message, Input::Message) | (Input::Json(_), Input::Json(_))
            )
        });
        if repeated {
            let text = match input {
                Input::Message | Input::Batch => {
                    "the message is passed once; remove this parameter"
                }
                Input::Json(_) => {
                    "a handler takes one `Json<T>` parameter; read anything else from `msg: &EMessage`"
                }
            };
            return Err(syn::Error::new_spanned(arg, text));
        }
        inputs.push(input);
    }
    Ok(inputs)
}

/// What a parameter of type `ty` binds.
fn input(ty: &Type) -> syn::Result<Input> {
    const EXPECTED: &str = "expected `Json<T>` or `&EMessage`: a handler parameter is the payload \
                            decoded from JSON (`order: Json<Order>`) or the message (`msg: &EMessage`)";
    match ty {
        Type::Group(g) => input(&g.elem),
        Type::Paren(p) => input(&p.elem),
        _ if is_message_slice(ty) => Err(syn::Error::new_spanned(
            ty,
            "a handler of a batch of messages is a batch handler: add `batch = n` (the most messages per call)",
        )),
        Type::Reference(r) => match last_segment(&r.elem) {
            Some(("EMessage", _)) if r.mutability.is_some() => Err(syn::Error::new_spanned(
                ty,
                "the message is shared: take `&EMessage`, not `&mut EMessage`",
            )),
            Some(("EMessage", _)) => Ok(Input::Message),
            Some(("Json", _)) => Err(syn::Error::new_spanned(
                ty,
                "take the payload by value: `order: Json<Order>`, not a reference to it",
            )),
            _ => Err(syn::Error::new_spanned(ty, EXPECTED)),
        },
        _ => match last_segment(ty) {
            Some(("EMessage", _)) => Err(syn::Error::new_spanned(
                ty,
                "take the message by reference: `msg: &EMessage`",
            )),
            Some(("Json", args)) if one_type_argument(args) => {
                Ok(Input::Json(Box::new(ty.clone())))
            }
            Some(("Json", _)) => Err(syn::Error::new_spanned(
                ty,
                "name the payload's type: `order: Json<Order>`",
            )),
            _ => Err(syn::Error::new_spanned(ty, EXPECTED)),
        },
    }
}

/// What the function returns; `name` is where a missing return type is reported.
fn output(ret: &ReturnType, name: Span) -> syn::Result<Output> {
    let ty = match ret {
        ReturnType::Default => {
            return Err(syn::Error::new(
                name,
                format!("a handler returns {ANSWERS}; add `-> Ack`"),
            ))
        }
        ReturnType::Type(_, ty) => &**ty,
    };
    let mut inner = ty;
    while let Type::Group(g) = inner {
        inner = &g.elem;
    }
    match last_segment(inner) {
        Some(("Ack", PathArguments::None)) => Ok(Output::Ack),
        Some(("Result", PathArguments::AngleBracketed(_))) => {
            Ok(Output::Result(Box::new(ty.clone())))
        }
        _ => Err(syn::Error::new_spanned(
            ty,
            format!("a handler returns {ANSWERS}"),
        )),
    }
}

/// The last segment of a path type (`event_base::Json<T>` → `("Json", <T>)`), if `ty` is one.
fn last_segment(ty: &Type) -> Option<(&'static str, &PathArguments)> {
    let Type::Path(p) = ty else { return None };
    if p.qself.is_some() {
        return None;
    }
    let seg = p.path.segments.last()?;
    let name = ["EMessage", "Json", "Ack", "Result"]
        .into_iter()
        .find(|n| seg.ident == n)?;
    Some((name, &seg.arguments))
}

/// `<T>`: exactly one argument, a type.
fn one_type_argument(args: &PathArguments) -> bool {
    match args {
        PathArguments::AngleBracketed(a) => {
            a.args.len() == 1 && matches!(a.args.first(), Some(GenericArgument::Type(_)))
        }
        _ => false,
    }
}
