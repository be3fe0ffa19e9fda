//! The patterns over gRPC: `CancelMessage` takes a delayed message back (true once, then
//! false), `ListSchedules` lists the bus's recurring schedules and `Unschedule` removes one;
//! cancel and unschedule need the admin scope. `ebctl cancel`, `ebctl schedules` and
//! `ebctl unschedule` print the same.

// A test's unwrap is its assertion (as in event_base_test); helpers here too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{ack, start, Probe, ADMIN, READ};
use event_base_core::{CatchUp, EMessage, Schedule};
use event_base_grpc::pb;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_message_is_cancelled_over_grpc_once() {
    let probe = Probe::new();
    let s = start(vec![probe.handler("remind", "remind", ack)]).await;
    let id = s
        .bus
        .send(
            "remind",
            EMessage::standard("remind", b"later".to_vec()).with_delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    let cancel = |id: &str| pb::CancelMessageRequest { id: id.to_owned() };

    let mut reader = s.client(Some(READ)).await;
    let denied = reader.cancel_message(cancel(&id)).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");

    let mut admin = s.admin().await;
    assert!(
        admin
            .cancel_message(cancel(&id))
            .await
            .unwrap()
            .into_inner()
            .cancelled
    );
    assert!(
        !admin
            .cancel_message(cancel(&id))
            .await
            .unwrap()
            .into_inner()
            .cancelled
    );
    assert!(
        !admin
            .cancel_message(cancel("no-such-id"))
            .await
            .unwrap()
            .into_inner()
            .cancelled
    );
    let empty = admin.cancel_message(cancel("")).await.unwrap_err();
    assert_eq!(empty.code(), Code::InvalidArgument);
    s.bus.wait_idle(Duration::from_secs(5)).await.unwrap();
    assert_eq!(probe.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_are_listed_and_removed_over_grpc() {
    let probe = Probe::new();
    let s = start(vec![probe.handler("report", "report", ack)]).await;
    s.bus
        .schedule(
            "nightly",
            Schedule::cron("0 30 2 * * *")
                .unwrap()
                .catch_up(CatchUp::All),
            "report",
            b"{}".to_vec(),
        )
        .await
        .unwrap();
    s.bus
        .schedule(
            "often",
            Schedule::every(Duration::from_secs(3600)),
            "report",
            Vec::new(),
        )
        .await
        .unwrap();

    let mut reader = s.client(Some(READ)).await;
    let list = reader
        .list_schedules(pb::ListSchedulesRequest {})
        .await
        .unwrap()
        .into_inner()
        .schedules;
    let names: Vec<&str> = list.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["nightly", "often"]);
    assert_eq!(list[0].cron, "0 30 2 * * *");
    assert_eq!(list[0].catch_up, "all");
    assert_eq!(list[0].payload_bytes, 2);
    assert_eq!(list[1].period_ms, 3_600_000);
    assert_eq!(list[1].catch_up, "one");
    assert!(list
        .iter()
        .all(|s| s.topic == "report" && s.next_slot_ms > 0));

    let remove = |name: &str| pb::UnscheduleRequest {
        name: name.to_owned(),
    };
    let denied = reader.unschedule(remove("often")).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    let mut admin = s.admin().await;
    assert!(
        admin
            .unschedule(remove("often"))
            .await
            .unwrap()
            .into_inner()
            .removed
    );
    assert!(
        !admin
            .unschedule(remove("often"))
            .await
            .unwrap()
            .into_inner()
            .removed
    );
    assert_eq!(s.bus.schedules().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ebctl_cancels_and_lists_and_removes_schedules() {
    let probe = Probe::new();
    let s = start(vec![probe.handler("report", "report", ack)]).await;
    s.bus
        .schedule(
            "nightly",
            Schedule::cron("0 30 2 * * *").unwrap(),
            "report",
            Vec::new(),
        )
        .await
        .unwrap();
    let id = s
        .bus
        .send(
            "report",
            EMessage::standard("report", b"x".to_vec()).with_delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    let run = |args: Vec<String>, token: &'static str| {
        let addr = s.addr.clone();
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_ebctl"))
                .env_remove("EBCTL_TOKEN")
                .env("EBCTL_ADDR", addr)
                .env("EBCTL_TOKEN", token)
                .stdin(std::process::Stdio::null())
                .args(args)
                .output()
                .await
                .unwrap()
        }
    };
    let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();

    let out = run(args(&["schedules"]), READ).await;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("NAME") && text.contains("nightly") && text.contains("0 30 2 * * *"),
        "{text}"
    );

    let out = run(args(&["-o", "json", "cancel", &id]), ADMIN).await;
    assert!(out.status.success(), "{out:?}");
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["cancelled"], true);
    let out = run(args(&["cancel", &id]), ADMIN).await;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("not cancelled"),
        "{out:?}"
    );

    let out = run(args(&["unschedule", "nightly"]), READ).await;
    assert_eq!(
        out.status.code(),
        Some(77),
        "a read token cannot remove a schedule"
    );
    let out = run(args(&["unschedule", "nightly"]), ADMIN).await;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("removed schedule nightly"),
        "{out:?}"
    );
    let out = run(args(&["schedules"]), READ).await;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no schedules"),
        "{out:?}"
    );
}
