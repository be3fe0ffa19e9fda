//! The recurring schedules a WAL keeps (`Wal::put_schedule` and the rest): a map by name,
//! in memory for `MemoryWal`, and for `PersistentWal` also in one file beside the segments,
//! `schedules.bin`, rewritten whole on each change (write to `schedules.bin.tmp`, `fsync`,
//! rename over, `fsync` the directory): schedules are few and change once per slot at most,
//! so a rewrite costs less than a record kind of their own in the segments and their
//! compaction.
//!
//! File format, all integers little-endian: the magic `EBSCHED1`, then per schedule
//! `u32` name length, the name (UTF-8), `u32` definition length, the definition, `u8` 1 if a
//! last slot follows (else 0), `u64` last slot (ms since the Unix epoch, only if the flag
//! is 1); then a `u32` CRC-32 of everything before it. A file that does not check out is
//! refused at open, with its path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use event_base_core::backend::StoredSchedule;
use event_base_core::WalError;

const MAGIC: &[u8; 8] = b"EBSCHED1";
/// The file's name in a `PersistentWal`'s directory.
#[cfg_attr(not(feature = "persistent"), allow(dead_code))]
pub(crate) const FILE: &str = "schedules.bin";

#[derive(Clone)]
struct Entry {
    definition: Vec<u8>,
    last_slot: Option<u64>,
}

/// The schedules of one WAL.
#[derive(Default)]
pub(crate) struct ScheduleStore {
    entries: Mutex<BTreeMap<String, Entry>>,
    /// Where they are kept on disk (`PersistentWal`), if anywhere.
    file: Option<PathBuf>,
}

impl std::fmt::Debug for ScheduleStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScheduleStore")
            .field("schedules", &self.lock().len())
            .field("file", &self.file)
            .finish()
    }
}

impl ScheduleStore {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The store kept in `dir`'s schedule file, read from it if it exists.
    #[cfg_attr(not(feature = "persistent"), allow(dead_code))]
    pub(crate) fn open(dir: &Path) -> Result<ScheduleStore, WalError> {
        let file = dir.join(FILE);
        let entries = match std::fs::read(&file) {
            Ok(bytes) => decode(&bytes).map_err(|reason| WalError::Corrupt {
                file: file.clone(),
                offset: 0,
                reason,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(source) => {
                return Err(WalError::Io {
                    path: file.clone(),
                    source,
                })
            }
        };
        Ok(ScheduleStore {
            entries: Mutex::new(entries),
            file: Some(file),
        })
    }

    pub(crate) fn put(&self, name: &str, definition: &[u8]) -> Result<(), WalError> {
        let mut entries = self.lock();
        let before = entries.get(name).cloned();
        let last_slot = before.as_ref().and_then(|e| e.last_slot);
        entries.insert(
            name.to_owned(),
            Entry {
                definition: definition.to_vec(),
                last_slot,
            },
        );
        self.save(&mut entries, name, before)
    }

    pub(crate) fn remove(&self, name: &str) -> Result<bool, WalError> {
        let mut entries = self.lock();
        let Some(before) = entries.remove(name) else {
            return Ok(false);
        };
        self.save(&mut entries, name, Some(before))?;
        Ok(true)
    }

    pub(crate) fn list(&self) -> Vec<StoredSchedule> {
        self.lock()
            .iter()
            .map(|(name, e)| StoredSchedule {
                name: name.clone(),
                definition: e.definition.clone(),
                last_slot: e.last_slot,
            })
            .collect()
    }

    pub(crate) fn claim(&self, name: &str, slot: u64) -> Result<bool, WalError> {
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(name) else {
            return Ok(false);
        };
        if entry.last_slot.is_some_and(|last| last >= slot) {
            return Ok(false);
        }
        let before = entry.clone();
        entry.last_slot = Some(slot);
        self.save(&mut entries, name, Some(before))?;
        Ok(true)
    }

    /// Writes the file (if any); on failure puts `name`'s entry back as it was `before`, so
    /// that memory never holds what the file refused.
    fn save(
        &self,
        entries: &mut BTreeMap<String, Entry>,
        name: &str,
        before: Option<Entry>,
    ) -> Result<(), WalError> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        if let Err(source) = write_atomically(file, &encode(entries)) {
            match before {
                Some(entry) => entries.insert(name.to_owned(), entry),
                None => entries.remove(name),
            };
            return Err(WalError::Io {
                path: file.clone(),
                source,
            });
        }
        Ok(())
    }
}

fn write_atomically(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = file.with_extension("bin.tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, file)?;
    if let Some(dir) = file.parent() {
        // The rename is durable once the directory is.
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

fn encode(entries: &BTreeMap<String, Entry>) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    for (name, e) in entries {
        put_bytes(&mut out, name.as_bytes());
        put_bytes(&mut out, &e.definition);
        match e.last_slot {
            Some(slot) => {
                out.push(1);
                out.extend_from_slice(&slot.to_le_bytes());
            }
            None => out.push(0),
        }
    }
    let crc = checksum(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // Names and definitions are far below 4 GiB (a name is at most 200 bytes).
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn decode(bytes: &[u8]) -> Result<BTreeMap<String, Entry>, String> {
    let body_len = bytes
        .len()
        .checked_sub(4)
        .filter(|n| *n >= MAGIC.len())
        .ok_or("schedule file too short")?;
    let (body, crc) = bytes.split_at(body_len);
    let crc = u32::from_le_bytes(crc.try_into().map_err(|_| "no checksum")?);
    if checksum(body) != crc || &body[..MAGIC.len()] != MAGIC {
        return Err("schedule file checksum or magic does not match; move it away to start without the kept schedules".to_owned());
    }
    let mut rest = &body[MAGIC.len()..];
    let mut entries = BTreeMap::new();
    while !rest.is_empty() {
        let name = String::from_utf8(take_bytes(&mut rest)?.to_vec())
            .map_err(|_| "schedule name is not UTF-8")?;
        let definition = take_bytes(&mut rest)?.to_vec();
        let (&flag, tail) = rest.split_first().ok_or("truncated schedule")?;
        rest = tail;
        let last_slot = if flag == 1 {
            let (slot, tail) = rest.split_at_checked(8).ok_or("truncated schedule")?;
            rest = tail;
            Some(u64::from_le_bytes(slot.try_into().map_err(|_| "bad slot")?))
        } else {
            None
        };
        entries.insert(
            name,
            Entry {
                definition,
                last_slot,
            },
        );
    }
    Ok(entries)
}

fn take_bytes<'a>(rest: &mut &'a [u8]) -> Result<&'a [u8], String> {
    let (len, tail) = rest.split_at_checked(4).ok_or("truncated schedule")?;
    let len = u32::from_le_bytes(len.try_into().map_err(|_| "bad length")?) as usize;
    let (bytes, tail) = tail.split_at_checked(len).ok_or("truncated schedule")?;
    *rest = tail;
    Ok(bytes)
}

/// CRC-32 (IEEE), bitwise: the file is small and read once per open.
fn checksum(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_taken_once_and_only_forward() {
        let store = ScheduleStore::default();
        assert!(!store.claim("tick", 10).unwrap(), "no such schedule");
        store.put("tick", b"def").unwrap();
        assert!(store.claim("tick", 10).unwrap());
        assert!(!store.claim("tick", 10).unwrap(), "the same slot twice");
        assert!(!store.claim("tick", 5).unwrap(), "an earlier slot");
        store.put("tick", b"def2").unwrap();
        assert_eq!(
            store.list()[0].last_slot,
            Some(10),
            "an update keeps the progress"
        );
        assert!(store.remove("tick").unwrap());
        assert!(store.list().is_empty());
    }

    #[test]
    fn the_file_round_trips_and_a_damaged_one_is_refused() {
        let mut entries = BTreeMap::new();
        entries.insert(
            "a".to_owned(),
            Entry {
                definition: b"x".to_vec(),
                last_slot: Some(7),
            },
        );
        entries.insert(
            "b".to_owned(),
            Entry {
                definition: Vec::new(),
                last_slot: None,
            },
        );
        let bytes = encode(&entries);
        let back = decode(&bytes).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back["a"].last_slot, Some(7));
        let mut bad = bytes.clone();
        bad[10] ^= 1;
        assert!(decode(&bad).is_err());
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
    }
}
