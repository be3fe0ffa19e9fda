//! [`JsonLinesWriter`]: audit records as JSON lines in a size-rotated file.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use event_base_core::{AuditError, AuditRecord, AuditWriter};

/// Writes each record as one line of JSON, and rotates the file when it passes `max_bytes`.
///
/// ```
/// use event_base_audit::JsonLinesWriter;
/// # let dir = std::env::temp_dir().join(format!("eb-audit-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// let writer = JsonLinesWriter::open(dir.join("audit.jsonl"))
///     .unwrap()
///     .max_bytes(10 << 20)
///     .keep(5);
/// // EventBus::builder().audit_writer(writer) ...
/// # drop(writer);
/// # std::fs::remove_dir_all(&dir).ok();
/// ```
pub struct JsonLinesWriter {
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    state: Mutex<State>,
}

struct State {
    out: BufWriter<File>,
    written: u64,
}

impl std::fmt::Debug for JsonLinesWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonLinesWriter")
            .field("path", &self.path)
            .field("max_bytes", &self.max_bytes)
            .field("keep", &self.keep)
            .finish()
    }
}

fn io(path: &Path, source: std::io::Error) -> AuditError {
    AuditError::Io {
        target: path.display().to_string(),
        source,
    }
}

fn open_append(path: &Path) -> Result<(File, u64), AuditError> {
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io(path, e))?;
    let len = f.metadata().map_err(|e| io(path, e))?.len();
    Ok((f, len))
}

impl JsonLinesWriter {
    /// Appends to `path` (created if missing). Defaults: rotate at 64 MiB, keep 3 old files.
    pub fn open(path: impl AsRef<Path>) -> Result<JsonLinesWriter, AuditError> {
        let path = path.as_ref().to_owned();
        let (f, written) = open_append(&path)?;
        Ok(JsonLinesWriter {
            path,
            max_bytes: 64 << 20,
            keep: 3,
            state: Mutex::new(State {
                out: BufWriter::new(f),
                written,
            }),
        })
    }

    /// Rotate once the file holds at least this many bytes.
    pub fn max_bytes(mut self, bytes: u64) -> Self {
        self.max_bytes = bytes.max(1);
        self
    }

    /// How many rotated files to keep (`path.1` is the newest).
    pub fn keep(mut self, files: usize) -> Self {
        self.keep = files;
        self
    }

    fn rotated(&self, n: usize) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    fn rotate(&self, state: &mut State) -> Result<(), AuditError> {
        state.out.flush().map_err(|e| io(&self.path, e))?;
        if self.keep == 0 {
            std::fs::remove_file(&self.path).map_err(|e| io(&self.path, e))?;
        } else {
            let _ = std::fs::remove_file(self.rotated(self.keep));
            for n in (1..self.keep).rev() {
                let from = self.rotated(n);
                if from.exists() {
                    std::fs::rename(&from, self.rotated(n + 1)).map_err(|e| io(&from, e))?;
                }
            }
            std::fs::rename(&self.path, self.rotated(1)).map_err(|e| io(&self.path, e))?;
        }
        let (f, written) = open_append(&self.path)?;
        state.out = BufWriter::new(f);
        state.written = written;
        Ok(())
    }
}

impl AuditWriter for JsonLinesWriter {
    fn write(&self, records: &[AuditRecord]) -> Result<(), AuditError> {
        let mut state = self.state.lock().map_err(|_| AuditError::Poisoned)?;
        for r in records {
            let mut line = serde_json::to_vec(r).map_err(AuditError::Encode)?;
            line.push(b'\n');
            state.out.write_all(&line).map_err(|e| io(&self.path, e))?;
            state.written += line.len() as u64;
            if state.written >= self.max_bytes {
                self.rotate(&mut state)?;
            }
        }
        state.out.flush().map_err(|e| io(&self.path, e))
    }

    fn flush(&self) -> Result<(), AuditError> {
        let mut state = self.state.lock().map_err(|_| AuditError::Poisoned)?;
        state.out.flush().map_err(|e| io(&self.path, e))?;
        state
            .out
            .get_ref()
            .sync_data()
            .map_err(|e| io(&self.path, e))
    }
}
