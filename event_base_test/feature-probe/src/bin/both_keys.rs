//! Without `memory`, the macros' expansions must still resolve: `#[handler]`, `send_msg!`, and
//! `start_system!` with both backends given.

use event_base::backend::{QueueFactory, Wal};
use event_base::{Ack, EMessage};

#[event_base::handler(topic = "probe")]
async fn probe(_msg: &EMessage) -> Ack {
    Ack::Ack
}

#[allow(dead_code)]
fn start(wal: impl Wal, queue: impl QueueFactory) {
    drop(event_base::start_system!(wal: wal, queue: queue, batch_size: 8));
    drop(event_base::send_msg!("probe", b"x".to_vec()));
}

fn main() {}
