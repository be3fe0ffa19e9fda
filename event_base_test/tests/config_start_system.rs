//! `start_system!(config: path)`: the global system from a config file, with the process's
//! `EB_…` variables over it. One test in this binary: it sets variables of the process and
//! installs the global system.

use event_base::prelude::*;
use event_base_test::WAIT;

#[handler(topic = "config.orders", workers = 1)]
async fn config_orders(_msg: &EMessage) -> Ack {
    Ack::Ack
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_system_reads_the_file_and_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("eb.toml");
    let wal_dir = dir.path().join("wal");
    std::fs::write(
        &path,
        format!(
            "[wal]\nkind = \"persistent\"\ndir = \"{}\"\n\n[handlers.config_orders]\nworkers = 2\n",
            wal_dir.display()
        ),
    )
    .unwrap();
    // The only test of this process, so no other test sees the variable.
    std::env::set_var("EB_HANDLERS__CONFIG_ORDERS__WORKERS", "3");

    let bus = start_system!(config: &path, batch_size: 8).await.unwrap();
    assert_eq!(
        bus.workers("config.orders").len(),
        3,
        "the variable wins over the file's 2 and the #[handler]'s 1"
    );
    send_msg!("config.orders", b"hi".to_vec()).await.unwrap();
    bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(bus.metrics().topic("config.orders").unwrap().acked, 1);
    assert!(
        std::fs::read_dir(&wal_dir).unwrap().count() > 0,
        "the file's persistent WAL"
    );
    bus.shutdown(ShutdownStrategy::Force).await.unwrap();
}
