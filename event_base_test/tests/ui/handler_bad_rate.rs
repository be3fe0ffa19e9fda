use event_base::prelude::*;

#[handler(topic = "t", rate = "fast")]
async fn h(_msg: &EMessage) -> Ack {
    Ack::Ack
}

#[handler(topic = "u", rate = 100)]
async fn g(_msg: &EMessage) -> Ack {
    Ack::Ack
}

fn main() {}
