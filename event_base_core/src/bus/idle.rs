//! `wait_idle`, over what this process holds
//! ([`InFlight`](crate::delivery::in_flight::InFlight): notified, never polled) and, with a shared
//! queue backend, what the shared queues still hold of the subscriptions this process sent
//! to ([`RemoteRoutes::outstanding`]: Redis offers nothing to wait on, so this half polls).
//!
//! - `wait_idle` waits for both: nothing held here, and nothing left (queued, claimed by any
//!   node and unsettled, or delayed) in the shared queues of every subscription this process
//!   has sent to. So `send` ×N, then `wait_idle` on the sender returns once every handler on
//!   every node is done with them (and with whatever else those queues hold).
//! - `Drain` and `Timeout` do not look at the shared queues: a node that shuts down stops
//!   claiming from them (`delivery/subscription/consumer_router.rs`) and waits for what it holds only
//!   (`bus/stop/coordinator.rs`); what they still hold is the other nodes' (or its next
//!   start's).
//! - A backend that cannot tell (`Ok(None)`, the default) leaves the shared half out; a
//!   backend that fails is asked again until the deadline.

use std::time::Duration;

use tokio::time::Instant;

use crate::bus::shared::BusShared;
use crate::error::CoreError;

/// The first pause between two looks at the shared queues; it doubles up to [`POLL_MAX`].
const POLL_FIRST: Duration = Duration::from_millis(5);
/// The longest pause between two looks at the shared queues.
const POLL_MAX: Duration = Duration::from_millis(100);

/// How a look at the shared queues went.
enum Look {
    /// Nothing left (or the backend cannot tell, or there is nothing to ask about).
    Empty,
    /// This many left.
    Left(u64),
    /// The backend did not answer (in time).
    Unknown,
}

impl BusShared {
    /// `EventBus::wait_idle` (see the module docs).
    pub(crate) async fn wait_idle(&self, timeout: Duration) -> Result<(), CoreError> {
        if self.delivery.in_flight.get() == 0 && self.shared_subscriptions().is_empty() {
            return Ok(());
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(CoreError::NoRuntime);
        }
        // A timeout of `MAX_WAIT` or more waits for 30 years: forever, without overflowing.
        let deadline = crate::clock::instant_after(Instant::now(), timeout);
        let timed_out = |shared| CoreError::IdleTimeout {
            in_flight: self.delivery.in_flight.get(),
            shared,
            after: timeout,
        };
        let mut last = None;
        loop {
            if !self.delivery.in_flight.wait_idle_until(deadline).await {
                return Err(timed_out(last));
            }
            match self.wait_shared(deadline).await {
                Ok(()) => {}
                Err(left) => return Err(timed_out(left)),
            }
            last = Some(0);
            // A claim of what was still queued may have begun meanwhile: held here now.
            if self.delivery.in_flight.get() == 0 {
                return Ok(());
            }
        }
    }

    /// Waits until the shared queues of the subscriptions this process sent to are empty
    /// (delayed messages included), or `deadline`. Returns, on timeout, what they held at the
    /// last look that was answered (`None`: none was).
    async fn wait_shared(&self, deadline: Instant) -> Result<(), Option<u64>> {
        let mut pause = POLL_FIRST;
        // The last answer: a look the deadline cut short (or that failed) leaves it.
        let mut last = None;
        loop {
            match self.look(deadline).await {
                Look::Empty => return Ok(()),
                Look::Left(n) => last = Some(n),
                Look::Unknown => {}
            }
            let next = Instant::now() + pause;
            if next >= deadline {
                return Err(last);
            }
            tokio::time::sleep_until(next).await;
            pause = (pause * 2).min(POLL_MAX);
        }
    }

    /// The shared subscriptions this process sent to.
    fn shared_subscriptions(&self) -> Vec<(crate::MessageTopic, std::sync::Arc<str>)> {
        match &self.delivery.remote {
            Some(remote) => remote.sent_to.sent(false),
            None => Vec::new(),
        }
    }

    /// One look at the shared queues this process sent to, after its sends are written.
    async fn look(&self, deadline: Instant) -> Look {
        let Some(remote) = &self.delivery.remote else {
            return Look::Empty;
        };
        let subs = self.shared_subscriptions();
        if subs.is_empty() {
            return Look::Empty;
        }
        let provider = &remote.provider;
        let asked = tokio::time::timeout_at(deadline, async {
            provider.flush().await?;
            provider.outstanding(&subs).await
        })
        .await;
        match asked {
            Ok(Ok(None)) => Look::Empty,
            Ok(Ok(Some(o))) => match o.total() {
                0 => Look::Empty,
                n => Look::Left(n),
            },
            Ok(Err(e)) => {
                tracing::debug!(target: crate::constant::target::BUS, error = %e, "could not ask the shared queues what they hold; asking again");
                Look::Unknown
            }
            Err(_) => Look::Unknown,
        }
    }
}
