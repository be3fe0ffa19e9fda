use event_base::prelude::*;

#[handler(topic = "orders")]
async fn on_order(msg: EMessage) -> Ack {
    let _ = msg;
    Ack::Ack
}

fn main() {}
