//! The completion log (`completions.log`): completions still within the dedup window whose
//! segment compaction deleted, kept in a file of their own so that a bus started after a
//! restart can still refuse their ids as duplicates.
//!
//! Its records are `Complete` frames, as in segments, with no header. It is only appended to
//! (and synced) before a segment goes, and rewritten (a temporary file, then a rename) when
//! expired entries make up most of it. A torn or damaged tail ends the reading: the file only
//! ever loses dedup information, never a message. On open, segments take precedence: an id
//! that is live or dead in them is not a completion.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use event_base_core::WalError;

use super::fs::{WalFile, WalFs};
use super::record_codec::{encode, read_frame, Entry, Frame, FRAME_HEADER};
use super::segment::io_err;
use crate::record_id::RecordId;

/// The file's name in the WAL directory.
pub(crate) const FILE: &str = "completions.log";
/// Smallest size at which a rewrite is considered.
const REWRITE_AT: u64 = 64 << 10;

/// The completion log of one WAL directory.
pub(crate) struct CompletionLog {
    dir: PathBuf,
    file: Option<Box<dyn WalFile>>,
    bytes: u64,
    /// What the file holds (id, completion time), oldest first.
    pub(crate) entries: Vec<(Box<str>, SystemTime)>,
}

fn frame_len(id: &str) -> u64 {
    (FRAME_HEADER + 2 + 4 + id.len() + 8) as u64
}

impl CompletionLog {
    /// Reads the log of `dir`, if there is one.
    pub(crate) fn load(fs: &dyn WalFs, dir: &Path, max_body: usize) -> Result<Self, WalError> {
        let path = dir.join(FILE);
        let mut log = CompletionLog {
            dir: dir.to_owned(),
            file: None,
            bytes: 0,
            entries: Vec::new(),
        };
        if !fs.exists(&path).map_err(|e| io_err(&path, e))? {
            return Ok(log);
        }
        let bytes = fs.read(&path).map_err(|e| io_err(&path, e))?;
        let mut at = 0;
        while at < bytes.len() {
            match read_frame(&bytes[at..], max_body) {
                Frame::Record(Entry::Complete(id, done), len) => {
                    log.entries.push((id.as_str().into(), done));
                    at += len;
                }
                Frame::Record(_, len) => at += len,
                Frame::Torn | Frame::Corrupt(_) => {
                    tracing::warn!(target: event_base_core::constant::target::WAL, file = %path.display(), offset = at, "the completion log ends in damaged bytes; the completions after them are forgotten (their ids may be sent again)");
                    break;
                }
            }
        }
        log.bytes = at as u64;
        Ok(log)
    }

    /// Appends `items` and syncs them.
    pub(crate) fn append(
        &mut self,
        fs: &dyn WalFs,
        items: Vec<(Box<str>, SystemTime)>,
        retention: Duration,
    ) -> Result<(), WalError> {
        if items.is_empty() {
            return Ok(());
        }
        let path = self.dir.join(FILE);
        let mut buf = Vec::new();
        for (id, at) in &items {
            encode(&Entry::Complete(RecordId::Text(id.clone()), *at), &mut buf);
        }
        if self.file.is_none() {
            let file = if fs.exists(&path).map_err(|e| io_err(&path, e))? {
                fs.open_append(&path)
            } else {
                fs.create_new(&path)
            };
            self.file = Some(file.map_err(|e| io_err(&path, e))?);
            fs.sync_dir(&self.dir).map_err(|e| io_err(&self.dir, e))?;
        }
        if let Some(file) = self.file.as_mut() {
            file.write_all(&buf).map_err(|e| io_err(&path, e))?;
            file.sync_data().map_err(|e| io_err(&path, e))?;
        }
        self.bytes += buf.len() as u64;
        self.entries.extend(items);
        self.maybe_rewrite(fs, retention)
    }

    /// Rewrites the file without its expired entries once they make up most of it.
    fn maybe_rewrite(&mut self, fs: &dyn WalFs, retention: Duration) -> Result<(), WalError> {
        if self.bytes < REWRITE_AT {
            return Ok(());
        }
        let oldest = SystemTime::now()
            .checked_sub(retention)
            .unwrap_or(UNIX_EPOCH);
        let keep: u64 = self
            .entries
            .iter()
            .filter(|(_, at)| *at >= oldest)
            .map(|(id, _)| frame_len(id))
            .sum();
        if keep.saturating_mul(2) > self.bytes {
            return Ok(());
        }
        self.entries.retain(|(_, at)| *at >= oldest);
        let mut buf = Vec::new();
        for (id, at) in &self.entries {
            encode(&Entry::Complete(RecordId::Text(id.clone()), *at), &mut buf);
        }
        let path = self.dir.join(FILE);
        let tmp = self.dir.join(format!("{FILE}.tmp"));
        let _ = fs.remove(&tmp);
        let mut file = fs.create_new(&tmp).map_err(|e| io_err(&tmp, e))?;
        file.write_all(&buf).map_err(|e| io_err(&tmp, e))?;
        file.sync_all().map_err(|e| io_err(&tmp, e))?;
        drop(file);
        self.file = None;
        fs.rename(&tmp, &path).map_err(|e| io_err(&path, e))?;
        fs.sync_dir(&self.dir).map_err(|e| io_err(&self.dir, e))?;
        self.bytes = buf.len() as u64;
        Ok(())
    }
}
