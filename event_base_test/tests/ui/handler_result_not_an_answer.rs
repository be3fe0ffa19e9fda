use event_base::prelude::*;

// `Ok` must be `()` or `Ack`.
#[handler(topic = "orders")]
async fn on_order(_msg: &EMessage) -> Result<String, String> {
    Ok(String::new())
}

fn main() {}
