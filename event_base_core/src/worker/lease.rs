//! Before a handler starts on a claimed entry: a claim old enough that its lease may have run
//! out (the process was paused past it, or too starved to renew it) is confirmed with the
//! queue first, and one another consumer has taken over meanwhile is dropped without running
//! the handler. The new owner runs it; running it here too would do the work twice, and the
//! ack would only be refused afterwards.
//!
//! Checked here, when the handler is about to start, not when the router claims: jobs wait
//! in the work channel, in the scheduler and in a batch being formed between the claim and
//! their handler, and in a paused process they wait for as long as the pause. The check is
//! in two steps so that a fresh claim costs no round trip:
//! [`EConsumer::claim_in_doubt`](crate::backend::EConsumer::claim_in_doubt) answers from the
//! backend's memory (Redis: the lease was confirmed less than half a visibility timeout
//! ago), and only a claim in doubt goes to
//! [`EConsumer::confirm_claim`](crate::backend::EConsumer::confirm_claim), which confirms
//! all of its consumer's claims in doubt at once: after a pause the first worker to ask
//! pays one round trip, and the others find their claims decided.

use crate::backend::queue::ClaimStatus;
use crate::delivery::subscription::job::{ClaimTicket, Job};
use crate::worker::Worker;

impl Worker {
    /// Whether `job` came from a claim another consumer has taken over: if so its delivery
    /// ends here, as a fenced ack does (its ticket is settled as lost, the message stops
    /// counting in this process), and the handler must not run.
    pub(super) async fn claim_lost(&self, job: &Job) -> bool {
        let Some(ticket) = &job.claim else {
            return false;
        };
        if !self.entry.consumer.claim_in_doubt(ticket.claimed()) {
            return false;
        }
        // Boxed: the rare path does not grow every delivery's future.
        Box::pin(self.confirm(job, ticket)).await
    }

    /// [`claim_lost`](Self::claim_lost) for a claim in doubt: asks the queue.
    async fn confirm(&self, job: &Job, ticket: &ClaimTicket) -> bool {
        match self.entry.consumer.confirm_claim(ticket.claimed()).await {
            Ok(ClaimStatus::Held) => false,
            Ok(ClaimStatus::Lost) => {
                ticket.lost();
                tracing::debug!(target: crate::constant::target::DELIVERY, id = %job.message.id, worker = %self.state.name, "the claim was lost to another consumer before the handler started (its lease ran out); not handled here, the new owner handles it");
                if let Some(dead) = self.hub.finish_ok(&self.entry, job, None, Vec::new()) {
                    self.hub.settle_dead(&self.entry, dead).await;
                }
                true
            }
            Err(e) => {
                // Debug: a backend whose confirmations fail says so once per attempt, where
                // this would repeat it for every delivery.
                tracing::debug!(target: crate::constant::target::QUEUE, topic = %self.entry.topic, id = %job.message.id, error = %e, "could not confirm an old claim before its handler started; handling it anyway (if another consumer took it over, it is handled twice)");
                false
            }
        }
    }

    /// Takes out of `jobs` those whose claim was lost (see [`claim_lost`](Self::claim_lost));
    /// without a claim in doubt among them, only looks.
    pub(super) async fn drop_lost_claims(&self, jobs: &mut Vec<Job>) {
        let consumer = &*self.entry.consumer;
        let in_doubt = jobs.iter().any(|j| {
            j.claim
                .as_ref()
                .is_some_and(|t| consumer.claim_in_doubt(t.claimed()))
        });
        if !in_doubt {
            return;
        }
        let mut kept = Vec::with_capacity(jobs.len());
        for job in jobs.drain(..) {
            if !self.claim_lost(&job).await {
                kept.push(job);
            } else {
                // Another consumer has it now, and its place in the key's order.
                self.entry.keys.leave(&job.message);
            }
        }
        *jobs = kept;
    }
}
