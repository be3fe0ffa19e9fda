use event_base::prelude::*;

#[handler(topic = "t", wokers = 2)]
async fn h(_msg: &EMessage) -> Ack {
    Ack::Ack
}

fn main() {}
