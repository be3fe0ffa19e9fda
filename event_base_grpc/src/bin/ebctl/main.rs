//! ebctl: the command-line client of the event_base gRPC management API (coming in the next commit).

fn main() {}
