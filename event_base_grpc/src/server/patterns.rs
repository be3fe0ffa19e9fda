//! The RPCs of the bus's patterns: `CancelMessage` (a delayed message taken back),
//! `ListSchedules` and `Unschedule` (recurring schedules).

use std::time::{SystemTime, UNIX_EPOCH};

use event_base_core::CatchUp;
use tonic::Status;

use crate::pb;
use crate::server::api::AdminApi;
use crate::status::core;

/// Milliseconds since the Unix epoch; 0 for none (or before the epoch).
fn epoch_ms(t: Option<SystemTime>) -> u64 {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn need(what: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("give the {what}")));
    }
    Ok(())
}

impl AdminApi {
    /// `CancelMessage`: [`EventBus::cancel`](event_base_core::EventBus::cancel).
    pub(crate) async fn cancel(&self, id: &str) -> Result<pb::CancelMessageResponse, Status> {
        need("message id", id)?;
        let cancelled = self.bus.cancel(id).await.map_err(core)?;
        Ok(pb::CancelMessageResponse { cancelled })
    }

    /// `ListSchedules`: [`EventBus::schedules`](event_base_core::EventBus::schedules).
    pub(crate) fn list_schedules(
        &self,
        _req: &pb::ListSchedulesRequest,
    ) -> Result<pb::ListSchedulesResponse, Status> {
        let schedules = self
            .bus
            .schedules()
            .into_iter()
            .map(|s| pb::ScheduleEntry {
                schedule: s.schedule.to_string(),
                period_ms: s
                    .schedule
                    .period()
                    .map_or(0, |p| u64::try_from(p.as_millis()).unwrap_or(u64::MAX)),
                cron: s.schedule.expression().unwrap_or_default().to_owned(),
                catch_up: match s.schedule.catch_up_policy() {
                    CatchUp::One => "one",
                    CatchUp::All => "all",
                    CatchUp::None => "none",
                }
                .to_owned(),
                payload_bytes: s.payload.as_bytes().len() as u64,
                last_slot_ms: epoch_ms(s.last_slot),
                next_slot_ms: epoch_ms(s.next_slot),
                topic: s.topic,
                name: s.name,
            })
            .collect();
        Ok(pb::ListSchedulesResponse { schedules })
    }

    /// `Unschedule`: [`EventBus::unschedule`](event_base_core::EventBus::unschedule).
    pub(crate) async fn remove_schedule(
        &self,
        name: &str,
    ) -> Result<pb::UnscheduleResponse, Status> {
        need("schedule name", name)?;
        let removed = self.bus.unschedule(name).await.map_err(core)?;
        Ok(pb::UnscheduleResponse { removed })
    }
}
