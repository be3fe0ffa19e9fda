use event_base::prelude::*;

struct Order;

#[handler(topic = "orders")]
async fn on_order(order: Order) -> Ack {
    let _ = order;
    Ack::Ack
}

fn main() {}
