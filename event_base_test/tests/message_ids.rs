//! Message ids are text: a hyphenated UUID v4 by default, or the application's own
//! (`with_id`), carried unchanged to handlers, the WAL, dead letters and their replay; an id
//! the bus cannot hold is refused at send with `CoreError::InvalidId`, leaving nothing behind.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use event_base::{constant::MAX_ID_BYTES, Ack, CoreError, DeadReason, EMessage};
use event_base_test::Probe;

const WAIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn generated_ids_are_distinct_hyphenated_v4_uuids_and_sends_return_them() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "orders", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let mut returned = HashSet::new();
    for _ in 0..100 {
        let msg = EMessage::standard("orders", b"x".to_vec());
        let id = msg.id.clone();
        let sent = bus.send("orders", msg).await.unwrap();
        assert_eq!(sent, id, "send returns the message's own id");
        assert_eq!(id.len(), 36);
        let bytes = id.as_bytes();
        for at in [8, 13, 18, 23] {
            assert_eq!(bytes[at], b'-', "{id}");
        }
        assert_eq!(bytes[14], b'4', "version 4: {id}");
        assert!(
            matches!(bytes[19], b'8' | b'9' | b'a' | b'b'),
            "variant: {id}"
        );
        assert!(id
            .chars()
            .all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        returned.insert(sent.to_string());
    }
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(returned.len(), 100);
    let seen: HashSet<String> = probe.seen().into_iter().map(|s| s.id).collect();
    assert_eq!(seen, returned, "handlers see the ids the senders got back");
}

#[tokio::test]
async fn an_application_id_travels_to_the_handler_the_dead_letters_and_back() {
    let probe = Probe::new();
    let calls = AtomicUsize::new(0);
    let bus = event_base::builder()
        .handler(probe.handler("h", "orders", move |_| {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                Ack::Dead {
                    dead_reason: DeadReason::Explicit,
                }
            } else {
                Ack::Ack
            }
        }))
        .build()
        .await
        .unwrap();
    let msg = EMessage::standard("orders", b"x".to_vec()).with_id("order-42-created");
    let id = bus.send("orders", msg).await.unwrap();
    assert_eq!(id, "order-42-created");
    bus.wait_idle(WAIT).await.unwrap();
    let dead = bus.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.id, "order-42-created");

    let again = bus.replay_dead_letter("order-42-created").await.unwrap();
    assert_eq!(again, "order-42-created");
    bus.wait_idle(WAIT).await.unwrap();
    assert!(bus.dead_letters().await.unwrap().is_empty());
    assert_eq!(probe.count_of("order-42-created"), 2);
    assert!(bus
        .audit()
        .for_message("order-42-created")
        .iter()
        .all(|r| r.message_id == "order-42-created"));

    let err = bus
        .replay_dead_letter("order-43-created")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CoreError::NotFound(id) if id == "order-43-created"),
        "{err:?}"
    );
}

#[tokio::test]
async fn empty_and_overlong_ids_are_refused_and_leave_nothing_behind() {
    let probe = Probe::new();
    let bus = event_base::builder()
        .handler(probe.handler("h", "orders", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let longest = "x".repeat(MAX_ID_BYTES);
    bus.send(
        "orders",
        EMessage::standard("orders", "ok").with_id(longest.clone()),
    )
    .await
    .expect("an id of exactly the limit is fine");

    let err = bus
        .send("orders", EMessage::standard("orders", "x").with_id(""))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CoreError::InvalidId { len: 0, max, .. } if *max == MAX_ID_BYTES),
        "{err:?}"
    );
    let too_long = "é".repeat(MAX_ID_BYTES); // two bytes each
    let err = bus
        .send(
            "orders",
            EMessage::standard("orders", "x").with_id(too_long.clone()),
        )
        .await
        .unwrap_err();
    match &err {
        CoreError::InvalidId { id, len, max } => {
            assert_eq!(*len, too_long.len());
            assert!(id.len() <= *max && too_long.starts_with(id.as_str()));
        }
        other => panic!("expected InvalidId, got {other:?}"),
    }
    assert!(
        err.to_string().contains("with_id"),
        "says what to do: {err}"
    );
    let batch = vec![
        EMessage::standard("orders", "a"),
        EMessage::standard("orders", "b").with_id(""),
    ];
    assert!(matches!(
        bus.send_batch("orders", batch).await,
        Err(CoreError::InvalidId { .. })
    ));

    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(
        bus.wal_stats().appended,
        1,
        "only the valid send reached the WAL"
    );
    assert_eq!(probe.count(), 1);
    assert_eq!(probe.seen()[0].id, longest);
}
