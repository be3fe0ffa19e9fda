use event_base::prelude::*;

async fn run() {
    let _ = start_system!(wall: MemoryWal::new()).await;
}

fn main() {
    let _ = run();
}
