//! Segment files of the `PersistentWal`: names, header, listing.
//!
//! A WAL directory holds segment files named by a 20-digit sequence number,
//! `00000000000000000001.wal`, `00000000000000000002.wal`, ... Records are only ever appended
//! to the newest (active) segment; older ones are sealed and deleted once none of their records
//! is needed any more (see `wal_writer`).
//!
//! Every segment starts with a 16-byte header:
//!
//! ```text
//! offset  size  field
//! 0       8     magic  b"EBWALSEG"
//! 8       4     segment format version, u32 LE (1)
//! 12      4     reserved, zero
//! ```
//!
//! then frames as described in `record_codec`.

use std::path::{Path, PathBuf};

use event_base_core::WalError;

use super::fs::{WalFile, WalFs};

pub(crate) const MAGIC: &[u8; 8] = b"EBWALSEG";
pub(crate) const SEGMENT_VERSION: u32 = 1;
pub(crate) const HEADER_LEN: usize = 16;

pub(crate) fn header() -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
    h
}

/// Checks a segment header; `Err` says what is wrong.
pub(crate) fn check_header(bytes: &[u8]) -> Result<(), String> {
    if bytes.len() < HEADER_LEN {
        return Err(format!(
            "header is {} bytes, expected {HEADER_LEN}",
            bytes.len()
        ));
    }
    if &bytes[..8] != MAGIC {
        return Err("not an event_base WAL segment (bad magic)".into());
    }
    let v = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if v != SEGMENT_VERSION {
        return Err(format!(
            "segment format version {v} is not supported (expected {SEGMENT_VERSION})"
        ));
    }
    Ok(())
}

pub(crate) fn path_of(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}.wal"))
}

pub(crate) fn io_err(path: &Path, source: std::io::Error) -> WalError {
    WalError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Sequence numbers of the segments in `dir`, oldest first. Other files are ignored.
pub(crate) fn list(fs: &dyn WalFs, dir: &Path) -> Result<Vec<u64>, WalError> {
    let mut seqs = Vec::new();
    for name in fs.list(dir).map_err(|e| io_err(dir, e))? {
        if let Some(stem) = name.strip_suffix(".wal") {
            if stem.len() == 20 {
                if let Ok(n) = stem.parse::<u64>() {
                    seqs.push(n);
                }
            }
        }
    }
    seqs.sort_unstable();
    Ok(seqs)
}

/// Creates a new segment with its header, durably (file and directory entry).
pub(crate) fn create(fs: &dyn WalFs, dir: &Path, seq: u64) -> Result<Box<dyn WalFile>, WalError> {
    let path = path_of(dir, seq);
    let mut f = fs.create_new(&path).map_err(|e| io_err(&path, e))?;
    f.write_all(&header()).map_err(|e| io_err(&path, e))?;
    f.sync_all().map_err(|e| io_err(&path, e))?;
    sync_dir(fs, dir)?;
    Ok(f)
}

/// Opens an existing (recovered, so well-formed) segment to append to it.
pub(crate) fn open_for_append(
    fs: &dyn WalFs,
    dir: &Path,
    seq: u64,
) -> Result<Box<dyn WalFile>, WalError> {
    let path = path_of(dir, seq);
    fs.open_append(&path).map_err(|e| io_err(&path, e))
}

/// Makes a directory's entries (created or deleted files) durable.
pub(crate) fn sync_dir(fs: &dyn WalFs, dir: &Path) -> Result<(), WalError> {
    fs.sync_dir(dir).map_err(|e| io_err(dir, e))
}
