use event_base::prelude::*;

async fn run() {
    let _ = start_system!(config: "eb.toml", wal: MemoryWal::new()).await;
}

fn main() {
    let _ = run();
}
