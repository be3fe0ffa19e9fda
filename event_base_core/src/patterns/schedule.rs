//! Recurring schedules: [`EventBus::schedule`], [`EventBus::unschedule`],
//! [`EventBus::schedules`].
//!
//! A schedule is a name, a [`Schedule`] (when), a topic and a payload. Each bus that has it
//! runs one task for it, which sleeps until the next slot and sends one message for the
//! slot, with the id `<name>:<slot time>` (RFC 3339, UTC, milliseconds). Two guards make a
//! slot fire once: the WAL's slot claim ([`Wal::claim_slot`]: atomic in the store several
//! buses share), and the slot's message id (a duplicate send of it is refused by the WAL
//! while the first is live and by the dedup window after it completed).
//!
//! The WAL keeps the schedules ([`Wal::put_schedule`]) and their last slot; a bus started
//! on it takes them up at start (`restore`, run by the builder's start hooks), firing the
//! slots it missed as the schedule's [`CatchUp`] says.
//!
//! Time: slots are wall-clock times; the task waits for them on the runtime's timer
//! (`tokio::time`), so a paused clock in tests moves schedules on, one slot after another.
//!
//! [`Wal::claim_slot`]: crate::backend::Wal::claim_slot
//! [`Wal::put_schedule`]: crate::backend::Wal::put_schedule

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use crate::bus::event_bus::EventBus;
use crate::bus::tasks::BusTasks;
use crate::error::CoreError;
use crate::message::emessage::EMessage;
use crate::message::payload::MessagePayload;
use crate::patterns::slots::{millis, slot_text, CatchUp, Schedule, Spec};

/// The header a schedule's message carries: the schedule's name.
pub const SCHEDULE_HEADER: &str = "eb-schedule";
/// The header a schedule's message carries: its slot, in milliseconds since the Unix epoch.
pub const SLOT_HEADER: &str = "eb-slot";

/// The longest schedule name: its message ids (`<name>:<slot time>`, 25 bytes of time)
/// stay within [`MAX_ID_BYTES`](crate::constant::MAX_ID_BYTES).
pub const MAX_SCHEDULE_NAME_BYTES: usize = 200;

/// A registered schedule, as [`EventBus::schedules`] lists it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// Its name.
    pub name: String,
    /// When it fires, and its catch-up policy.
    pub schedule: Schedule,
    /// The topic of its messages.
    pub topic: String,
    /// The payload of each of its messages.
    pub payload: MessagePayload,
    /// The latest slot fired (by any bus sharing the WAL, as far as this bus saw), if any.
    pub last_slot: Option<SystemTime>,
    /// The next slot, if there is one.
    pub next_slot: Option<SystemTime>,
}

/// A schedule as the WAL keeps it (JSON, in [`StoredSchedule::definition`]).
///
/// [`StoredSchedule::definition`]: crate::backend::StoredSchedule::definition
#[derive(Serialize, Deserialize)]
struct Definition {
    spec: Spec,
    catch_up: CatchUp,
    topic: String,
    payload: Vec<u8>,
}

/// The schedules one bus runs: in the bus's extensions.
#[derive(Default)]
pub(crate) struct Schedules {
    running: Mutex<HashMap<String, Running>>,
}

impl Drop for Schedules {
    fn drop(&mut self) {
        // The bus is gone: so are its schedules' tasks.
        if let Ok(running) = self.running.get_mut() {
            for (_, r) in running.drain() {
                r.task.abort();
            }
        }
    }
}

struct Running {
    schedule: Schedule,
    topic: String,
    payload: MessagePayload,
    /// The latest slot fired, shared with the task (and with the next task of the name).
    last: Arc<Mutex<Option<SystemTime>>>,
    task: JoinHandle<()>,
}

impl Schedules {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
        self.running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn schedules_of(bus: &EventBus) -> Arc<Schedules> {
    bus.tasks.extensions.get_or_default::<Schedules>()
}

fn check_name(name: &str) -> Result<(), CoreError> {
    if name.is_empty() || name.len() > MAX_SCHEDULE_NAME_BYTES {
        return Err(CoreError::InvalidParameter {
            name: "name",
            value: name.to_owned(),
            reason: format!("a schedule's name is 1 to {MAX_SCHEDULE_NAME_BYTES} bytes (it starts the id of every message it sends)"),
        });
    }
    Ok(())
}

impl EventBus {
    /// Registers the recurring schedule `name`: at each slot of `schedule`, one message with
    /// `payload` is sent to `topic`, with the id `<name>:<slot time>` (the slot's time in RFC
    /// 3339, UTC, milliseconds: `nightly:2026-12-05T02:30:00.000Z`) and the headers
    /// [`SCHEDULE_HEADER`] (the name) and [`SLOT_HEADER`] (the slot in ms since the epoch).
    ///
    /// Registering a name that exists updates it (upsert): the new definition replaces the
    /// old one from its next slot, and a slot already fired is not fired again. So every node
    /// may register the same schedules at each start.
    ///
    /// Once per slot: across restarts and across the buses (nodes) that share the WAL's
    /// schedule store, the WAL's slot claim lets one bus fire a slot; the slot's message id
    /// makes a second send of it a duplicate (refused while the first is in the WAL, and
    /// within the dedup window after). The WAL keeps the schedule: a bus started on the same
    /// WAL runs it without registering it again, and fires the slots it missed as
    /// [`Schedule::catch_up`] says ([`CatchUp::One`] by default). With a WAL that keeps no
    /// schedules (the trait's default) a schedule lasts as long as the bus.
    ///
    /// Fails with [`CoreError::InvalidParameter`] for a name that is empty or longer than
    /// [`MAX_SCHEDULE_NAME_BYTES`] or a period under 1 ms, [`CoreError::NoHandler`] if no
    /// handler (here or, with a shared backend, elsewhere) takes `topic`,
    /// [`CoreError::NoRuntime`] outside a tokio runtime, and with the WAL's error if it
    /// could not keep the schedule.
    ///
    /// ```
    /// use event_base_core::{handler_fn, Ack, CatchUp, EMessage, EventBus, HandlerSpec, Schedule};
    /// use std::time::Duration;
    /// # async fn demo() -> Result<(), event_base_core::CoreError> {
    /// let bus = EventBus::builder()
    ///     .handler(HandlerSpec::new("report", "report", handler_fn(|_m: EMessage| async { Ack::Ack })))
    ///     .build()
    ///     .await?;
    /// bus.schedule("hourly-report", Schedule::cron("0 0 * * * *")?.catch_up(CatchUp::All), "report", b"{}".to_vec()).await?;
    /// bus.schedule("heartbeat", Schedule::every(Duration::from_secs(30)), "report", Vec::new()).await?;
    /// assert_eq!(bus.schedules().len(), 2);
    /// assert!(bus.unschedule("heartbeat").await?);
    /// # Ok(()) }
    /// ```
    ///
    /// Cancel safety: dropped before the WAL kept it, nothing is registered; after, the
    /// schedule is kept and runs from the next start (or the next registration).
    pub async fn schedule(
        &self,
        name: impl Into<String>,
        schedule: Schedule,
        topic: impl AsRef<str>,
        payload: impl Into<MessagePayload>,
    ) -> Result<(), CoreError> {
        let name = name.into();
        let topic = topic.as_ref().to_owned();
        check_name(&name)?;
        schedule.check()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(CoreError::NoRuntime);
        }
        if !self.router().has_topic(&topic) && self.handlers_elsewhere(&topic).is_empty() {
            return Err(CoreError::NoHandler { topic });
        }
        let payload = payload.into();
        let definition = Definition {
            spec: schedule.spec(),
            catch_up: schedule.catch_up_policy(),
            topic: topic.clone(),
            payload: payload.as_bytes().to_vec(),
        };
        let bytes = serde_json::to_vec(&definition).map_err(CoreError::Encode)?;
        self.shared.delivery.wal.put_schedule(&name, &bytes).await?;
        // The progress of a schedule of that name: the running one's, or the WAL's.
        let schedules = schedules_of(self);
        let last = schedules.lock().get(&name).map(|r| r.last.clone());
        let last = match last {
            Some(last) => last,
            None => {
                let stored = self
                    .shared
                    .delivery
                    .wal
                    .stored_schedules()
                    .await?
                    .into_iter()
                    .find(|s| s.name == name)
                    .and_then(|s| s.last_slot)
                    .map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
                Arc::new(Mutex::new(stored))
            }
        };
        start(self, &schedules, name, schedule, topic, payload, last);
        Ok(())
    }

    /// Removes the schedule `name` from this bus and from the WAL: no slot of it fires
    /// after this returns (a firing under way may still complete). `true` if it was
    /// registered here or kept by the WAL. Other buses sharing the WAL stop firing it at
    /// their next slot (the WAL refuses their claims).
    pub async fn unschedule(&self, name: &str) -> Result<bool, CoreError> {
        let running = schedules_of(self).lock().remove(name);
        if let Some(r) = &running {
            r.task.abort();
        }
        let kept = self.shared.delivery.wal.remove_schedule(name).await?;
        Ok(running.is_some() || kept)
    }

    /// The schedules this bus runs, by name.
    pub fn schedules(&self) -> Vec<ScheduleInfo> {
        let schedules = schedules_of(self);
        let running = schedules.lock();
        let mut list: Vec<ScheduleInfo> = running
            .iter()
            .map(|(name, r)| {
                let last_slot = *r.last.lock().unwrap_or_else(|p| p.into_inner());
                let from = last_slot.map_or_else(SystemTime::now, |l| l.max(SystemTime::now()));
                ScheduleInfo {
                    name: name.clone(),
                    schedule: r.schedule.clone(),
                    topic: r.topic.clone(),
                    payload: r.payload.clone(),
                    last_slot,
                    next_slot: r.schedule.next_after(from),
                }
            })
            .collect();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        list
    }
}

/// Starts (or restarts, replacing the running one) the task of schedule `name`.
fn start(
    bus: &EventBus,
    schedules: &Schedules,
    name: String,
    schedule: Schedule,
    topic: String,
    payload: MessagePayload,
    last: Arc<Mutex<Option<SystemTime>>>,
) {
    let firing = Firing {
        bus: Arc::downgrade(&bus.tasks),
        name: name.clone(),
        topic: topic.clone(),
        payload: payload.clone(),
    };
    let task = tokio::spawn(run(firing, schedule.clone(), last.clone()));
    let old = schedules.lock().insert(
        name,
        Running {
            schedule,
            topic,
            payload,
            last,
            task,
        },
    );
    if let Some(old) = old {
        old.task.abort();
    }
}

/// What a schedule's task needs to fire a slot: the bus (weakly: a schedule does not keep
/// its bus running), the name, the message.
struct Firing {
    bus: Weak<BusTasks>,
    name: String,
    topic: String,
    payload: MessagePayload,
}

impl Firing {
    /// Fires `slot`; `false` once the bus is gone or stopped (the task then ends).
    async fn fire(&self, slot: SystemTime) -> bool {
        let Some(tasks) = self.bus.upgrade() else {
            return false;
        };
        let bus = EventBus {
            shared: tasks.shared.clone(),
            tasks,
        };
        if !bus.is_accepting() {
            return false;
        }
        let Some(ms) = millis(slot) else {
            return true;
        };
        match bus.shared.delivery.wal.claim_slot(&self.name, ms).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(target: crate::constant::target::DELIVERY, schedule = %self.name, slot = ms, "slot fired already (another bus, or before a restart)");
                return true;
            }
            Err(e) => {
                tracing::warn!(target: crate::constant::target::DELIVERY, schedule = %self.name, slot = ms, error = %e, "could not claim the slot in the WAL; not fired");
                return true;
            }
        }
        let message = EMessage::standard(self.topic.clone(), self.payload.clone())
            .with_id(format!("{}:{}", self.name, slot_text(slot)))
            .with_header(SCHEDULE_HEADER, self.name.clone())
            .with_header(SLOT_HEADER, ms.to_string());
        if let Err(e) = bus.send(&self.topic, message).await {
            tracing::warn!(target: crate::constant::target::DELIVERY, schedule = %self.name, slot = ms, error = %e, "schedule's message not sent");
        }
        true
    }
}

/// A schedule's task: the missed slots its catch-up policy picks, then each slot in turn.
async fn run(firing: Firing, schedule: Schedule, last: Arc<Mutex<Option<SystemTime>>>) {
    let get = |last: &Mutex<Option<SystemTime>>| *last.lock().unwrap_or_else(|p| p.into_inner());
    let set = |slot: SystemTime| {
        let mut l = last.lock().unwrap_or_else(|p| p.into_inner());
        *l = Some(l.map_or(slot, |prev| prev.max(slot)));
    };
    // The wall clock as the runtime's timer moves it on, or the system's if that is ahead:
    // the same under a real clock; under a paused test clock, time that the timer skipped.
    let (wall0, timer0) = (SystemTime::now(), tokio::time::Instant::now());
    let now = || {
        let moved = wall0
            .checked_add(timer0.elapsed())
            .unwrap_or_else(SystemTime::now);
        moved.max(SystemTime::now())
    };
    if let Some(previous) = get(&last) {
        for slot in schedule
            .catch_up_policy()
            .missed(&schedule, previous, now())
        {
            if !firing.fire(slot).await {
                return;
            }
            set(slot);
        }
    }
    loop {
        let now = now();
        // After the last slot fired even if the wall clock is behind it (a paused test
        // clock runs ahead of it; a clock set back must not fire a slot twice).
        let from = get(&last).map_or(now, |l| l.max(now));
        let Some(next) = schedule.next_after(from) else {
            tracing::info!(target: crate::constant::target::DELIVERY, schedule = %firing.name, "schedule has no further slot");
            return;
        };
        let wait = next.duration_since(now).unwrap_or(Duration::ZERO);
        tokio::time::sleep(wait.min(crate::constant::MAX_WAIT)).await;
        if !firing.fire(next).await {
            return;
        }
        set(next);
    }
}

// linkme places the entry in a link section, which `deny(unsafe_code)` flags: no unsafe code
// of ours is involved (the same as a `#[handler]`'s registration).
#[allow(unsafe_code)]
#[linkme::distributed_slice(crate::bus::start_hooks::ON_START)]
static RESTORE_SCHEDULES: crate::bus::start_hooks::StartHook = |bus| Box::pin(restore(bus));

/// Takes up, at a bus's start, the schedules its WAL keeps (run by the builder's start
/// hooks, after replay).
pub(crate) async fn restore(bus: &EventBus) -> Result<(), CoreError> {
    let stored = bus.shared.delivery.wal.stored_schedules().await?;
    if stored.is_empty() {
        return Ok(());
    }
    let schedules = schedules_of(bus);
    for s in stored {
        let definition: Definition = match serde_json::from_slice(&s.definition) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(target: crate::constant::target::DELIVERY, schedule = %s.name, error = %e, "the WAL's record of this schedule does not decode; not run (register it again)");
                continue;
            }
        };
        let schedule = match Schedule::from_spec(&definition.spec, definition.catch_up) {
            Ok(schedule) => schedule,
            Err(e) => {
                tracing::warn!(target: crate::constant::target::DELIVERY, schedule = %s.name, error = %e, "the WAL's record of this schedule is not valid; not run (register it again)");
                continue;
            }
        };
        let last = s.last_slot.map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
        tracing::info!(target: crate::constant::target::BUS, schedule = %s.name, %schedule, topic = %definition.topic, "schedule taken up from the WAL");
        start(
            bus,
            &schedules,
            s.name,
            schedule,
            definition.topic,
            MessagePayload::from(definition.payload),
            Arc::new(Mutex::new(last)),
        );
    }
    Ok(())
}
