use event_base::prelude::*;

// One answer per message is a `Vec<Ack>`; a `Vec` of anything else is not an answer.
#[handler(topic = "points", batch = 100)]
async fn store(batch: &[EMessage]) -> Vec<bool> {
    batch.iter().map(|_| true).collect()
}

fn main() {}
