//! Idempotent sends: the ids of messages completed within the dedup window.
//!
//! A send whose id the WAL still holds (pending, processing, a dead letter) is a duplicate;
//! the WAL answers that itself ([`Wal::append_unique`](crate::backend::Wal::append_unique)).
//! What the WAL no longer holds, completed messages, is kept here: a 128-bit hash of each id,
//! in shards, each shard in three generations of half a window, each a [`KeySet`] (one cache
//! line a lookup or an insert; a dropped generation's room serves the next one). A completion goes into the
//! generation of its time; a generation is dropped whole once it is a window and a half old.
//! So an id is refused for at least the window and at most one and a half windows after it
//! completed, memory is bounded by the messages completed in that time (16 bytes and a bit
//! each), and neither recording nor looking up keeps a time per id. A shard gathers its
//! latest completions (up to 16, all of one generation; a lookup finds them there) and puts
//! them in their set together, so that their cache misses overlap.
//!
//! The order makes it race-free: a completion enters the window (gathered or in its set)
//! *before* its WAL record is removed, and a send checks the window *after* its WAL append, so at any moment an id that
//! was accepted is in the WAL, in the window, or both.
//!
//! A send of an id this process minted and no send has claimed yet skips the lookup
//! ([`completed_before`](DedupWindow::completed_before), `message/minted.rs`): the lookup would
//! miss the cache for a "no" known in advance. The claim is made *after* the send's WAL append
//! (and before its message is queued), which keeps the argument above true. Say send `T`
//! claims id `x`, skips the lookup and is accepted, and another send `S` of `x` is accepted
//! too. `S` tried to claim after its own append and before its message was queued; only one
//! try takes a key, and a key taken never comes back, so `S` tried after `T`'s claim. `S`
//! also appended after `T` did: otherwise `S`'s record (not queued yet, so not completed)
//! was in the WAL when `T` appended, and the WAL refused `T` before its claim. So when `S`
//! appended, `T`'s record was still in the WAL (the WAL refuses `S`), or `T` had completed,
//! its completion entered the window first, and `S`'s lookup (its claim failed) finds it.
//! Either way `S` is refused: a contradiction. (Claimed *before* the append, a send preempted
//! between the two could let a copy sent meanwhile on another thread complete unseen.) A
//! message held by an outbox is appended without coming here, so holding it takes the key
//! ([`held`](DedupWindow::held)).

use crate::delivery::dedup::id_key::IdKeys;
use crate::delivery::dedup::key_set::KeySet;
use crate::message::minted;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Shards of the window; a power of two.
const SHARDS: usize = 16;
/// Generations per shard, each half a window long.
const GENERATIONS: u64 = 3;
/// Completions a shard gathers before it puts them in their set together.
const STAGE: usize = 16;

/// Completed ids within the dedup window of one bus.
pub(crate) struct DedupWindow {
    /// Zero: dedup is off.
    window: Duration,
    /// Length of a generation, in ms (half the window, at least 1).
    half_ms: u64,
    /// An id's key, seeded per bus.
    keys: IdKeys,
    shards: Box<[Mutex<Shard>]>,
}

impl std::fmt::Debug for DedupWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DedupWindow")
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

/// One shard: the ids completed in each of the last three generations. Aligned to a cache
/// line so that the sender's lookup and a worker's insert in two shards do not share one.
#[derive(Default)]
#[repr(align(64))]
struct Shard {
    /// Generation `e` lives in slot `e % 3`, with `epochs[e % 3] == e`.
    sets: [KeySet; GENERATIONS as usize],
    epochs: [u64; GENERATIONS as usize],
    /// The span of the generation the shard last recorded into, `[start, end)`, and its
    /// epoch: a completion within it (nearly all) finds its generation by two comparisons
    /// instead of turning its time into milliseconds.
    span: Option<(SystemTime, SystemTime, u64)>,
    /// The latest completions, all of generation `staged_epoch`, not in its set yet (but
    /// found by [`find`](Self::find) all the same): put in [`STAGE`] at a time, so that the
    /// cache misses of their inserts overlap (`KeySet::insert_all`) instead of each
    /// completion waiting for its own.
    staged: [u128; STAGE],
    staged_len: usize,
    staged_epoch: u64,
}

impl Shard {
    /// The slot of generation `epoch`, emptied first if it held an older one.
    fn slot(&mut self, epoch: u64) -> &mut KeySet {
        let i = (epoch % GENERATIONS) as usize;
        if self.epochs[i] != epoch {
            self.epochs[i] = epoch;
            self.sets[i].clear();
        }
        &mut self.sets[i]
    }

    /// Gathers completed `key` of generation `epoch`; puts the gathered ones in their set
    /// once there are [`STAGE`] of them, or before one of another generation.
    fn stage(&mut self, epoch: u64, key: u128) {
        if self.staged_len != 0 && self.staged_epoch != epoch {
            self.flush();
        }
        self.staged_epoch = epoch;
        self.staged[self.staged_len] = key;
        self.staged_len += 1;
        if self.staged_len == STAGE {
            self.flush();
        }
    }

    /// Puts the gathered completions in their generation's set. Called before anything else
    /// opens a generation, so that the staged ones never outlive the set they belong in.
    fn flush(&mut self) {
        let n = std::mem::take(&mut self.staged_len);
        if n != 0 {
            let keys = self.staged;
            self.slot(self.staged_epoch).insert_all(&keys[..n]);
        }
    }

    /// The newest generation the shard holds (staged completions included).
    fn newest(&self) -> u64 {
        let held = self.epochs.iter().copied().max().unwrap_or(0);
        if self.staged_len != 0 {
            held.max(self.staged_epoch)
        } else {
            held
        }
    }

    /// The epoch of the generation holding `key`, if one does.
    fn find(&self, key: u128) -> Option<u64> {
        if self.staged[..self.staged_len].contains(&key) {
            return Some(self.staged_epoch);
        }
        (0..GENERATIONS as usize)
            .find(|&i| !self.sets[i].is_empty() && self.sets[i].contains(key))
            .map(|i| self.epochs[i])
    }
}

fn millis(t: SystemTime) -> u64 {
    // Seconds and milliseconds apart: `as_millis` divides a u128.
    t.duration_since(UNIX_EPOCH).map_or(0, |d| {
        d.as_secs()
            .saturating_mul(1000)
            .saturating_add(u64::from(d.subsec_millis()))
    })
}

impl DedupWindow {
    /// A window of `window` (zero turns dedup off).
    pub(crate) fn new(window: Duration) -> Self {
        let window_ms = window.as_millis().min(u128::from(u64::MAX)) as u64;
        if !window.is_zero() {
            minted::watch();
        }
        DedupWindow {
            window,
            half_ms: (window_ms / 2).max(1),
            keys: IdKeys::new(),
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
        }
    }

    /// Whether sends are deduplicated.
    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        !self.window.is_zero()
    }

    /// The oldest completion the window still refuses sends of: one window ago, or the Unix
    /// epoch for a window reaching back past it (`Duration::MAX`, say).
    pub(crate) fn reaches_back_to(&self) -> SystemTime {
        SystemTime::now()
            .checked_sub(self.window)
            .unwrap_or(UNIX_EPOCH)
    }

    #[inline]
    fn key(&self, id: &str) -> u128 {
        self.keys.key(id)
    }

    fn shard(&self, key: u128) -> MutexGuard<'_, Shard> {
        // The sets only hold keys; a panic elsewhere cannot leave them half-updated. The high
        // half picks the shard, the low half the set's bucket.
        self.shards[((key >> 64) as usize) & (SHARDS - 1)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    #[inline]
    fn epoch(&self, ms: u64) -> u64 {
        ms / self.half_ms
    }

    /// Message `id` completed at `at` (a time the WAL recorded before a restart).
    pub(crate) fn completed_at(&self, id: &str, at: SystemTime) {
        self.record(id, millis(at), millis(SystemTime::now()));
    }

    /// Message `id` completed just now: at `at` if the caller knows (it read the clock
    /// anyway), else the clock is read.
    #[inline]
    pub(crate) fn completed(&self, id: &str, at: Option<SystemTime>) {
        if !self.enabled() {
            return;
        }
        let at = at.unwrap_or_else(SystemTime::now);
        let key = self.key(id);
        let mut shard = self.shard(key);
        let epoch = match shard.span {
            Some((start, end, epoch)) if start <= at && at < end => epoch,
            _ => self.generation_of(&mut shard, at),
        };
        shard.stage(epoch, key);
    }

    /// The generation a completion at `at`, outside the shard's span, goes into; the span
    /// becomes that of its own generation if it goes there.
    ///
    /// A time a little older than the shard's generations (a completion whose clock read was
    /// delayed past two of them) goes into the newest: it is held a little longer, and opening
    /// its own would drop the newest generation. Much older: the clock went back; go by it.
    /// Only a generation taken as it is becomes the span, and only a completion outside the
    /// span (or [`record`](Self::record), which clears it) opens a newer one, so a completion
    /// within the span would take its generation here too: it skips this.
    #[cold]
    fn generation_of(&self, shard: &mut Shard, at: SystemTime) -> u64 {
        let epoch = self.epoch(millis(at));
        let newest = shard.newest();
        if epoch + GENERATIONS <= newest && newest - epoch < 2 * GENERATIONS {
            return newest;
        }
        shard.span = self.span(epoch);
        epoch
    }

    /// The span of generation `epoch`, `[start, end)` (none past the clock's range).
    fn span(&self, epoch: u64) -> Option<(SystemTime, SystemTime, u64)> {
        let start =
            UNIX_EPOCH.checked_add(Duration::from_millis(epoch.checked_mul(self.half_ms)?))?;
        let end = start.checked_add(Duration::from_millis(self.half_ms))?;
        Some((start, end, epoch))
    }

    fn record(&self, id: &str, stamp: u64, now: u64) {
        if !self.enabled() {
            return;
        }
        let current = self.epoch(now);
        let epoch = if stamp == now {
            current
        } else {
            self.epoch(stamp)
        };
        if epoch + GENERATIONS <= current || epoch > current {
            return; // past the window (or from the future: a clock that went back)
        }
        let key = self.key(id);
        let mut shard = self.shard(key);
        shard.flush();
        // It may open a generation newer than the span's (see `generation_of`).
        shard.span = None;
        // Keep the generations in step with the clock: opening the current one drops the
        // one it replaces.
        if epoch != current {
            shard.slot(current);
        }
        shard.slot(epoch).insert(key);
    }

    /// Whether a send of `id`, just appended to the WAL and not queued yet, repeats one that
    /// completed within the window. The first send of an id minted here answers `false`
    /// without a lookup, and takes the id off the minted ones (see the module's text for why
    /// that has to come after the append).
    #[inline]
    pub(crate) fn completed_before(&self, id: &str) -> bool {
        if !self.enabled() {
            return false;
        }
        !minted::claim(id) && self.contains_key(self.key(id))
    }

    /// A send of `id` was held by a handler's outbox, to be appended without the check when
    /// the handler acks: the id is no longer unsent, so a later send of it does the lookup.
    pub(crate) fn held(&self, id: &str) {
        if self.enabled() {
            minted::claim(id);
        }
    }

    /// Whether `id` completed within the window.
    #[cfg(test)]
    fn contains(&self, id: &str) -> bool {
        self.enabled() && self.contains_key(self.key(id))
    }

    /// Whether the id of `key` completed within the window.
    fn contains_key(&self, key: u128) -> bool {
        let found = self.shard(key).find(key);
        // The clock only for an id found (rare): its generation may have run out since the
        // shard last recorded anything.
        found.is_some_and(|epoch| epoch + GENERATIONS > self.epoch(millis(SystemTime::now())))
    }

    /// [`contains`](Self::contains) with the clock at `now` ms (for tests).
    #[cfg(test)]
    fn contains_at(&self, id: &str, now: u64) -> bool {
        let key = self.key(id);
        let found = self.shard(key).find(key);
        found.is_some_and(|epoch| epoch + GENERATIONS > self.epoch(now))
    }

    /// Ids held (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .map(|s| s.sets.iter().map(KeySet::len).sum::<usize>() + s.staged_len)
                    .unwrap_or(0)
            })
            .sum()
    }

    /// Places for keys, used or not (for tests: the memory the sets hold, 16 bytes each).
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .map(|s| s.sets.iter().map(KeySet::capacity).sum())
                    .unwrap_or(0)
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completed_id_is_held_for_the_window_then_forgotten() {
        let w = DedupWindow::new(Duration::from_secs(60));
        let now = SystemTime::now();
        w.completed_at("old", now - Duration::from_secs(91));
        w.completed_at("recent", now - Duration::from_secs(30));
        w.completed("now", None);
        assert!(!w.contains("old"), "older than a window and a half");
        assert!(w.contains("recent"));
        assert!(w.contains("now"));
        assert!(!w.contains("never"));
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn an_id_stays_at_least_one_window_and_at_most_one_and_a_half() {
        let w = DedupWindow::new(Duration::from_secs(60));
        let t0 = 40_000 * 30_000u64; // ms: the start of a generation (30 s each)
        w.record("a", t0, t0);
        let key = w.key("a");
        let at = |ms: u64| {
            let mut shard = w.shard(key);
            shard.slot(w.epoch(ms)); // the clock moved on to `ms`
            shard
                .find(key)
                .is_some_and(|e| e + GENERATIONS > w.epoch(ms))
        };
        assert!(at(t0 + 59_999), "inside the window");
        assert!(at(t0 + 89_999), "kept until its generation runs out");
        assert!(!at(t0 + 90_000), "a window and a half later it is gone");
    }

    #[test]
    fn memory_stays_bounded_by_the_window_across_generations() {
        let w = DedupWindow::new(Duration::from_secs(60));
        let t0 = 40_000 * 30_000u64; // ms: the start of a generation (30 s each)
        let per_generation = 20_000;
        let mut room = Vec::new();
        for g in 0..12u64 {
            let now = t0 + g * 30_000;
            for i in 0..per_generation {
                w.record(&format!("id-{g}-{i}"), now, now);
            }
            // Three generations at most: the one just filled and the two before it.
            assert!(w.len() <= 3 * per_generation, "generation {g}: {}", w.len());
            room.push(w.capacity());
        }
        assert_eq!(w.len(), 3 * per_generation);
        // Once three generations have turned over, each new one reuses the room of the one it
        // drops: the sets stop growing.
        assert!(
            room[3..].iter().all(|&r| r == room[3]),
            "the room kept growing: {room:?}"
        );
        assert!(w.contains_at("id-11-7", t0 + 11 * 30_000));
        assert!(w.contains_at("id-9-7", t0 + 11 * 30_000));
        assert!(
            !w.contains_at("id-8-7", t0 + 11 * 30_000),
            "dropped with its generation"
        );
    }

    #[test]
    fn a_completion_finds_its_generation_by_its_time() {
        let w = DedupWindow::new(Duration::from_secs(60));
        let t0 = UNIX_EPOCH + Duration::from_millis(40_000 * 30_000); // a generation's start
        w.completed("a", Some(t0));
        w.completed("b", Some(t0 + Duration::from_millis(29_999))); // the same generation
        w.completed("c", Some(t0 + Duration::from_millis(30_000))); // the next one
        w.completed("d", Some(t0 - Duration::from_millis(1))); // the one before
        let epoch_of = |id: &str| {
            let key = w.key(id);
            w.shard(key).find(key)
        };
        assert_eq!(epoch_of("a"), Some(40_000));
        assert_eq!(epoch_of("b"), Some(40_000));
        assert_eq!(epoch_of("c"), Some(40_001));
        assert_eq!(epoch_of("d"), Some(39_999));
        // Two generations later, a completion stamped before them all goes into the newest
        // (rather than dropping it to open its own).
        let later = t0 + Duration::from_millis(3 * 30_000);
        for i in 0..1000 {
            w.completed(&format!("late-{i}"), Some(later)); // every shard moves on
        }
        w.completed("stale", Some(t0 - Duration::from_millis(30_001)));
        assert_eq!(epoch_of("stale"), Some(40_003));
        assert_eq!(
            epoch_of("late-0"),
            Some(40_003),
            "the newest generation stays"
        );
    }

    #[test]
    fn a_late_completion_in_an_old_span_goes_into_a_generation_a_restart_opened_since() {
        let w = DedupWindow::new(Duration::from_secs(60));
        let t0_ms = 40_000 * 30_000u64; // a generation's start (30 s each)
        let t0 = UNIX_EPOCH + Duration::from_millis(t0_ms);
        for i in 0..1000 {
            w.completed(&format!("early-{i}"), Some(t0)); // every shard's span: 40_000
        }
        // Replayed at a restart three generations on: 40_003 takes the slot of 40_000.
        let later = t0_ms + 3 * 30_000;
        for i in 0..1000 {
            w.record(&format!("replayed-{i}"), later, later);
        }
        // Stamped inside the old span: it must not reopen 40_000 (dropping 40_003).
        w.completed("late", Some(t0 + Duration::from_millis(1)));
        for shard in w.shards.iter() {
            shard.lock().expect("shard").flush();
        }
        let epoch_of = |id: &str| {
            let key = w.key(id);
            w.shard(key).find(key)
        };
        assert_eq!(epoch_of("late"), Some(40_003));
        assert!((0..1000).all(|i| epoch_of(&format!("replayed-{i}")) == Some(40_003)));
    }

    #[test]
    fn the_first_send_of_a_minted_id_skips_the_lookup_and_later_ones_do_not() {
        let w = DedupWindow::new(Duration::from_secs(60));
        // Recorded as completed although never sent (a state a send cannot meet), to see
        // whether the lookup was made. A slot taken meanwhile by another test's id only makes
        // that send look, so one of a few fresh ids shows the skip.
        let id = (0..8)
            .map(|_| crate::message::id::new_message_id())
            .find(|id| {
                w.completed(id, None);
                !w.completed_before(id)
            })
            .expect("a first send skips the lookup");
        assert!(w.completed_before(&id), "the second send looks it up");
        w.completed("order-7", None);
        assert!(
            w.completed_before("order-7"),
            "an id set by hand is looked up"
        );
        assert!(!w.completed_before("order-8"));
    }

    #[test]
    fn a_held_send_takes_the_minted_id() {
        let w = DedupWindow::new(Duration::from_secs(60));
        let id = crate::message::id::new_message_id();
        w.held(&id);
        w.completed(&id, None);
        assert!(w.completed_before(&id), "held before: looked up");
    }

    #[test]
    fn a_zero_window_is_off() {
        let w = DedupWindow::new(Duration::ZERO);
        w.completed("a", None);
        assert!(!w.enabled());
        assert!(!w.contains("a"));
        assert_eq!(w.len(), 0);
    }
}
