//! Recovery: rebuilding a `PersistentWal`'s state from its segment files on open.
//!
//! Segments are read oldest first and every valid record is applied, so the state ends as
//! the log left it: dead letters decoded into the in-memory index, pending messages only as
//! their place in the segments (the [`Backlog`](super::backlog), read back when replayed),
//! so that reopening decodes no message it does not have to and holds about 90 bytes per
//! pending message whatever its size. What happens at damage depends on what and where it is:
//!
//! | what | what it means | outcome |
//! |---|---|---|
//! | segments missing at the start (3, 4, 5 present) | compaction deleted them, oldest first | nothing: normal |
//! | a segment missing between the first and the last (1, 2, 4, 5) | a sealed segment was lost | [`WalError::Corrupt`] naming the missing file, or, with `skip_corrupt(true)`, a `warn!` and an empty segment written in its place (so later opens do not refuse again) |
//! | last segment shorter than the header, and what is there is a prefix of a valid header | a crash while the segment was being created: it never held a record | file removed, `warn!` |
//! | last segment with any other bad header (another file named like a segment, damage) | not understood | moved aside to `<name>.corrupt` (`<name>.<n>.corrupt` if taken), `warn!`; never deleted |
//! | last segment, bad bytes with nothing valid after them (incomplete frame, zero-filled tail, garbage) | a write torn by a crash | file truncated before them, `warn!` with the bytes dropped |
//! | last segment, bad bytes followed by a valid record | real corruption | [`WalError::Corrupt`] with file and offset, or, with `skip_corrupt(true)`, a `warn!`, the bad bytes skipped and reading resumed at the next valid record |
//! | sealed segment, bad header | real corruption | [`WalError::Corrupt`], or, with `skip_corrupt(true)`, moved aside and replaced by an empty segment |
//! | sealed segment, bad record | real corruption: those records were once complete and synced | [`WalError::Corrupt`] with file and offset, or, with `skip_corrupt(true)`, a `warn!` and reading resumed at the next valid record (none: the rest of the segment is skipped) |
//!
//! A segment is scanned a megabyte at a time (every frame's CRC checked); only at damage is
//! the rest of it read whole. Resynchronising means scanning forward one byte at a time for
//! the next offset where a whole frame decodes with a valid CRC. A record's length is checked against the configured
//! maximum before anything is read, and against the bytes present, so a corrupt length can
//! never cause a large allocation or a panic.
//!
//! Everything recovery did is summed up in a [`RecoveryReport`].

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use event_base_core::backend::{Wal, WalRecord, WalRecordState};
use event_base_core::WalError;

use super::backlog::{Backlog, Loc};
use super::fs::WalFs;
use super::record_codec::{peek_frame, read_frame, Entry, Frame, Peeked, FRAME_HEADER};
use super::segment::{self, check_header, header, io_err, path_of, HEADER_LEN};
use crate::memory_wal::MemoryWal;
use crate::record_id::RecordId;

const TARGET: &str = event_base_core::constant::target::WAL;

/// What [`PersistentWal::open`](crate::PersistentWal::open) found and did while recovering
/// a directory; see [`PersistentWal::recovery_report`](crate::PersistentWal::recovery_report).
///
/// Anything in `bytes_truncated`, `records_skipped`, `missing_segments` or `set_aside` is
/// also logged at `warn` on the `event_base::wal` target when the WAL opens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// Segment files read (those with a valid header).
    pub segments_read: usize,
    /// Valid records read and applied to the state.
    pub records_replayed: u64,
    /// Bytes cut off a torn tail of the newest segment, or removed with a newest segment
    /// whose header was only partly written (crash artefacts).
    pub bytes_truncated: u64,
    /// Damaged stretches skipped with `skip_corrupt(true)` (each one at least one record lost).
    pub records_skipped: u64,
    /// Bytes in those skipped stretches.
    pub bytes_skipped: u64,
    /// Segments missing between the first and the last, skipped with `skip_corrupt(true)`.
    pub missing_segments: Vec<PathBuf>,
    /// Files recovery did not understand and moved aside (their new paths, `*.corrupt`).
    pub set_aside: Vec<PathBuf>,
}

impl RecoveryReport {
    /// Whether recovery dropped, skipped or set aside anything at all.
    pub fn lost_anything(&self) -> bool {
        self.bytes_truncated > 0
            || self.records_skipped > 0
            || !self.missing_segments.is_empty()
            || !self.set_aside.is_empty()
    }
}

/// What recovery learned besides the index itself.
#[derive(Debug, Default)]
pub(crate) struct Recovered {
    /// For every live or dead message held in memory: the segment holding its newest full
    /// record.
    pub(crate) anchors: HashMap<RecordId, u64>,
    /// The pending messages left on disk, by location (their anchors are their slots).
    pub(crate) backlog: Backlog,
    /// Full (anchor) records written per segment.
    pub(crate) written: BTreeMap<u64, u64>,
    /// Segments found, oldest first.
    pub(crate) segments: Vec<u64>,
    /// Bytes on disk after recovery.
    pub(crate) disk_bytes: u64,
    /// The summary for the user.
    pub(crate) report: RecoveryReport,
    /// Messages whose newest record is a `Complete` with its time (version 3 on): the
    /// segment holding it and when it completed, for the bus's dedup window.
    pub(crate) completions: HashMap<Box<str>, (u64, SystemTime)>,
}

/// Moves a file recovery does not understand aside, to `<name>.corrupt` (or
/// `<name>.<n>.corrupt` if that is taken), and returns the new path.
fn set_aside(fs: &dyn WalFs, path: &Path) -> Result<PathBuf, WalError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut to = dir.join(format!("{name}.corrupt"));
    let mut n = 1u32;
    while fs.exists(&to).map_err(|e| io_err(&to, e))? {
        to = dir.join(format!("{name}.{n}.corrupt"));
        n += 1;
    }
    fs.rename(path, &to).map_err(|e| io_err(path, e))?;
    segment::sync_dir(fs, dir)?;
    Ok(to)
}

/// Bytes of a segment the scan reads at a time: a buffer that stays in the caches and is
/// reused, rather than a whole segment (64 MiB by default) allocated and faulted in anew.
const SCAN_CHUNK: usize = 1 << 20;

/// A stretch of a segment being scanned: its bytes from `base` on.
struct Chunk {
    base: u64,
    bytes: Vec<u8>,
    /// Whether `bytes` ends where the file ends (the read returned less than asked).
    at_end: bool,
}

impl Chunk {
    /// The first stretch of the segment at `path`.
    fn first(fs: &dyn WalFs, path: &Path) -> Result<Chunk, WalError> {
        Chunk::read(fs, path, 0, SCAN_CHUNK)
    }

    fn read(fs: &dyn WalFs, path: &Path, base: u64, len: usize) -> Result<Chunk, WalError> {
        let bytes = fs.read_at(path, base, len).map_err(|e| io_err(path, e))?;
        Ok(Chunk {
            base,
            at_end: bytes.len() < len,
            bytes,
        })
    }

    /// The stretch from `pos` (of this one) on, at least `need` bytes of it if the file
    /// has them.
    fn next(self, fs: &dyn WalFs, path: &Path, pos: usize, need: usize) -> Result<Chunk, WalError> {
        Chunk::read(fs, path, self.base + pos as u64, need.max(SCAN_CHUNK))
    }

    /// Everything from `pos` (of this one) to the end of the file.
    fn rest(self, fs: &dyn WalFs, path: &Path, pos: usize) -> Result<Chunk, WalError> {
        let from = self.base + pos as u64;
        let len = fs
            .len(path)
            .map_err(|e| io_err(path, e))?
            .saturating_sub(from);
        // One byte more than the file holds, so that `at_end` is set.
        Chunk::read(
            fs,
            path,
            from,
            usize::try_from(len).unwrap_or(usize::MAX - 1) + 1,
        )
    }
}

/// The whole length of the frame starting `buf` as its header gives it (0 if the header
/// itself is cut short); checked against the limit by `peek_frame` before this is asked.
fn frame_len(buf: &[u8]) -> usize {
    match buf.get(..4) {
        Some(b) => FRAME_HEADER + u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize,
        None => 0,
    }
}

/// The next offset after `from` where a whole valid frame starts, if any.
fn resync(bytes: &[u8], from: usize, max_body: usize) -> Option<usize> {
    (from + 1..bytes.len())
        .find(|&q| matches!(read_frame(&bytes[q..], max_body), Frame::Record(..)))
}

/// Bad bytes found at `pos` of a segment's last chunk (which holds the rest of the file).
struct Damage<'a> {
    fs: &'a dyn WalFs,
    path: &'a Path,
    is_last: bool,
    max_body: usize,
    skip_corrupt: bool,
}

impl Damage<'_> {
    /// A torn tail cut off (`None`), damage skipped (`Some` of where to resume), or the
    /// damage as the error.
    fn handle(
        &self,
        chunk: &Chunk,
        pos: usize,
        reason: String,
        out: &mut Recovered,
    ) -> Result<Option<usize>, WalError> {
        let (bytes, base, path) = (&chunk.bytes, chunk.base, self.path);
        let next = resync(bytes, pos, self.max_body);
        if self.is_last && next.is_none() {
            let dropped = bytes.len() - pos;
            let at = base + pos as u64;
            tracing::warn!(target: TARGET, file = %path.display(), offset = at, dropped_bytes = dropped, %reason, "WAL: truncating a torn tail left by a crash (nothing valid follows it)");
            self.fs.truncate(path, at).map_err(|e| io_err(path, e))?;
            out.report.bytes_truncated += dropped as u64;
            out.disk_bytes += at;
            return Ok(None);
        }
        let err = WalError::Corrupt {
            file: path.to_owned(),
            offset: base + pos as u64,
            reason: match next {
                Some(q) => format!("{reason}; valid records follow at offset {}, so this is damage, not a torn tail", base + q as u64),
                None => format!("{reason} in a sealed segment"),
            },
        };
        if !self.skip_corrupt {
            return Err(err);
        }
        let resume = next.unwrap_or(bytes.len());
        tracing::warn!(target: TARGET, error = %err, skipped_bytes = resume - pos, "WAL: skipping damaged bytes; the records in them are lost");
        out.report.records_skipped += 1;
        out.report.bytes_skipped += (resume - pos) as u64;
        Ok(Some(resume))
    }
}

/// Reads every segment of `dir` into `index`.
pub(crate) fn recover(
    fs: &dyn WalFs,
    dir: &Path,
    index: &MemoryWal,
    max_body: usize,
    skip_corrupt: bool,
) -> Result<Recovered, WalError> {
    let mut out = Recovered::default();
    let mut found = segment::list(fs, dir)?;
    set_aside_bad_newest(fs, dir, &mut found, &mut out)?;
    let seqs = fill_gaps(fs, dir, &found, skip_corrupt, &mut out)?;
    let count = seqs.len();
    let mut kept = Vec::with_capacity(count);
    // The segments' sizes: what is left to scan, to size the backlog once its first
    // stretch says how many pending messages a byte of log holds.
    let sizes = seqs
        .iter()
        .map(|&seq| {
            let path = path_of(dir, seq);
            fs.len(&path).map_err(|e| io_err(&path, e))
        })
        .collect::<Result<Vec<u64>, WalError>>()?;
    let total: u64 = sizes.iter().sum();
    let mut scanned = 0u64;
    let mut reserved = false;
    for (i, &seq) in seqs.iter().enumerate() {
        let is_last = i + 1 == count;
        let path = path_of(dir, seq);
        let mut chunk = Chunk::first(fs, &path)?;
        if let Err(reason) = check_header(&chunk.bytes) {
            replace_bad_header(fs, dir, seq, reason, skip_corrupt, &mut out)?;
            kept.push(seq);
            scanned += sizes[i];
            continue;
        }
        out.report.segments_read += 1;
        let mut pos = HEADER_LEN;
        let mut truncated = false;
        loop {
            if !reserved && scanned + chunk.base + pos as u64 >= SCAN_CHUNK as u64 {
                reserved = true;
                reserve(&mut out.backlog, scanned + chunk.base + pos as u64, total);
            }
            if pos >= chunk.bytes.len() {
                if chunk.at_end {
                    break;
                }
                chunk = chunk.next(fs, &path, pos, 0)?;
                pos = 0;
                continue;
            }
            let offset = chunk.base + pos as u64;
            let reason = match peek_frame(&chunk.bytes[pos..], max_body) {
                Peeked::Pending(id, state, created, len) => {
                    let loc = Loc::frame(seq, offset, len);
                    if !put_pending(index, &mut out, &id, loc, state, created) {
                        // The backlog is full (2^32 slots): this one stays in memory.
                        if let Frame::Record(entry, _) = read_frame(&chunk.bytes[pos..], max_body) {
                            apply(index, &mut out, seq, offset, len, entry);
                        }
                    }
                    out.report.records_replayed += 1;
                    pos += len;
                    continue;
                }
                Peeked::Record(entry, len) => {
                    apply(index, &mut out, seq, offset, len, entry);
                    out.report.records_replayed += 1;
                    pos += len;
                    continue;
                }
                Peeked::Torn if !chunk.at_end => {
                    // The frame runs past this chunk: read on from its start.
                    let frame = frame_len(&chunk.bytes[pos..]);
                    chunk = chunk.next(fs, &path, pos, frame)?;
                    pos = 0;
                    continue;
                }
                Peeked::Torn => "incomplete record".to_string(),
                Peeked::Corrupt(reason) => reason,
            };
            // Damage (rare): the rest of the segment in memory, to look for what follows.
            if !chunk.at_end {
                chunk = chunk.rest(fs, &path, pos)?;
                pos = 0;
            }
            let damage = Damage {
                fs,
                path: &path,
                is_last,
                max_body,
                skip_corrupt,
            };
            match damage.handle(&chunk, pos, reason, &mut out)? {
                Some(resume) => pos = resume,
                None => {
                    truncated = true;
                    break;
                }
            }
        }
        if !truncated {
            out.disk_bytes += chunk.base + chunk.bytes.len() as u64;
        }
        scanned += sizes[i];
        kept.push(seq);
    }
    out.segments = kept;
    out.backlog.finish();
    Ok(out)
}

/// A sealed segment whose header is bad: the error, or with `skip_corrupt` moved aside and
/// replaced by an empty segment.
fn replace_bad_header(
    fs: &dyn WalFs,
    dir: &Path,
    seq: u64,
    reason: String,
    skip_corrupt: bool,
    out: &mut Recovered,
) -> Result<(), WalError> {
    let path = path_of(dir, seq);
    let err = WalError::Corrupt {
        file: path.clone(),
        offset: 0,
        reason,
    };
    if !skip_corrupt {
        return Err(err);
    }
    let to = set_aside(fs, &path)?;
    tracing::warn!(target: TARGET, error = %err, moved_to = %to.display(), "WAL: moved a sealed segment with a damaged header aside and wrote an empty one in its place");
    drop(segment::create(fs, dir, seq)?);
    out.report.set_aside.push(to);
    out.disk_bytes += HEADER_LEN as u64;
    Ok(())
}

/// Sizes the backlog once, from the first `done` of `total` bytes scanned: the slots and
/// the id map then grow (copy, rehash) only if the rest of the log holds more per byte.
fn reserve(backlog: &mut Backlog, done: u64, total: u64) {
    let per_byte = backlog.len() as f64 / done as f64;
    backlog.reserve((total.saturating_sub(done) as f64 * per_byte) as usize);
}

/// Takes a newest segment with a bad header out of `found`: removed if it is a partly
/// written header (a crash while creating it), otherwise moved aside.
fn set_aside_bad_newest(
    fs: &dyn WalFs,
    dir: &Path,
    found: &mut Vec<u64>,
    out: &mut Recovered,
) -> Result<(), WalError> {
    // The newest segment first: a bad header there is either a crash while it was being
    // created or a file that is not ours. Either way it is taken out before the sequence
    // is checked, so a stray file with a large number is not mistaken for a gap.
    if let Some(&last) = found.last() {
        let path = path_of(dir, last);
        // The header alone: the whole segment is read once, by the scan.
        let bytes = fs
            .read_at(&path, 0, HEADER_LEN)
            .map_err(|e| io_err(&path, e))?;
        if let Err(reason) = check_header(&bytes) {
            found.pop();
            if bytes.len() < HEADER_LEN && header().starts_with(&bytes) {
                tracing::warn!(target: TARGET, file = %path.display(), bytes = bytes.len(), "WAL: removing a newest segment whose header was never completely written (a crash while creating it; it held no records)");
                fs.remove(&path).map_err(|e| io_err(&path, e))?;
                segment::sync_dir(fs, dir)?;
                out.report.bytes_truncated += bytes.len() as u64;
            } else {
                let to = set_aside(fs, &path)?;
                tracing::warn!(target: TARGET, file = %path.display(), moved_to = %to.display(), %reason, "WAL: the newest segment file has a header recovery does not understand; moved it aside, not deleted (inspect it, and delete it once you are sure it is not needed)");
                out.report.set_aside.push(to);
            }
        }
    }

    Ok(())
}

/// `found` with every segment missing between the first and the last put back (as an empty
/// segment) if `skip_corrupt`, or the first one missing as [`WalError::Corrupt`].
fn fill_gaps(
    fs: &dyn WalFs,
    dir: &Path,
    found: &[u64],
    skip_corrupt: bool,
    out: &mut Recovered,
) -> Result<Vec<u64>, WalError> {
    // Compaction deletes segments oldest first, so only a gap between the first and the
    // last segment present means a lost segment.
    let mut seqs = Vec::with_capacity(found.len());
    let mut previous: Option<u64> = None;
    for &seq in found {
        if let Some(prev) = previous {
            for missing in prev + 1..seq {
                let path = path_of(dir, missing);
                let err = WalError::Corrupt {
                    file: path.clone(),
                    offset: 0,
                    reason: format!(
                        "segment missing between {} and {}: its records are lost",
                        path_of(dir, prev).display(),
                        path_of(dir, seq).display()
                    ),
                };
                if !skip_corrupt {
                    return Err(err);
                }
                tracing::warn!(target: TARGET, error = %err, "WAL: going on without a missing segment; writing an empty one in its place");
                drop(segment::create(fs, dir, missing)?);
                out.report.missing_segments.push(path);
                seqs.push(missing);
            }
        }
        seqs.push(seq);
        previous = Some(seq);
    }

    Ok(seqs)
}

fn anchor(out: &mut Recovered, id: RecordId, seq: u64) {
    // Live or dead again: no longer a completed message.
    out.completions.remove(id.as_str());
    out.backlog.remove(id.as_str());
    // Removed first so that the key is the newest record's message, not an older copy.
    out.anchors.remove(id.as_str());
    out.anchors.insert(id, seq);
    *out.written.entry(seq).or_default() += 1;
}

/// Records a pending message as a backlog slot (its message stays on disk); `false` if the
/// backlog is full.
fn put_pending(
    index: &MemoryWal,
    out: &mut Recovered,
    id: &str,
    loc: Loc,
    state: WalRecordState,
    created: u64,
) -> bool {
    if !out.backlog.push(id, loc, state, created) {
        return false;
    }
    // Both are empty in a log of pending messages only: skip hashing the id for them.
    if !out.completions.is_empty() {
        out.completions.remove(id);
    }
    if !out.anchors.is_empty() && out.anchors.remove(id).is_some() {
        // It was held in memory (a dead letter sent again, say): the slot replaces it.
        index.forget_record(id);
    }
    *out.written.entry(loc.seq).or_default() += 1;
    true
}

/// Takes a message out of both the backlog and the in-memory index.
fn forget(index: &MemoryWal, out: &mut Recovered, id: &str) {
    if out.backlog.remove(id).is_none() {
        index.forget_record(id);
    }
    out.anchors.remove(id);
}

/// Applies a decoded record found at `offset` of segment `seq`, `len` bytes long.
fn apply(index: &MemoryWal, out: &mut Recovered, seq: u64, offset: u64, len: usize, entry: Entry) {
    let id = entry.record_id();
    match entry {
        Entry::Append(message) | Entry::Retry(message) => {
            index.restore(WalRecord {
                updated_at: message.metadata.created_at,
                message,
                state: WalRecordState::Pending,
                dead_reason: None,
                dead_handlers: Vec::new(),
            });
            anchor(out, id, seq);
        }
        Entry::Processing(id) => {
            if !out
                .backlog
                .set_state(id.as_str(), WalRecordState::Processing)
            {
                let _ = index.begin(id.as_str());
            }
        }
        Entry::Complete(id, at) => {
            forget(index, out, id.as_str());
            if at > UNIX_EPOCH {
                out.completions.insert(id.as_str().into(), (seq, at));
            }
        }
        Entry::Cancel(id) | Entry::Purge(id) => forget(index, out, id.as_str()),
        Entry::CompleteWith { id, at, messages } => {
            apply(index, out, seq, offset, len, Entry::Complete(id, at));
            for (i, m) in messages.into_iter().enumerate() {
                let loc = u16::try_from(i + 1).ok().map(|sub| Loc {
                    seq,
                    offset,
                    len: len as u32,
                    sub,
                });
                let created = m
                    .metadata
                    .created_at
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64);
                let kept = loc.is_some_and(|loc| {
                    put_pending(index, out, &m.id, loc, WalRecordState::Pending, created)
                });
                if !kept {
                    apply(index, out, seq, offset, len, Entry::Append(m));
                }
            }
        }
        Entry::Failed {
            message,
            reason,
            died_at,
            handlers,
        } => {
            index.restore(WalRecord {
                message,
                state: WalRecordState::Failed,
                updated_at: died_at,
                dead_reason: Some(reason),
                dead_handlers: handlers,
            });
            anchor(out, id, seq);
        }
        Entry::Snapshot {
            message,
            state,
            reason,
            at,
            handlers,
        } => {
            if state == WalRecordState::Complete {
                forget(index, out, id.as_str());
            } else {
                index.restore(WalRecord {
                    message,
                    state,
                    updated_at: at,
                    dead_reason: reason,
                    dead_handlers: handlers,
                });
                anchor(out, id, seq);
            }
        }
    }
}
