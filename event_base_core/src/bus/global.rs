//! The two globals behind `start_system!`, `send_msg!` and [`TopicRouter::global`]: the
//! default bus, and the send path's lock-free view of it. They are only the default
//! instance; every bus built with `EventBus::builder()` works without them. Inside a handler,
//! `TopicRouter::global()` does not read them at all: it sends into the bus running the
//! handler, which the message context carries (`message/context.rs`).
//!
//! [`TopicRouter::global`]: crate::TopicRouter::global

use std::sync::{Arc, Mutex, Weak};

use crate::bus::shared::BusShared;
use crate::bus::tasks::BusTasks;
use crate::delivery::send::topic_router::{clear_default, set_default};
use crate::error::CoreError;

/// The installed bus itself (its tasks hold its shared state), for `EventBus::global()`.
static BUS: Mutex<Option<Arc<BusTasks>>> = Mutex::new(None);

/// Installs `tasks`' bus as the global default. Fails with [`CoreError::AlreadyStarted`]
/// while another global bus still accepts sends.
pub(crate) fn install(tasks: &Arc<BusTasks>) -> Result<(), CoreError> {
    let mut bus = BUS
        .lock()
        .map_err(|_| CoreError::Internal("global system lock poisoned".into()))?;
    if let Some(current) = bus.as_ref() {
        if !Arc::ptr_eq(&current.shared, &tasks.shared) && current.shared.delivery.is_accepting() {
            return Err(CoreError::AlreadyStarted);
        }
    }
    *bus = Some(tasks.clone());
    set_default(tasks.shared.delivery.clone());
    Ok(())
}

/// Removes the bus of `shared` from the globals, if it is the one installed.
pub(crate) fn uninstall(shared: &Arc<BusShared>) {
    clear_default(&shared.delivery);
    if let Ok(mut bus) = BUS.lock() {
        if bus.as_ref().is_some_and(|b| Arc::ptr_eq(&b.shared, shared)) {
            *bus = None;
        }
    }
}

/// The installed bus, if any.
pub(crate) fn bus() -> Option<Arc<BusTasks>> {
    BUS.lock().ok().and_then(|b| b.clone())
}

/// A task that lives as long as the runtime the bus was started on. Runtimes drop their
/// tasks when they shut down; this one's end marks the bus as stopped (its workers went with
/// the runtime) and takes it out of the globals, so that a later runtime can start a global
/// bus of its own and no send is answered `Ok` by a bus that cannot run.
pub(crate) async fn runtime_guard(shared: Weak<BusShared>) {
    struct OnDrop(Weak<BusShared>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            if let Some(shared) = self.0.upgrade() {
                shared.delivery.stop_accepting();
                uninstall(&shared);
            }
        }
    }
    let _guard = OnDrop(shared);
    std::future::pending::<()>().await;
}
