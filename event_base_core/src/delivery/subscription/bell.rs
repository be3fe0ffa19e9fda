//! [`wait_until`]: waiting on a [`Notify`] for a condition, without missing a ring.

use tokio::sync::Notify;

/// Returns once `done()` holds, looking again each time `bell` rings (`notify_waiters`). It
/// listens before it looks, so a ring between the look and the wait is not missed.
pub(crate) async fn wait_until(bell: &Notify, done: impl Fn() -> bool) {
    loop {
        let rung = bell.notified();
        tokio::pin!(rung);
        rung.as_mut().enable();
        if done() {
            return;
        }
        rung.await;
    }
}
