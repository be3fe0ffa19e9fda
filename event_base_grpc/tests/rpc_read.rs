//! The read RPCs over a real tonic client on loopback, each checked against the core API of
//! the same bus: GetStatus, ListTopics, ListWorkers, GetMetrics, GetWalStats, GetMessageAudit.

// A test's unwrap is its assertion (as in event_base_test); helpers here too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ack, dead, start, Probe};
use event_base_grpc::pb;

/// A bus with `orders` (3 workers, 5 messages acked) and `bad` (1 dead letter), served.
async fn seeded() -> common::Served {
    let probe = Probe::new();
    let s = start(vec![
        probe.handler("orders", "orders", ack).workers(3),
        probe.handler("bad", "bad", dead),
    ])
    .await;
    for i in 0..5u8 {
        s.bus.send("orders", vec![i]).await.unwrap();
    }
    s.bus.send("bad", b"x".to_vec()).await.unwrap();
    s.bus.wait_idle(common::WAIT).await.unwrap();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_topics_match_the_bus() {
    let s = seeded().await;
    let mut c = s.admin().await;

    let status = c
        .get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    let m = s.bus.metrics();
    assert_eq!(status.node_name, s.bus.node_name());
    assert_eq!(status.bus_name, m.bus);
    assert_eq!(status.version, env!("CARGO_PKG_VERSION"));
    assert!(status.accepting);
    assert_eq!(
        status.topic_count, 2,
        "orders and bad; system topics are not counted"
    );
    assert_eq!(status.worker_count, m.node.workers);
    assert_eq!(status.dead_letter_count, 1);
    assert_eq!(status.in_flight, 0);
    let wal = s.bus.wal_stats();
    assert_eq!(status.wal.unwrap().appended, wal.appended);

    let topics = c
        .list_topics(pb::ListTopicsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = topics.topics.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["bad", "orders"]);
    assert_eq!(topics.total_size, 2);
    let orders = &topics.topics[1];
    assert_eq!(orders.workers.len(), 3);
    let om = orders.metrics.unwrap();
    let core_orders = m.topic("orders").unwrap();
    assert_eq!(
        (om.sent, om.acked, om.handled),
        (core_orders.sent, core_orders.acked, 5)
    );

    // With the system topics, paged two at a time: every page's names, in order, no repeats.
    let mut all = Vec::new();
    let mut token = String::new();
    loop {
        let page = c
            .list_topics(pb::ListTopicsRequest {
                page_size: 2,
                page_token: token.clone(),
                include_system: true,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.topics.len() <= 2);
        all.extend(page.topics.into_iter().map(|t| t.name));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let mut want = s.bus.router().topics();
    want.sort();
    assert_eq!(all, want);

    s.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_metrics_and_wal_match_the_bus() {
    let s = seeded().await;
    let mut c = s.admin().await;
    let m = s.bus.metrics();
    let core_orders = m.topic("orders").unwrap();
    let workers = c
        .list_workers(pb::ListWorkersRequest {
            topic: "orders".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(workers.total_size, 3);
    let names: Vec<&str> = workers.workers.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["orders-0", "orders-1", "orders-2"]);
    let handled: u64 = workers
        .workers
        .iter()
        .map(|w| w.metrics.unwrap().handled)
        .sum();
    assert_eq!(handled, 5);
    assert!(workers
        .workers
        .iter()
        .all(|w| w.status == pb::WorkerStatus::Idle as i32));
    let working = c
        .list_workers(pb::ListWorkersRequest {
            statuses: vec![pb::WorkerStatus::Working as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(working.total_size, 0, "nothing is working once idle");

    let metrics = c
        .get_metrics(pb::GetMetricsRequest {
            topics: vec!["orders".into()],
            include_workers: true,
            include_handlers: true,
            include_subscriptions: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(metrics.topics.keys().collect::<Vec<_>>(), ["orders"]);
    assert_eq!(metrics.topics["orders"].acked, core_orders.acked);
    assert_eq!(metrics.workers.len(), 3, "the workers of `orders` only");
    assert_eq!(metrics.handlers["bad"].dead, 1);
    assert_eq!(metrics.node.unwrap().workers, m.node.workers);

    let wal_stats = c
        .get_wal_stats(pb::GetWalStatsRequest {})
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    let now = s.bus.wal_stats();
    assert_eq!(
        (
            wal_stats.appended,
            wal_stats.completed,
            wal_stats.dead,
            wal_stats.live
        ),
        (now.appended, now.completed, now.dead, now.live)
    );
    s.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_of_a_message_is_what_the_bus_recorded() {
    let probe = Probe::new();
    let s = start(vec![probe.handler("bad", "bad", dead)]).await;
    let id = s.bus.send("bad", b"x".to_vec()).await.unwrap();
    s.bus.wait_idle(common::WAIT).await.unwrap();
    let mut c = s.admin().await;
    let audit = c
        .get_message_audit(pb::GetMessageAuditRequest {
            message_id: id.to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    let core = s.bus.audit().for_message(id.as_str());
    assert_eq!(audit.records.len(), core.len());
    let events: Vec<i32> = audit.records.iter().map(|r| r.event).collect();
    assert_eq!(
        events,
        [
            pb::AuditEventKind::Started as i32,
            pb::AuditEventKind::Dead as i32
        ]
    );
    assert_eq!(audit.records[1].reason, "dead-lettered by the handler");
    assert_eq!(audit.records[0].worker, "bad-0");

    let none = c
        .get_message_audit(pb::GetMessageAuditRequest {
            message_id: "no-such-message".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(none.records.is_empty());
    let err = c
        .get_message_audit(pb::GetMessageAuditRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}
