//! The queue contract ([`QueueFactory`], [`EProducer`](event_base::backend::EProducer),
//! [`EConsumer`]), case by case, for any backend.
//!
//! A backend is given as a function from a bound to a factory (`FlumeQueueFactory::bounded`),
//! so the cases can make small queues to fill. What is checked is what
//! `event_base::backend` promises: FIFO order from one producer, a bounded queue
//! (`try_send` hands a message back when full, `send` waits), `claim_batch` waiting for one
//! message then taking up to `max`, a `claim_batch` dropped while it waits losing nothing,
//! `try_claim` never waiting, acknowledgement as the backend declares it needs, one queue per
//! topic, a queue whose producers are all dropped delivering what it holds and then
//! reporting `Closed`, a claim just made not in doubt (no round trip before its handler),
//! many producers and consumers delivering every message exactly
//! once, and a queue's bell, if it has one, rung for each message and when it closes.
//!
//! Run them all over a backend with [`queue_conformance!`](crate::queue_conformance).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use event_base::backend::{
    ClaimStatus, Claimed, EConsumer, QueueFactory, TopicQueue, TrySendError,
};
use event_base::{EMessage, MessageTopic, QueueError};

use super::finishes_at_once;

/// The queue of topic `t` from a factory bounded to `bound`.
pub fn queue<Q: QueueFactory>(make: &impl Fn(usize) -> Q, bound: usize) -> TopicQueue {
    make(bound).create(&MessageTopic::from("t")).unwrap()
}

/// A message on `t` whose payload is `producer` then `seq` (big-endian), see [`origin`].
pub fn numbered(producer: u8, seq: u32) -> Arc<EMessage> {
    let mut payload = vec![producer];
    payload.extend_from_slice(&seq.to_be_bytes());
    Arc::new(EMessage::standard("t", payload))
}

/// `(producer, seq)` of a [`numbered`] message.
pub fn origin(m: &EMessage) -> (u8, u32) {
    let p = &m.payload.0;
    (p[0], u32::from_be_bytes([p[1], p[2], p[3], p[4]]))
}

/// Acknowledges `claimed` if the consumer says claims must be acknowledged.
pub async fn settle(consumer: &dyn EConsumer, claimed: &[Claimed]) {
    if consumer.requires_ack() {
        consumer.ack(claimed).await.unwrap();
    }
}

/// Claims (and settles) exactly `n` messages, waiting as needed; fails if a claim returns
/// more than asked.
pub async fn claim_exactly(consumer: &dyn EConsumer, n: usize) -> Vec<Arc<EMessage>> {
    let mut got = Vec::new();
    while got.len() < n {
        let mut out = Vec::new();
        let want = n - got.len();
        let k = tokio::time::timeout(crate::WAIT, consumer.claim_batch(want, &mut out))
            .await
            .expect("claim_batch waited too long for a queued message")
            .unwrap();
        assert!((1..=want).contains(&k), "claimed {k} of at most {want}");
        assert_eq!(k, out.len(), "claim_batch returns what it appended");
        settle(consumer, &out).await;
        got.extend(out.into_iter().map(|c| c.message));
    }
    got
}

fn seqs(ms: &[Arc<EMessage>]) -> Vec<u32> {
    ms.iter().map(|m| origin(m).1).collect()
}

/// One producer's messages are claimed in the order sent, through `send` and `try_send`
/// alike.
pub async fn fifo_per_producer<Q: QueueFactory>(make: &impl Fn(usize) -> Q) {
    let q = queue(make, 64);
    for i in 0..40 {
        if i % 2 == 0 {
            q.producer.send(numbered(0, i)).await.unwrap();
        } else {
            q.producer.try_send(numbered(0, i)).unwrap();
        }
    }
    let got = claim_exactly(&*q.consumer, 40).await;
    assert_eq!(seqs(&got), (0..40).collect::<Vec<_>>());
}

/// A queue holds `bound` messages; `try_send` past that fails at once with `Full`, handing
/// the very message back, and succeeds again once one is claimed.
pub async fn try_send_on_a_full_queue_hands_the_message_back<Q: QueueFactory>(
    make: &impl Fn(usize) -> Q,
) {
    let q = queue(make, 4);
    assert!(q.producer.is_empty(), "a new queue is empty");
    for i in 0..4 {
        q.producer.try_send(numbered(0, i)).unwrap();
    }
    let extra = numbered(0, 4);
    match q.producer.try_send(extra.clone()) {
        Err(TrySendError::Full(back)) => assert!(Arc::ptr_eq(&back, &extra)),
        Err(TrySendError::Failed(e)) => panic!("expected Full, got {e}"),
        Ok(()) => panic!("a full queue accepted a fifth message"),
    }
    assert!(!q.producer.is_empty());
    assert_eq!(seqs(&claim_exactly(&*q.consumer, 1).await), vec![0]);
    q.producer.try_send(extra).unwrap();
    assert_eq!(
        seqs(&claim_exactly(&*q.consumer, 4).await),
        vec![1, 2, 3, 4]
    );
}

/// `send` on a full queue waits (backpressure) and finishes once a message is claimed; its
/// message then comes last.
pub async fn send_waits_while_the_queue_is_full<Q: QueueFactory>(make: &impl Fn(usize) -> Q) {
    let q = queue(make, 2);
    q.producer.send(numbered(0, 0)).await.unwrap();
    q.producer.send(numbered(0, 1)).await.unwrap();
    let mut blocked = Box::pin(q.producer.send(numbered(0, 2)));
    assert!(
        finishes_at_once(&mut blocked).await.is_none(),
        "send on a full queue must wait"
    );
    let first = claim_exactly(&*q.consumer, 1).await;
    tokio::time::timeout(crate::WAIT, blocked)
        .await
        .expect("send still waiting after a message was claimed")
        .unwrap();
    let rest = claim_exactly(&*q.consumer, 2).await;
    assert_eq!(seqs(&first), vec![0]);
    assert_eq!(seqs(&rest), vec![1, 2]);
}

/// `claim_batch` appends (keeping what `out` held) at least one and at most `max` messages
/// and returns how many.
pub async fn claim_batch_takes_up_to_max<Q: QueueFactory>(make: &impl Fn(usize) -> Q) {
    let q = queue(make, 16);
    for i in 0..10 {
        q.producer.send(numbered(0, i)).await.unwrap();
    }
    let mut out = Vec::new();
    let n = q.consumer.claim_batch(4, &mut out).await.unwrap();
    assert!((1..=4).contains(&n), "claimed {n} with max 4");
    assert_eq!(out.len(), n);
    let m = q.consumer.claim_batch(3, &mut out).await.unwrap();
    assert!((1..=3).contains(&m), "claimed {m} with max 3");
    assert_eq!(out.len(), n + m, "the second claim appended to the first");
    settle(&*q.consumer, &out).await;
    let mut got: Vec<_> = out.into_iter().map(|c| c.message).collect();
    got.extend(claim_exactly(&*q.consumer, 10 - n - m).await);
    assert_eq!(seqs(&got), (0..10).collect::<Vec<_>>());
}

/// `claim_batch` on an empty queue waits, and returns the message sent meanwhile.
pub async fn claim_batch_waits_for_a_message<Q: QueueFactory>(make: &impl Fn(usize) -> Q) {
    let q = queue(make, 4);
    let consumer = q.consumer.clone();
    let mut out = Vec::new();
    let mut claim = Box::pin(consumer.claim_batch(8, &mut out));
    assert!(
        finishes_at_once(&mut claim).await.is_none(),
        "claim_batch on an empty queue must wait"
    );
    q.producer.send(numbered(0, 7)).await.unwrap();
    let n = tokio::time::timeout(crate::WAIT, claim)
        .await
        .expect("claim_batch did not wake for the message")
        .unwrap();
    assert_eq!(n, 1);
    settle(&*q.consumer, &out).await;
    assert_eq!(origin(&out[0].message), (0, 7));
}

/// A `claim_batch` dropped while it waits (as `select!` drops the branch that lost, which a
/// worker does when work reaches it another way first) loses nothing: the message sent
/// while it waited is claimed by a later call or, on a backend that requires acks, is found
/// by `claim_stale`. A message sent after it is claimed too, once.
pub async fn a_dropped_claim_loses_nothing<Q: QueueFactory>(make: &impl Fn(usize) -> Q) {
    let q = queue(make, 4);
    let c = &*q.consumer;
    let mut early = Vec::new();
    {
        let mut claim = Box::pin(c.claim_batch(1, &mut early));
        assert!(
            finishes_at_once(&mut claim).await.is_none(),
            "claim_batch on an empty queue must wait"
        );
        q.producer.send(numbered(0, 1)).await.unwrap();
        // Dropped without being polled again, though the message may already be its.
    }
    q.producer.send(numbered(0, 2)).await.unwrap();
    settle(c, &early).await;
    let mut got: Vec<_> = early.into_iter().map(|e| e.message).collect();
    // A queue hands out in order: once the second message is claimed, the first was
    // claimed before it, by the dropped call or by these.
    while !got.iter().any(|m| origin(m) == (0, 2)) {
        got.extend(claim_exactly(c, 1).await);
    }
    if c.requires_ack() && !got.iter().any(|m| origin(m) == (0, 1)) {
        let mut stale = Vec::new();
        c.claim_stale(Duration::ZERO, 8, &mut stale).await.unwrap();
        settle(c, &stale).await;
        got.extend(stale.into_iter().map(|s| s.message));
    }
    assert_eq!(
        seqs(&got),
        vec![1, 2],
        "the message sent while a dropped claim waited was lost or came twice"
    );
}

/// `try_claim` never waits: nothing on an empty queue, else at most `max` of the oldest
/// messages, in order (a backend that cannot claim without waiting may take none).
pub async fn try_claim_never_waits<Q: QueueFactory>(make: &impl Fn(usize) -> Q) {
    let q = queue(make, 8);
    let mut out = Vec::new();
    assert_eq!(q.consumer.try_claim(4, &mut out).unwrap(), 0);
    assert!(out.is_empty());
    for i in 0..5 {
        q.producer.send(numbered(0, i)).await.unwrap();
    }
    let n = q.consumer.try_claim(3, &mut out).unwrap();
    assert!(n <= 3, "try_claim took {n} with max 3");
    assert_eq!(out.len(), n);
    settle(&*q.consumer, &out).await;
    let mut got: Vec<_> = out.into_iter().map(|c| c.message).collect();
    got.extend(claim_exactly(&*q.consumer, 5 - n).await);
    assert_eq!(seqs(&got), (0..5).collect::<Vec<_>>());
}

/// Acknowledgement as the consumer declares it. With `requires_ack`, a `nack`ed claim is
/// claimed again, an unacknowledged one is found by `claim_stale`, and an acknowledged one
/// never comes back. Without it, `ack`/`nack` succeed and change nothing, and `claim_stale`
/// finds nothing (the WAL, not the queue, holds what is unfinished).
pub async fn acks_as_the_backend_requires<Q: QueueFactory>(make: &impl Fn(usize) -> Q) {
    let q = queue(make, 8);
    q.producer.send(numbered(0, 0)).await.unwrap();
    let mut first = Vec::new();
    assert_eq!(q.consumer.claim_batch(1, &mut first).await.unwrap(), 1);
    let c = &*q.consumer;
    let mut stale = Vec::new();
    if c.requires_ack() {
        c.nack(&first).await.unwrap();
        let again = claim_exactly_unsettled(c, 1).await;
        assert_eq!(
            again[0].message.id, first[0].message.id,
            "nack gives it back"
        );
        assert_eq!(
            c.claim_stale(Duration::ZERO, 8, &mut stale).await.unwrap(),
            1
        );
        assert_eq!(stale[0].message.id, first[0].message.id);
        c.ack(&stale).await.unwrap();
        stale.clear();
        assert_eq!(
            c.claim_stale(Duration::ZERO, 8, &mut stale).await.unwrap(),
            0
        );
    } else {
        c.nack(&first).await.unwrap();
        c.ack(&first).await.unwrap();
        assert_eq!(
            c.claim_stale(Duration::ZERO, 8, &mut stale).await.unwrap(),
            0
        );
        assert!(stale.is_empty());
    }
    let mut rest = Vec::new();
    assert_eq!(c.try_claim(8, &mut rest).unwrap(), 0, "nothing comes back");
}

async fn claim_exactly_unsettled(consumer: &dyn EConsumer, n: usize) -> Vec<Claimed> {
    let mut out = Vec::new();
    while out.len() < n {
        let want = n - out.len();
        tokio::time::timeout(crate::WAIT, consumer.claim_batch(want, &mut out))
            .await
            .expect("claim_batch waited too long for a queued message")
            .unwrap();
    }
    out
}

/// Every topic has its own queue: what is sent to one is claimed only from it.
pub async fn each_topic_has_its_own_queue<Q: QueueFactory>(make: &impl Fn(usize) -> Q) {
    let factory = make(8);
    assert!(!factory.name().is_empty(), "a backend names itself");
    let a = factory.create(&MessageTopic::from("a")).unwrap();
    let b = factory.create(&MessageTopic::from("b")).unwrap();
    a.producer.send(numbered(1, 0)).await.unwrap();
    b.producer.send(numbered(2, 0)).await.unwrap();
    a.producer.send(numbered(1, 1)).await.unwrap();
    let from_b = claim_exactly(&*b.consumer, 1).await;
    assert_eq!(origin(&from_b[0]), (2, 0));
    let mut none = Vec::new();
    assert_eq!(b.consumer.try_claim(8, &mut none).unwrap(), 0);
    let from_a = claim_exactly(&*a.consumer, 2).await;
    assert_eq!(
        from_a.iter().map(|m| origin(m)).collect::<Vec<_>>(),
        vec![(1, 0), (1, 1)]
    );
}

/// Once every producer handle is dropped the queue still delivers what it holds, in order,
/// then reports `Closed` from `claim_batch` and `try_claim`.
pub async fn a_closed_queue_drains_then_reports_closed<Q: QueueFactory>(
    make: &impl Fn(usize) -> Q,
) {
    let TopicQueue { producer, consumer } = queue(make, 8);
    for i in 0..3 {
        producer.send(numbered(0, i)).await.unwrap();
    }
    drop(producer);
    assert_eq!(seqs(&claim_exactly(&*consumer, 3).await), vec![0, 1, 2]);
    let mut out = Vec::new();
    let claim = tokio::time::timeout(crate::WAIT, consumer.claim_batch(8, &mut out))
        .await
        .expect("claim_batch on a closed, drained queue must not wait");
    assert!(matches!(claim, Err(QueueError::Closed(_))), "{claim:?}");
    assert!(matches!(
        consumer.try_claim(8, &mut out),
        Err(QueueError::Closed(_))
    ));
    assert!(out.is_empty());
}

/// A consumer waiting on an empty queue wakes with `Closed` when the last producer goes.
pub async fn closing_wakes_a_waiting_consumer<Q: QueueFactory>(make: &impl Fn(usize) -> Q) {
    let TopicQueue { producer, consumer } = queue(make, 8);
    let mut out = Vec::new();
    let mut claim = Box::pin(consumer.claim_batch(8, &mut out));
    assert!(finishes_at_once(&mut claim).await.is_none());
    drop(producer);
    let r = tokio::time::timeout(crate::WAIT, claim)
        .await
        .expect("a waiting claim_batch did not wake when the queue closed");
    assert!(matches!(r, Err(QueueError::Closed(_))), "{r:?}");
}

/// Four producers and three consumers on one small queue: every message is claimed exactly
/// once, and each consumer sees each producer's messages in the order sent.
pub async fn many_producers_and_consumers_deliver_each_message_once<Q: QueueFactory>(
    make: &impl Fn(usize) -> Q,
) {
    each_message_once(make, consume_until_closed, "a consumer").await;
}

/// Four producers send 500 messages each into a queue of bound 8 that three consumers,
/// each running `consume` until the queue closes, read: every message is claimed exactly
/// once, and each consumer sees each producer's messages in the order sent. `who` names
/// the consumers in the failure messages.
async fn each_message_once<Q, F, Fut>(make: &impl Fn(usize) -> Q, consume: F, who: &str)
where
    Q: QueueFactory,
    F: Fn(Arc<dyn EConsumer>) -> Fut,
    Fut: std::future::Future<Output = Vec<(u8, u32)>> + Send + 'static,
{
    const PRODUCERS: u8 = 4;
    const PER_PRODUCER: u32 = 500;
    let TopicQueue { producer, consumer } = queue(make, 8);
    let consumers: Vec<_> = (0..3)
        .map(|_| tokio::spawn(consume(consumer.clone())))
        .collect();
    drop(consumer);
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let producer = producer.clone();
            tokio::spawn(async move {
                for i in 0..PER_PRODUCER {
                    producer.send(numbered(p, i)).await.unwrap();
                }
            })
        })
        .collect();
    drop(producer);
    for p in producers {
        tokio::time::timeout(crate::WAIT, p).await.unwrap().unwrap();
    }
    let mut times_seen: HashMap<(u8, u32), usize> = HashMap::new();
    for c in consumers {
        let seen = tokio::time::timeout(crate::WAIT, c)
            .await
            .unwrap_or_else(|_| panic!("{who} was left waiting"))
            .unwrap();
        for p in 0..PRODUCERS {
            let mine: Vec<u32> = seen.iter().filter(|o| o.0 == p).map(|o| o.1).collect();
            assert!(
                mine.windows(2).all(|w| w[0] < w[1]),
                "{who} saw producer {p} out of order"
            );
        }
        for o in seen {
            *times_seen.entry(o).or_default() += 1;
        }
    }
    assert_eq!(
        times_seen.len(),
        usize::from(PRODUCERS) * PER_PRODUCER as usize
    );
    assert!(times_seen.values().all(|&n| n == 1), "a message came twice");
}

/// A queue that offers a bell ([`EConsumer::bell`]) rings it after each message it takes,
/// so a consumer that listened and found nothing wakes and finds the message with
/// `try_claim`; it rings every listener when the last producer goes; and consumers that
/// park on it as the bus's workers do (listen, look, wait) claim every message exactly
/// once, none left waiting. A queue without a bell has nothing to check here.
pub async fn a_bell_rings_for_each_message_and_when_closed<Q: QueueFactory>(
    make: &impl Fn(usize) -> Q,
) {
    let TopicQueue { producer, consumer } = queue(make, 8);
    let Some(bell) = consumer.bell() else {
        return;
    };
    let mut out = Vec::new();
    let mut rung = Box::pin(bell.notified());
    rung.as_mut().enable();
    assert!(
        finishes_at_once(&mut rung).await.is_none(),
        "rung with nothing sent"
    );
    assert_eq!(consumer.try_claim(8, &mut out).unwrap(), 0);
    assert!(matches!(producer.try_send(numbered(0, 0)), Ok(())));
    assert!(
        finishes_at_once(&mut rung).await.is_some(),
        "try_send did not ring the bell"
    );
    assert_eq!(consumer.try_claim(8, &mut out).unwrap(), 1);
    let mut rung = Box::pin(bell.notified());
    rung.as_mut().enable();
    producer.send(numbered(0, 1)).await.unwrap();
    assert!(
        finishes_at_once(&mut rung).await.is_some(),
        "send did not ring the bell"
    );
    assert_eq!(consumer.try_claim(8, &mut out).unwrap(), 1);
    // Closing rings every listener, and they find the queue closed.
    let mut listeners: Vec<_> = (0..2).map(|_| Box::pin(bell.notified())).collect();
    for l in &mut listeners {
        l.as_mut().enable();
    }
    drop(producer);
    for l in &mut listeners {
        assert!(
            finishes_at_once(l).await.is_some(),
            "closing did not ring a listener"
        );
    }
    assert!(matches!(
        consumer.try_claim(8, &mut out),
        Err(QueueError::Closed(_))
    ));

    // Three consumers parked on the bell, four producers: each message claimed once.
    each_message_once(make, park_until_closed, "a consumer parked on the bell").await;
}

/// Claims one message at a time as a worker does on a queue with a bell: listen, look, and
/// wait on the bell only when the look found nothing.
async fn park_until_closed(consumer: Arc<dyn EConsumer>) -> Vec<(u8, u32)> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    let Some(bell) = consumer.bell() else {
        return seen;
    };
    loop {
        let rung = bell.notified();
        tokio::pin!(rung);
        rung.as_mut().enable();
        out.clear();
        match consumer.try_claim(1, &mut out) {
            Ok(0) => rung.await,
            Ok(_) => {
                seen.extend(out.iter().map(|c| origin(&c.message)));
                // Let the producers and the other consumers run between claims.
                tokio::task::yield_now().await;
            }
            Err(QueueError::Closed(_)) => return seen,
            Err(e) => panic!("claim failed: {e}"),
        }
    }
}

async fn consume_until_closed(consumer: Arc<dyn EConsumer>) -> Vec<(u8, u32)> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    loop {
        out.clear();
        match consumer.claim_batch(16, &mut out).await {
            Ok(_) => {
                settle(&*consumer, &out).await;
                seen.extend(out.iter().map(|c| origin(&c.message)));
            }
            Err(QueueError::Closed(_)) => return seen,
            Err(e) => panic!("claim failed: {e}"),
        }
    }
}

/// A claim just made is not in doubt (`claim_in_doubt`): a worker starts its handler without
/// asking the backend again, so a fresh claim costs no round trip; asked anyway
/// (`confirm_claim`), the backend says it is still held.
pub async fn a_fresh_claim_is_not_in_doubt<Q: QueueFactory>(make: &impl Fn(usize) -> Q) {
    let q = queue(make, 8);
    q.producer.send(numbered(0, 0)).await.unwrap();
    let mut claimed = Vec::new();
    assert_eq!(q.consumer.claim_batch(1, &mut claimed).await.unwrap(), 1);
    let c = &*q.consumer;
    assert!(
        !c.claim_in_doubt(&claimed[0]),
        "a claim just made is in doubt"
    );
    assert_eq!(
        c.confirm_claim(&claimed[0]).await.unwrap(),
        ClaimStatus::Held,
        "a claim just made is not held"
    );
    settle(c, &claimed).await;
}

/// Runs every case of this module over each backend given, one `#[tokio::test]` per case,
/// in a module per backend: `name => function from a bound to a factory`.
///
/// ```ignore
/// event_base_test::queue_conformance! {
///     flume => FlumeQueueFactory::bounded,
///     kanal => MpmcQueueFactory::bounded,
/// }
/// ```
#[macro_export]
macro_rules! queue_conformance {
    ($($backend:ident => $make:expr),* $(,)?) => {
        $(
            $crate::__conformance_cases!(queue, $backend => $make;
                fifo_per_producer,
                try_send_on_a_full_queue_hands_the_message_back,
                send_waits_while_the_queue_is_full,
                claim_batch_takes_up_to_max,
                claim_batch_waits_for_a_message,
                a_dropped_claim_loses_nothing,
                try_claim_never_waits,
                acks_as_the_backend_requires,
                a_fresh_claim_is_not_in_doubt,
                each_topic_has_its_own_queue,
                a_closed_queue_drains_then_reports_closed,
                closing_wakes_a_waiting_consumer,
                many_producers_and_consumers_deliver_each_message_once,
                a_bell_rings_for_each_message_and_when_closed,
            );
        )*
    };
}
