use event_base::prelude::*;

#[handler(topic = "orders")]
async fn on_order(a: Json<u32>, b: Json<u32>) -> Ack {
    let _ = (a, b);
    Ack::Ack
}

fn main() {}
