use event_base::prelude::*;

// A batch handler takes the batch, not one message.
#[handler(topic = "points", batch = 100, linger_ms = 10)]
async fn store(msg: &EMessage) -> Ack {
    let _ = msg;
    Ack::Ack
}

fn main() {}
