//! The public test harness: publish to `#[handler]` functions, settle, and assert on acks,
//! retries, dead letters and the messages handlers sent.

use event_base::prelude::*;
use event_base::testing::TestBus;

#[handler(topic = "signup", retries = 2)]
async fn on_signup(msg: &EMessage) -> Ack {
    match msg.payload.0.as_ref() {
        b"" => Ack::dead(),
        b"flaky" if msg.attempts < 2 => Ack::retry(),
        _ => {
            let welcome = EMessage::standard("mail", msg.payload.0.clone());
            match send_msg!("mail", welcome).await {
                Ok(_) => Ack::Ack,
                Err(_) => Ack::retry(),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_reads_like_the_behaviour() {
    let t = TestBus::builder()
        .with_registered_handlers()
        .capture("mail")
        .start()
        .await
        .unwrap();
    let ok = t.publish("signup", b"ada".to_vec()).await.unwrap();
    let flaky = t.publish("signup", b"flaky".to_vec()).await.unwrap();
    let empty = t.publish("signup", Vec::<u8>::new()).await.unwrap();
    t.settle().await.unwrap();

    assert!(t.acked(&ok));
    assert_eq!(t.retries(&ok), 0);
    assert!(t.acked(&flaky));
    assert_eq!(t.retries(&flaky), 1);
    assert!(!t.acked(&empty));
    let dead = t.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.id, empty);
    let mails = t.captured("mail");
    assert_eq!(mails.len(), 2);
    assert!(mails
        .iter()
        .all(|m| m.metadata.causation_id.as_deref() == Some(&*ok)
            || m.metadata.causation_id.as_deref() == Some(&*flaky)));
    assert!(t.captured("nothing").is_empty());
    let report = t.stop().await.unwrap();
    assert!(report.drained);
}
