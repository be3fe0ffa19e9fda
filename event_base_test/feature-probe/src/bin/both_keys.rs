//! Without `memory`, `start_system!` with both backends given must compile.

use event_base::{QueueFactory, Wal};

#[allow(dead_code)]
fn start(wal: impl Wal, queue: impl QueueFactory) {
    drop(event_base::start_system!(wal: wal, queue: queue, batch_size: 8));
}

fn main() {}
