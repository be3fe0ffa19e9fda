//! Typed handlers: `#[handler]` functions that take `Json<T>` (the payload decoded) and/or
//! `&EMessage`, and return `Ack`, `Result<(), E>` or `Result<Ack, E>`; and the typed sends
//! `send_json`, `send(topic, Json(&value))` and `send_msg!(topic, Json(&value))`.
//!
//! Each test builds an isolated bus from the registrations of the handlers it is about
//! (`registered(name)`), so the tests of this binary do not share handlers; only the
//! `send_msg!` test starts the global system, with every handler of the file.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use event_base::prelude::*;
use event_base::{AuditEvent, AuditOutcome, Backoff, CoreError, MessageId};
use event_base_test::WAIT;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Order {
    id: u32,
    item: String,
}

fn order(id: u32) -> Order {
    Order {
        id,
        item: format!("item-{id}"),
    }
}

/// The spec `#[handler]` registered for the function `name`, with a 1 ms backoff so retried
/// failures do not wait the default 100 ms, doubling.
fn registered(name: &str) -> HandlerSpec {
    event_base::HANDLER_REGISTRY
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("`{name}` is not registered"))
        .to_spec()
        .backoff(Backoff::fixed(Duration::from_millis(1)))
}

async fn bus_with(names: &[&str]) -> EventBus {
    let mut builder = event_base::builder();
    for name in names {
        builder = builder.handler(registered(name));
    }
    builder.build().await.unwrap()
}

/// How each delivery of message `id` ended, from the audit trail.
fn outcomes(bus: &EventBus, id: &str) -> Vec<AuditOutcome> {
    bus.audit()
        .for_message(id)
        .into_iter()
        .filter_map(|r| match r.event {
            AuditEvent::Finished { outcome, .. } => Some(outcome),
            AuditEvent::Started => None,
        })
        .collect()
}

// ---- each form is delivered -------------------------------------------------------------

static JSON_ONLY: Mutex<Vec<Order>> = Mutex::new(Vec::new());
static JSON_AND_MSG: Mutex<Vec<(Order, String)>> = Mutex::new(Vec::new());
static MSG_AND_JSON: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());
static MSG_ONLY: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

#[handler(topic = "typed.json_only")]
async fn json_only(Json(order): Json<Order>) -> Ack {
    JSON_ONLY.lock().unwrap().push(order);
    Ack::Ack
}

#[handler(topic = "typed.json_and_msg")]
async fn json_and_msg(order: Json<Order>, msg: &EMessage) -> Ack {
    JSON_AND_MSG
        .lock()
        .unwrap()
        .push((order.into_inner(), msg.id.clone()));
    Ack::Ack
}

#[handler(topic = "typed.msg_and_json")]
async fn msg_and_json(msg: &EMessage, order: Json<Order>) -> Result<(), String> {
    // `Json<T>` dereferences to `T`.
    MSG_AND_JSON
        .lock()
        .unwrap()
        .push((msg.id.clone(), order.id));
    Ok(())
}

#[handler(topic = "typed.msg_only")]
async fn msg_only(msg: &EMessage) -> Ack {
    MSG_ONLY
        .lock()
        .unwrap()
        .push(msg.payload.as_bytes().to_vec());
    Ack::Ack
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_form_gets_its_parameters() {
    let bus = bus_with(&["json_only", "json_and_msg", "msg_and_json", "msg_only"]).await;
    bus.send_json("typed.json_only", &order(1)).await.unwrap();
    let with_msg = bus
        .send_json("typed.json_and_msg", &order(2))
        .await
        .unwrap();
    let msg_first = bus
        .send("typed.msg_and_json", Json(order(3)))
        .await
        .unwrap();
    bus.send("typed.msg_only", "raw bytes").await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();

    assert_eq!(*JSON_ONLY.lock().unwrap(), [order(1)]);
    assert_eq!(
        *JSON_AND_MSG.lock().unwrap(),
        [(order(2), with_msg.to_string())]
    );
    assert_eq!(*MSG_AND_JSON.lock().unwrap(), [(msg_first.to_string(), 3)]);
    assert_eq!(*MSG_ONLY.lock().unwrap(), [b"raw bytes".to_vec()]);
    assert!(bus.dead_letters().await.unwrap().is_empty());
}

// ---- a payload that does not decode ------------------------------------------------------

static STRICT_RAN: AtomicU32 = AtomicU32::new(0);

#[handler(topic = "typed.strict", retries = 3)]
async fn strict(_order: Json<Order>) -> Ack {
    STRICT_RAN.fetch_add(1, Ordering::SeqCst);
    Ack::Ack
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_that_does_not_decode_is_a_dead_letter_at_once_naming_the_type() {
    let bus = bus_with(&["strict"]).await;
    let not_json = bus.send("typed.strict", "not json").await.unwrap();
    let wrong_shape = bus.send("typed.strict", r#"{"id":"seven"}"#).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();

    assert_eq!(
        STRICT_RAN.load(Ordering::SeqCst),
        0,
        "the function never ran"
    );
    let dead = bus.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 2);
    let type_name = std::any::type_name::<Order>();
    for (id, serde_says) in [
        (&not_json, "expected ident"),
        (&wrong_shape, "invalid type"),
    ] {
        let d = dead.iter().find(|d| d.message.id == **id).unwrap();
        assert_eq!(d.attempts, 1, "no retries for bad input");
        let DeadReason::Other(text) = &d.reason else {
            panic!("expected DeadReason::Other, got {:?}", d.reason);
        };
        assert!(text.contains(type_name), "{text}");
        assert!(text.contains(serde_says), "{text}");
        assert!(matches!(
            &outcomes(&bus, id)[..],
            [AuditOutcome::Dead { reason }] if *reason == d.reason
        ));
    }
    assert_eq!(bus.metrics().topic("typed.strict").unwrap().retried, 0);
}

// ---- Err is a failed delivery ------------------------------------------------------------

static STORE_CALLS: AtomicU32 = AtomicU32::new(0);

#[handler(topic = "typed.store", retries = 2)]
async fn store(msg: &EMessage) -> Result<(), String> {
    STORE_CALLS.fetch_add(1, Ordering::SeqCst);
    match msg.payload.as_bytes() {
        b"recovers" if msg.attempts >= 2 => Ok(()),
        _ => Err(format!("store unavailable (attempt {})", msg.attempts)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_err_is_retried_under_the_handlers_policy_then_dead_with_its_text() {
    let bus = bus_with(&["store"]).await;
    let hopeless = bus.send("typed.store", "hopeless").await.unwrap();
    let recovers = bus.send("typed.store", "recovers").await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();

    // `retries = 2`: 3 deliveries of the hopeless one, 2 of the other.
    assert_eq!(STORE_CALLS.load(Ordering::SeqCst), 5);
    let dead = bus.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.id, hopeless.to_string());
    assert_eq!(dead[0].attempts, 3);
    assert_eq!(
        dead[0].reason,
        DeadReason::Other("store unavailable (attempt 3)".into())
    );

    // The audit trail keeps each attempt's text.
    let reasons: Vec<Option<String>> = outcomes(&bus, &hopeless)
        .into_iter()
        .map(|o| match o {
            AuditOutcome::Retried { reason, .. } => reason,
            AuditOutcome::Dead { reason } => Some(format!("dead: {reason}")),
            AuditOutcome::Acked => None,
        })
        .collect();
    assert_eq!(
        reasons,
        [
            Some("store unavailable (attempt 1)".to_owned()),
            Some("store unavailable (attempt 2)".to_owned()),
            Some("dead: store unavailable (attempt 3)".to_owned()),
        ]
    );
    assert!(matches!(
        &outcomes(&bus, &recovers)[..],
        [AuditOutcome::Retried { reason: Some(r), .. }, AuditOutcome::Acked]
            if r == "store unavailable (attempt 1)"
    ));
}

// ---- Result<Ack, E> ----------------------------------------------------------------------

/// An error type of the application's: only `Display` is needed.
#[derive(Debug)]
struct Refused(&'static str);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused: {}", self.0)
    }
}

#[handler(topic = "typed.choose", retries = 0)]
async fn choose(msg: &EMessage) -> Result<Ack, Refused> {
    match msg.payload.as_bytes() {
        b"ack" => Ok(Ack::Ack),
        b"dead" => Ok(Ack::dead()),
        // Its own limit, 1 retry, not the handler's 0.
        b"retry" => Ok(Ack::NoAck {
            retry_after: None,
            max_retries: 1,
        }),
        _ => Err(Refused("unknown command")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_ack_passes_the_ack_through_and_err_fails_the_delivery() {
    let bus = bus_with(&["choose"]).await;
    let ack = bus.send("typed.choose", "ack").await.unwrap();
    let dead = bus.send("typed.choose", "dead").await.unwrap();
    let retry = bus.send("typed.choose", "retry").await.unwrap();
    let err = bus.send("typed.choose", "???").await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();

    assert!(matches!(&outcomes(&bus, &ack)[..], [AuditOutcome::Acked]));
    let letters = bus.dead_letters().await.unwrap();
    let of = |id: &MessageId| {
        let d = letters.iter().find(|d| d.message.id == **id).unwrap();
        (d.reason.clone(), d.attempts)
    };
    assert_eq!(of(&dead), (DeadReason::Explicit, 1));
    assert_eq!(of(&retry), (DeadReason::MaxRetriesExceeded, 2));
    assert_eq!(
        of(&err),
        (DeadReason::Other("refused: unknown command".into()), 1)
    );
    assert_eq!(letters.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_err_waits_the_panic_backoff_when_the_handler_has_none() {
    // `choose`'s registration as `#[handler]` made it, without the tests' 1 ms backoff: the
    // retry of an `Err` is scheduled 100 ms out, as a panic's is.
    let spec = event_base::HANDLER_REGISTRY
        .iter()
        .find(|r| r.name == "choose")
        .unwrap()
        .to_spec()
        .retries(1);
    let bus = event_base::builder().handler(spec).build().await.unwrap();
    let id = bus.send("typed.choose", "???").await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert!(matches!(
        &outcomes(&bus, &id)[..],
        [AuditOutcome::Retried { after, .. }, AuditOutcome::Dead { .. }]
            if *after == Duration::from_millis(100)
    ));
}

// ---- sending typed -----------------------------------------------------------------------

static ECHOED: Mutex<Vec<(Order, Vec<u8>)>> = Mutex::new(Vec::new());

#[handler(topic = "typed.echo")]
async fn echo(order: Json<Order>, msg: &EMessage) -> Ack {
    ECHOED
        .lock()
        .unwrap()
        .push((order.0, msg.payload.as_bytes().to_vec()));
    Ack::Ack
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_json_round_trips_and_a_value_that_does_not_serialize_is_refused() {
    let bus = bus_with(&["echo"]).await;
    let router = bus.router();
    bus.send_json("typed.echo", &order(1)).await.unwrap();
    bus.send("typed.echo", Json(&order(2))).await.unwrap();
    router.send_json("typed.echo", &order(3)).await.unwrap();
    router.publish("typed.echo", Json(order(4))).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();

    let mut got = ECHOED.lock().unwrap().clone();
    got.sort_by_key(|(o, _)| o.id);
    let expected: Vec<Order> = (1..=4).map(order).collect();
    assert_eq!(
        got.iter().map(|(o, _)| o.clone()).collect::<Vec<_>>(),
        expected
    );
    // The payload is the value's JSON, as `EMessage::json` writes it.
    for (o, payload) in &got {
        let msg = EMessage::json("typed.echo", o).unwrap();
        assert_eq!(payload, msg.payload.as_bytes());
    }

    // JSON maps need string keys: refused before anything is written.
    let appended = bus.wal_stats().appended;
    let unencodable: HashMap<(u8, u8), u8> = HashMap::from([((1, 2), 3)]);
    let err = bus.send_json("typed.echo", &unencodable).await.unwrap_err();
    assert!(matches!(err, CoreError::Encode(_)), "{err:?}");
    assert!(err.to_string().contains("string keys"), "{err}");
    let err = router
        .send_json("typed.echo", &unencodable)
        .await
        .unwrap_err();
    assert!(matches!(err, CoreError::Encode(_)), "{err:?}");
    assert_eq!(bus.wal_stats().appended, appended);
}

static GLOBAL_SEEN: Mutex<Vec<Order>> = Mutex::new(Vec::new());

#[handler(topic = "typed.global")]
async fn global_orders(Json(order): Json<Order>) -> Ack {
    GLOBAL_SEEN.lock().unwrap().push(order);
    Ack::Ack
}

/// The one test of this binary that starts the global system.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_msg_takes_a_json_value() {
    let bus = start_system!().await.unwrap();
    send_msg!("typed.global", Json(&order(9))).await.unwrap();
    let unencodable: HashMap<(u8, u8), u8> = HashMap::from([((1, 2), 3)]);
    let err = send_msg!("typed.global", Json(&unencodable))
        .await
        .unwrap_err();
    assert!(matches!(err, CoreError::Encode(_)), "{err:?}");
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(*GLOBAL_SEEN.lock().unwrap(), [order(9)]);
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}

// ---- the functions stay callable ---------------------------------------------------------

#[tokio::test]
async fn the_functions_stay_ordinary_functions() {
    use event_base::IntoAck;
    let msg = EMessage::standard("typed.choose", "ack");
    assert_eq!(choose(&msg).await.unwrap(), Ack::Ack);
    // Outside a bus, `IntoAck` turns an `Err` into a plain `NoAck` (there is no delivery to
    // keep the text in).
    let bad = EMessage::standard("typed.choose", "???");
    let answer = choose(&bad).await.into_ack();
    assert!(matches!(answer, Ack::NoAck { .. }), "{answer:?}");
}
