//! A backlog waiting for a stuck worker, and an idle bus, burn no CPU: every loop waits on a
//! channel, a notify or a timer.

use std::time::Duration;

use event_base::Ack;
use event_base_test::{Gate, Probe, WAIT};

/// User + system CPU time of this process, in clock ticks (Linux `/proc/self/stat`).
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_waiting_for_a_busy_worker_do_not_spin() {
    let probe = Probe::new();
    let gate = Gate::new();
    let bus = event_base::builder()
        .handler(probe.gated_handler("one", "busy", &gate, |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    for _ in 0..500 {
        bus.send("busy", b"x".to_vec()).await.unwrap();
    }
    probe.wait_for(1, WAIT).await;

    // The measurement window is a sleep on purpose: we measure what the bus does while
    // nothing can make progress. A spinning loop would burn the whole window (~100 ticks).
    let before = cpu_ticks();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let burned = cpu_ticks() - before;
    assert!(
        burned <= 10,
        "the waiting bus burned {burned} ticks (1/100 s) of CPU in 1 s"
    );

    gate.open();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(probe.count(), 500);
}
