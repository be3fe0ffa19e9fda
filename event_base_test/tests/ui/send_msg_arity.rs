use event_base::prelude::*;

async fn run() {
    let _ = send_msg!("orders", b"x".to_vec(), Some(true)).await;
}

fn main() {
    let _ = run();
}
