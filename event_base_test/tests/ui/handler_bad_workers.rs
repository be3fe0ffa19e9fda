use event_base::prelude::*;

#[handler(topic = "t", workers = "four")]
async fn h(_msg: &EMessage) -> Ack {
    Ack::Ack
}

#[handler(topic = "u", workers = 0)]
async fn g(_msg: &EMessage) -> Ack {
    Ack::Ack
}

fn main() {}
