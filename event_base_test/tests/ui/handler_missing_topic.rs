use event_base::prelude::*;

#[handler(workers = 2)]
async fn h(_msg: &EMessage) -> Ack {
    Ack::Ack
}

fn main() {}
