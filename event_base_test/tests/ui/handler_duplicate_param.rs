use event_base::prelude::*;

#[handler(topic = "t", topic = "u")]
async fn h(_msg: &EMessage) -> Ack {
    Ack::Ack
}

fn main() {}
