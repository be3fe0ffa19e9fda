//! Recovery: rebuilding a `PersistentWal`'s state from its segment files on open.
//!
//! Segments are read oldest first and every valid record is applied to the in-memory index,
//! so the index ends as the log left it. What happens at a bad record depends on where it is:
//!
//! | where | what it means | outcome |
//! |---|---|---|
//! | last segment, incomplete frame | a write torn by a crash | file truncated before it, `warn!` with the bytes dropped |
//! | last segment, bad length / CRC / body (e.g. a zero-filled tail, garbage) | a torn or partly written tail | the same |
//! | sealed segment, anything bad | real corruption: those records were once complete and synced | [`WalError::Corrupt`] with file and offset, or, with `skip_corrupt(true)`, a `warn!` and the rest of that segment skipped |
//!
//! A record's length is checked against the configured maximum before anything is read, and
//! against the bytes present, so a corrupt length can never cause a large allocation or a panic.

use std::collections::{BTreeMap, HashMap};
use std::fs::OpenOptions;
use std::path::Path;

use event_base_core::{Wal, WalError, WalRecord, WalRecordState};

use super::record_codec::{read_frame, Entry, Frame};
use super::segment::{self, check_header, io_err, path_of, HEADER_LEN};
use crate::memory_wal::MemoryWal;
use crate::record_id::RecordId;

/// What recovery learned besides the index itself.
#[derive(Debug, Default)]
pub(crate) struct Recovered {
    /// For every live or dead message: the segment holding its newest full record.
    pub(crate) anchors: HashMap<RecordId, u64>,
    /// Full (anchor) records written per segment.
    pub(crate) written: BTreeMap<u64, u64>,
    /// Segments found, oldest first.
    pub(crate) segments: Vec<u64>,
    /// Bytes on disk after recovery.
    pub(crate) disk_bytes: u64,
    /// Bytes dropped from a torn tail.
    pub(crate) truncated_bytes: u64,
}

/// Reads every segment of `dir` into `index`.
pub(crate) fn recover(
    dir: &Path,
    index: &MemoryWal,
    max_body: usize,
    skip_corrupt: bool,
) -> Result<Recovered, WalError> {
    let mut out = Recovered::default();
    let found = segment::list(dir)?;
    let count = found.len();
    let mut kept = Vec::with_capacity(count);
    for (i, &seq) in found.iter().enumerate() {
        let is_last = i + 1 == count;
        let path = path_of(dir, seq);
        let bytes = std::fs::read(&path).map_err(|e| io_err(&path, e))?;
        if let Err(reason) = check_header(&bytes) {
            if is_last {
                tracing::warn!(target: event_base_core::constant::target::WAL, file = %path.display(), %reason, bytes = bytes.len(), "WAL: dropping a segment whose header was never completely written");
                std::fs::remove_file(&path).map_err(|e| io_err(&path, e))?;
                out.truncated_bytes += bytes.len() as u64;
                continue;
            }
            let err = WalError::Corrupt {
                file: path.clone(),
                offset: 0,
                reason,
            };
            if skip_corrupt {
                tracing::warn!(target: event_base_core::constant::target::WAL, error = %err, "WAL: skipping a corrupt segment");
                kept.push(seq);
                out.disk_bytes += bytes.len() as u64;
                continue;
            }
            return Err(err);
        }
        let mut pos = HEADER_LEN;
        while pos < bytes.len() {
            match read_frame(&bytes[pos..], max_body) {
                Frame::Record(entry, len) => {
                    apply(index, &mut out, seq, entry);
                    pos += len;
                }
                Frame::Torn | Frame::Corrupt(_) if is_last => {
                    let dropped = bytes.len() - pos;
                    tracing::warn!(target: event_base_core::constant::target::WAL, file = %path.display(), offset = pos, dropped_bytes = dropped, "WAL: truncating a torn or corrupt tail left by a crash");
                    let f = OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .map_err(|e| io_err(&path, e))?;
                    f.set_len(pos as u64).map_err(|e| io_err(&path, e))?;
                    f.sync_all().map_err(|e| io_err(&path, e))?;
                    out.truncated_bytes += dropped as u64;
                    break;
                }
                Frame::Torn => {
                    let err = WalError::Corrupt {
                        file: path.clone(),
                        offset: pos as u64,
                        reason: "incomplete record in a sealed segment".into(),
                    };
                    if !skip_corrupt {
                        return Err(err);
                    }
                    tracing::warn!(target: event_base_core::constant::target::WAL, error = %err, "WAL: skipping the rest of a corrupt segment");
                    break;
                }
                Frame::Corrupt(reason) => {
                    let err = WalError::Corrupt {
                        file: path.clone(),
                        offset: pos as u64,
                        reason,
                    };
                    if !skip_corrupt {
                        return Err(err);
                    }
                    tracing::warn!(target: event_base_core::constant::target::WAL, error = %err, "WAL: skipping the rest of a corrupt segment");
                    break;
                }
            }
        }
        kept.push(seq);
        out.disk_bytes += pos.min(bytes.len()) as u64;
    }
    out.segments = kept;
    Ok(out)
}

fn anchor(out: &mut Recovered, id: RecordId, seq: u64) {
    // Removed first so that the key is the newest record's message, not an older copy.
    out.anchors.remove(id.as_str());
    out.anchors.insert(id, seq);
    *out.written.entry(seq).or_default() += 1;
}

fn apply(index: &MemoryWal, out: &mut Recovered, seq: u64, entry: Entry) {
    let id = entry.record_id();
    match entry {
        Entry::Append(message) | Entry::Retry(message) => {
            index.restore(WalRecord {
                updated_at: message.metadata.created_at,
                message,
                state: WalRecordState::Pending,
                dead_reason: None,
            });
            anchor(out, id, seq);
        }
        Entry::Processing(id) => {
            let _ = index.begin(id.as_str());
        }
        Entry::Complete(id) | Entry::Cancel(id) | Entry::Purge(id) => {
            index.forget_record(id.as_str());
            out.anchors.remove(id.as_str());
        }
        Entry::Failed {
            message,
            reason,
            died_at,
        } => {
            index.restore(WalRecord {
                message,
                state: WalRecordState::Failed,
                updated_at: died_at,
                dead_reason: Some(reason),
            });
            anchor(out, id, seq);
        }
        Entry::Snapshot {
            message,
            state,
            reason,
            at,
        } => {
            if state == WalRecordState::Complete {
                index.forget_record(id.as_str());
                out.anchors.remove(id.as_str());
            } else {
                index.restore(WalRecord {
                    message,
                    state,
                    updated_at: at,
                    dead_reason: reason,
                });
                anchor(out, id, seq);
            }
        }
    }
}
