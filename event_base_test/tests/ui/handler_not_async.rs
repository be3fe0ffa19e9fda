use event_base::prelude::*;

#[handler(topic = "t")]
fn h(_msg: &EMessage) -> Ack {
    Ack::Ack
}

fn main() {}
