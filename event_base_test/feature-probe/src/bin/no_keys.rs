//! Without `memory`, `start_system!()` has no default backends: this must not compile.

fn main() {
    drop(event_base::start_system!());
}
