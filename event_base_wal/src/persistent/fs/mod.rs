//! The file layer under the `PersistentWal`: every file operation the WAL makes goes through
//! [`WalFs`], so that a test can put a simulated disk under it.
//!
//! Two implementations:
//!
//! | file | type | what it is |
//! |---|---|---|
//! | `std_fs.rs` | [`StdFs`] | the real one, over `std::fs` (the default) |
//! | `sim_fs.rs` | `SimFs` (feature `sim`) | a disk in memory that keeps unsynced bytes apart from synced ones and can lose power |
//!
//! The trait holds only what the WAL needs, named after what the WAL means by it (for
//! example [`WalFs::truncate`] is "cut the file and make the cut durable"), so a simulation
//! models exactly those operations and no more. It is crate-private: a public trait would
//! invite file systems whose durability nobody here can vouch for, and tests reach the
//! simulation through `PersistentWalBuilder::sim_fs` instead.
//!
//! Calls are dynamic (`Arc<dyn WalFs>`, `Box<dyn WalFile>`). The hot path makes two per
//! batch of records, a `write` and an `fdatasync`, on the writer thread, each in front of a
//! system call that costs microseconds; a virtual call costs nanoseconds, and it keeps
//! `PersistentWal` a plain type rather than a generic one in every user's signatures.
//!
//! What it may import: the standard library. Nothing in it knows the WAL's format.

use std::any::Any;
use std::fmt::Debug;
use std::io;
use std::path::Path;
use std::sync::Arc;

#[cfg(feature = "sim")]
pub(crate) mod sim_fs;
mod std_fs;

pub(crate) use std_fs::StdFs;

/// A held directory lock; dropping it releases the lock.
pub(crate) type DirLock = Box<dyn Any + Send>;

/// The file operations a `PersistentWal` makes.
///
/// Paths are those the WAL builds: its directory and the files directly in it.
pub(crate) trait WalFs: Send + Sync + Debug + 'static {
    /// Creates `dir` and its parents if missing.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;

    /// Creates (if missing) and exclusively locks the file at `path`; an error of kind
    /// [`io::ErrorKind::WouldBlock`] if someone else holds it.
    fn lock(&self, path: &Path) -> io::Result<DirLock>;

    /// The names of the files in `dir` (names that are not UTF-8 are left out).
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;

    /// Creates a new, empty file to append to; fails if it exists.
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WalFile>>;

    /// Opens an existing file to append to.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WalFile>>;

    /// The whole content of a file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;

    /// `len` bytes of a file from `offset` (fewer if the file ends first): a record read
    /// back for delivery, without reading the whole segment.
    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>>;

    /// The length of a file.
    fn len(&self, path: &Path) -> io::Result<u64>;

    /// Whether a file exists.
    fn exists(&self, path: &Path) -> io::Result<bool>;

    /// Cuts a file to `len` bytes and makes the cut durable.
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;

    /// Renames a file within its directory (durable only after [`WalFs::sync_dir`]).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Removes a file (durable only after [`WalFs::sync_dir`]).
    fn remove(&self, path: &Path) -> io::Result<()>;

    /// Makes the entries of `dir` (files created, renamed, removed) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// A file open for appending.
pub(crate) trait WalFile: Send {
    /// Appends all of `bytes` (to the page cache: not yet durable).
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()>;

    /// Makes everything written so far durable (`fdatasync`).
    fn sync_data(&mut self) -> io::Result<()>;

    /// Makes everything written so far and the file's metadata durable (`fsync`).
    fn sync_all(&mut self) -> io::Result<()>;

    /// A second handle on the same file that only syncs it, for another thread: an
    /// `fdatasync` through it may run while this handle writes, and covers at least every
    /// write that returned before it started.
    fn syncer(&self) -> io::Result<Arc<dyn WalSyncer>>;
}

/// A handle that makes a file's writes durable, shared with the thread that syncs.
pub(crate) trait WalSyncer: Send + Sync {
    /// Makes everything written to the file before this call durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
}
