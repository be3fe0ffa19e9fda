//! `Batched`: workers stop a group at a time; each finishes its current message, and the
//! groups not yet asked keep working meanwhile.

use std::collections::HashSet;
use std::time::Duration;

use event_base::constant::WORKER_DISCOVERY;
use event_base::{
    Ack, DiscoveryEvent, EventBus, FlumeQueueFactory, ShutdownStrategy, WorkerDiscovery,
    WorkerOutcome, WorkerStatus,
};
use event_base_test::shutdown_scenario::Scenario;
use event_base_test::{decode, Gate, Probe, Seen, WAIT};

/// The workers that announced `event`, in the order of their announcements.
fn announced(seen: &[Seen], event: DiscoveryEvent) -> Vec<String> {
    seen.iter()
        .map(|s| decode::<WorkerDiscovery>(&s.payload))
        .filter(|d| d.event == event)
        .map(|d| d.worker.name)
        .collect()
}

/// The current message of each of `workers`.
fn in_hand(bus: &EventBus, workers: &[String]) -> Vec<String> {
    workers
        .iter()
        .map(|w| {
            bus.registry()
                .get(w)
                .and_then(|i| i.current_message)
                .unwrap_or_else(|| panic!("{w} is not mid-message"))
        })
        .collect()
}

// On a paused clock the interval between the groups (an hour) passes only once nothing else
// can run: whatever the second group does in reaction to the test happens inside it.
#[tokio::test(start_paused = true)]
async fn a_later_group_keeps_working_after_the_first_has_stopped() {
    const INTERVAL: Duration = Duration::from_secs(3600);
    let wal = std::sync::Arc::new(event_base::MemoryWal::new());
    let probe = Probe::new();
    let watch = Probe::new();
    let gate = Gate::new();
    let bus = EventBus::builder()
        .wal(wal.clone())
        .queue(FlumeQueueFactory::default())
        .handler(
            probe
                .gated_handler("jobs", "jobs", &gate, |_| Ack::Ack)
                .workers(4),
        )
        .handler(watch.handler("discovery", WORKER_DISCOVERY, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    let mut sent = Vec::new();
    for i in 0..12u32 {
        sent.push(bus.send("jobs", i.to_le_bytes().to_vec()).await.unwrap());
    }
    probe.wait_for(4, WAIT).await; // every worker mid-message, eight messages queued

    // The groups are taken in the registry's order, `batch_size` at a time.
    let workers: Vec<String> = bus
        .registry()
        .list()
        .into_iter()
        .filter(|w| w.topic.as_str() == "jobs")
        .map(|w| w.name)
        .collect();
    assert_eq!(workers.len(), 4);
    let (first, second) = workers.split_at(2);
    let first_held = in_hand(&bus, first);
    let second_held = in_hand(&bus, second);

    // `join!` polls the shutdown first: the first group has been asked to stop before the
    // test goes on.
    let shutdown = bus.shutdown(ShutdownStrategy::Batched {
        batch_size: 2,
        interval: INTERVAL,
    });
    let observe = async {
        gate.release(first_held.iter().cloned());
        watch
            .wait_until("the first group's departures", WAIT, |seen| {
                let left = announced(seen, DiscoveryEvent::Left);
                first.iter().all(|w| left.contains(w))
            })
            .await;
        for w in first {
            assert_eq!(
                bus.registry().get(w).map(|i| i.status),
                Some(WorkerStatus::Stopped)
            );
        }
        // The first group took nothing new. The second, not asked yet, finishes its
        // messages and takes the next ones.
        assert_eq!(probe.count(), 4);
        gate.release(second_held.iter().cloned());
        probe
            .wait_until("the second group taking new messages", WAIT, |seen| {
                seen.len() >= 6
            })
            .await;
        let now_held = in_hand(&bus, second);
        for (w, id) in second.iter().zip(&now_held) {
            assert!(!second_held.contains(id), "{w} still on its first message");
            assert_eq!(
                bus.registry().get(w).map(|i| i.status),
                Some(WorkerStatus::Working)
            );
        }
        let left = announced(&watch.seen(), DiscoveryEvent::Left);
        assert!(second.iter().all(|w| !left.contains(w)), "{left:?}");
        gate.open();
        now_held
    };
    let (report, now_held) = tokio::join!(shutdown, observe);
    let report = report.unwrap();
    assert!(report.elapsed >= INTERVAL, "{report:?}");
    assert_eq!(report.workers.len(), 4);
    assert!(
        report
            .workers
            .iter()
            .all(|w| w.outcome == WorkerOutcome::Completed),
        "{report:?}"
    );
    let finished: HashSet<String> = probe.finished().into_iter().collect();
    assert!(
        now_held.iter().all(|id| finished.contains(id)),
        "the second group finished the messages it took"
    );
    let left = report.left_for_replay;
    let sent = sent.iter().map(|id| id.to_string()).collect();
    let s = Scenario::from_parts(wal, bus, probe, gate, sent);
    replay_the_rest(s, left).await;
}

/// What the shutdown left for replay is the jobs not finished (and maybe the watcher's last
/// announcements, which the shutdown does not wait for); a second system delivers them.
async fn replay_the_rest(s: Scenario, left_for_replay: u64) {
    let finished = s.probe.finished().len();
    let left_jobs = event_base::backend::Wal::pending(&*s.wal)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.message.topic.as_str() == "jobs")
        .count();
    assert_eq!(left_jobs, 12 - finished);
    assert!(left_for_replay as usize >= left_jobs);
    let replayed = s.restart_and_check().await;
    assert_eq!(replayed.len() + finished, 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_stop_in_groups_and_finish_their_messages() {
    let s = Scenario::start(4, 12).await; // four workers mid-message
    s.gate.open();
    let report = s
        .bus
        .shutdown(ShutdownStrategy::Batched {
            batch_size: 2,
            interval: Duration::from_millis(50),
        })
        .await
        .unwrap();
    assert_eq!(report.workers.len(), 4);
    assert!(report
        .workers
        .iter()
        .all(|w| w.outcome == WorkerOutcome::Completed));
    assert!(
        report.elapsed >= Duration::from_millis(50),
        "two groups, one interval apart"
    );
    let finished = s.probe.finished().len();
    assert!(finished >= 4, "the messages in hand were finished");
    assert_eq!(report.left_for_replay as usize, 12 - finished);
    let replayed = s.restart_and_check().await;
    assert_eq!(replayed.len() + finished, 12);
}
