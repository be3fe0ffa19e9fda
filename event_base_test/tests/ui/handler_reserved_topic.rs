use event_base::prelude::*;

#[handler(topic = "_system.mine")]
async fn h(_msg: &EMessage) -> Ack {
    Ack::Ack
}

fn main() {}
