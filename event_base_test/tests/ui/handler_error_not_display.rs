use event_base::prelude::*;

#[derive(Debug)]
struct NotDisplay;

// The error is kept as text, so it must implement `Display`.
#[handler(topic = "orders")]
async fn on_order(_msg: &EMessage) -> Result<(), NotDisplay> {
    Err(NotDisplay)
}

fn main() {}
