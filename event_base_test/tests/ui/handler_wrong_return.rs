use event_base::prelude::*;

#[handler(topic = "orders")]
async fn on_order(_msg: &EMessage) -> bool {
    true
}

fn main() {}
