//! Without `memory`, `start_system!` with `wal:` but no `queue:` must not compile.

use event_base::backend::Wal;

#[allow(dead_code)]
fn start(wal: impl Wal) {
    drop(event_base::start_system!(wal: wal));
}

fn main() {}
