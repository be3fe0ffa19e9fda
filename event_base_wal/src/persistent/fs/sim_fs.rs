//! [`SimFs`]: a disk in memory that can lose power (feature `sim`, for tests).
//!
//! It keeps, for every file, the bytes a reader sees apart from the bytes that are durable
//! (written and then synced), and, for the directory, the entries a reader sees apart from
//! the durable ones (made so by a directory sync). A power cut, at an operation chosen in
//! advance or at once, keeps only what is durable, except that the file written last may
//! keep a random prefix of its unsynced bytes: a torn write. From the cut on, every
//! operation through a handle of that boot fails, as a dead disk would; [`SimFs::restart`]
//! is the power coming back: a new boot that sees what survived.
//!
//! The model is that of a careful POSIX file system with a disk that honours flushes: a
//! write is volatile until `fdatasync`/`fsync` of its file; creating, renaming or removing a
//! file is volatile until the directory is synced; a sync is all or nothing. Two
//! simplifications: directories themselves, once created, are durable, and a file that
//! loses its unsynced bytes keeps exactly its synced prefix (a real disk might also keep a
//! later page without an earlier one; the WAL's checksums treat that like any torn tail).
//!
//! It can also fail one operation while the disk goes on ([`SimFs::fail_at`]), as a full disk
//! or a failing device does: the operation returns `ENOSPC` or `EIO` and the next one works.
//! A failed write may leave a prefix of its bytes (a short write before the error); a failed
//! `fdatasync`/`fsync` drops the file's dirty pages as Linux does: readers of this boot still
//! see the bytes, a later sync succeeds without writing them, and after a power cut or a
//! restart their range reads as zeros (the file's length was kept, its content never made
//! it). Every other operation that fails does nothing.
//!
//! Random choices (whether the last write tears, and where; how much of a failed write
//! stays) come from the seed given to [`SimFs::new`], so the same seed and the same sequence
//! of operations give the same disk.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{DirLock, WalFile, WalFs, WalSyncer};

/// A simulated disk for power-loss tests.
///
/// Clones share the disk. Hand one to
/// [`PersistentWalBuilder::sim_fs`](crate::PersistentWalBuilder::sim_fs), run a workload,
/// cut the power, and open a new `PersistentWal` on [`restart`](SimFs::restart)'s handle:
///
/// ```
/// use event_base_wal::sim::SimFs;
/// use event_base_wal::PersistentWal;
/// use event_base_core::backend::Wal;
/// use event_base_core::EMessage;
/// use std::sync::Arc;
///
/// # fn main() -> Result<(), event_base_core::WalError> {
/// let disk = SimFs::new(7);
/// let wal = PersistentWal::builder("/wal").sim_fs(disk.clone()).open()?;
/// let msg = Arc::new(EMessage::standard("jobs", "hello"));
/// drop(wal.append(&msg)?); // handed to the writer, not waited for: maybe never synced
/// disk.cut_power();
/// drop(wal);
///
/// let disk = disk.restart();
/// let wal = PersistentWal::builder("/wal").sim_fs(disk.clone()).open()?;
/// assert!(wal.stats().live <= 1); // the record may or may not have reached the disk
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SimFs {
    disk: Arc<Mutex<Disk>>,
    /// The boot this handle belongs to; a handle of an earlier boot only ever fails.
    boot: u64,
}

impl std::fmt::Debug for SimFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = self.disk();
        f.debug_struct("SimFs")
            .field("boot", &self.boot)
            .field("ops", &d.ops)
            .field("down", &(d.down || d.boot != self.boot))
            .field("files", &d.names.len())
            .finish()
    }
}

/// A failure an operation meets while the disk goes on ([`SimFs::fail_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// The disk is full (`ENOSPC`).
    NoSpace,
    /// The device reported an error (`EIO`).
    Io,
}

impl Fault {
    fn error(self, during: &str) -> io::Error {
        let code = match self {
            Fault::NoSpace => 28, // ENOSPC
            Fault::Io => 5,       // EIO
        };
        let os = io::Error::from_raw_os_error(code);
        io::Error::new(os.kind(), format!("simulated fault during {during}: {os}"))
    }
}

/// What a power cut did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PowerCut {
    /// The operation of the boot at which the power went (1 for the first), or the number
    /// of operations done if it went between operations.
    pub at_op: u64,
    /// The operation that did not complete (`None` if the power went between operations).
    pub during: Option<String>,
    /// Unsynced bytes thrown away, over all files.
    pub lost_bytes: u64,
    /// The file written last, if it kept part of its unsynced bytes: its path, the bytes
    /// kept and the unsynced bytes it had.
    pub torn: Option<(PathBuf, u64, u64)>,
    /// Files created, renamed or removed without a directory sync whose change was undone.
    pub entries_undone: usize,
}

#[derive(Debug, Default)]
struct Disk {
    boot: u64,
    down: bool,
    ops: u64,
    cut_at: Option<u64>,
    rng: u64,
    dirs: BTreeSet<PathBuf>,
    names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    inodes: HashMap<u64, Inode>,
    next_inode: u64,
    locks: BTreeSet<PathBuf>,
    last_write: Option<u64>,
    last_cut: Option<PowerCut>,
    /// The operation to fail (while the disk goes on), and how.
    fault_at: Option<(u64, Fault)>,
    /// Faults met in this disk's life, with the operation each hit.
    faults: Vec<(u64, Fault, String)>,
}

/// How an operation starts.
enum Start {
    /// It runs.
    Go,
    /// The power goes during it.
    Cut,
    /// It fails, and the disk goes on.
    Fail(Fault),
}

/// A file's content: `data` is what a reader sees; its first `durable` bytes are synced.
/// (Every change the WAL makes is an append, or a truncation that is synced at once, so the
/// durable bytes are always a prefix of what a reader sees.) `lost` are ranges within the
/// durable length whose pages a failed sync dropped: they read as zeros after a cut.
#[derive(Debug, Default)]
struct Inode {
    data: Vec<u8>,
    durable: usize,
    lost: Vec<(usize, usize)>,
}

fn power_error() -> io::Error {
    io::Error::other("simulated power cut: the disk is gone")
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

impl Disk {
    /// The next random number (splitmix64).
    fn next(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Starts an operation of `boot`: whether it runs, the power goes during it (the caller
    /// does what part of it a torn write leaves, then calls [`Disk::cut`]), or it fails with
    /// the disk going on (recorded here); an error if the power is already off for that boot.
    fn start(&mut self, boot: u64, what: impl FnOnce() -> String) -> io::Result<Start> {
        if self.down || boot != self.boot {
            return Err(power_error());
        }
        self.ops += 1;
        if self.cut_at.is_some_and(|n| self.ops >= n) {
            return Ok(Start::Cut);
        }
        match self.fault_at {
            Some((n, fault)) if n == self.ops => {
                self.fault_at = None;
                self.faults.push((self.ops, fault, what()));
                Ok(Start::Fail(fault))
            }
            _ => Ok(Start::Go),
        }
    }

    /// [`Disk::start`] for an operation that leaves nothing when cut or failed.
    fn start_whole(&mut self, boot: u64, what: impl Fn() -> String) -> io::Result<()> {
        match self.start(boot, &what)? {
            Start::Go => Ok(()),
            Start::Cut => {
                self.cut(Some(what()));
                Err(power_error())
            }
            Start::Fail(fault) => Err(fault.error(&what())),
        }
    }

    /// The power goes: keep what is durable (and maybe a torn prefix of the last write).
    fn cut(&mut self, during: Option<String>) {
        self.down = true;
        let torn_inode = self.last_write.filter(|_| self.next() & 1 == 0);
        let mut lost = 0;
        let mut torn = None;
        let mut ids: Vec<u64> = self.inodes.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let unsynced = self
                .inodes
                .get(&id)
                .map_or(0, |i| (i.data.len() - i.durable) as u64);
            let keep = if torn_inode == Some(id) {
                self.next() % (unsynced + 1)
            } else {
                0
            };
            if torn_inode == Some(id) && unsynced > 0 {
                let path = self
                    .names
                    .iter()
                    .chain(&self.durable_names)
                    .find(|(_, &i)| i == id)
                    .map(|(p, _)| p.clone())
                    .unwrap_or_default();
                torn = Some((path, keep, unsynced));
            }
            lost += unsynced - keep;
            if let Some(inode) = self.inodes.get_mut(&id) {
                inode.data.truncate(inode.durable + keep as usize);
                inode.durable = inode.data.len();
                // Pages a failed sync dropped never reached the disk.
                for (from, to) in std::mem::take(&mut inode.lost) {
                    let end = to.min(inode.data.len());
                    if from < end {
                        inode.data[from..end].fill(0);
                    }
                }
            }
        }
        let entries_undone = self
            .names
            .iter()
            .filter(|(p, i)| self.durable_names.get(*p) != Some(i))
            .count()
            + self
                .durable_names
                .keys()
                .filter(|p| !self.names.contains_key(*p))
                .count();
        self.names = self.durable_names.clone();
        let referenced: BTreeSet<u64> = self.names.values().copied().collect();
        self.inodes.retain(|id, _| referenced.contains(id));
        self.locks.clear();
        self.last_cut = Some(PowerCut {
            at_op: self.ops,
            during,
            lost_bytes: lost,
            torn,
            entries_undone,
        });
    }

    fn inode_of(&self, path: &Path) -> io::Result<u64> {
        self.names.get(path).copied().ok_or_else(|| not_found(path))
    }

    fn new_inode(&mut self, path: &Path) -> u64 {
        let id = self.next_inode;
        self.next_inode += 1;
        self.inodes.insert(id, Inode::default());
        self.names.insert(path.to_owned(), id);
        id
    }

    fn check_dir(&self, path: &Path) -> io::Result<()> {
        let dir = path.parent().unwrap_or(Path::new(""));
        if self.dirs.contains(dir) {
            Ok(())
        } else {
            Err(not_found(dir))
        }
    }
}

impl SimFs {
    /// A new, empty disk; `seed` drives its random choices (torn writes).
    pub fn new(seed: u64) -> SimFs {
        let disk = Disk {
            rng: seed,
            ..Disk::default()
        };
        SimFs {
            disk: Arc::new(Mutex::new(disk)),
            boot: 0,
        }
    }

    fn disk(&self) -> MutexGuard<'_, Disk> {
        // A panic while holding the lock leaves the disk as consistent as any cut.
        self.disk.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cuts the power during operation number `op` of this boot (1 is the first; counted
    /// by [`ops`](SimFs::ops)), or at the next one if that number has passed.
    pub fn cut_power_at(&self, op: u64) {
        let mut d = self.disk();
        if d.boot == self.boot {
            d.cut_at = Some(op);
        }
    }

    /// Cuts the power now, between operations (nothing if it is already off).
    pub fn cut_power(&self) {
        let mut d = self.disk();
        if d.boot == self.boot && !d.down {
            d.cut(None);
        }
    }

    /// Whether the power is off for this handle's boot.
    pub fn is_down(&self) -> bool {
        let d = self.disk();
        d.down || d.boot != self.boot
    }

    /// Operations started in this handle's boot so far.
    pub fn ops(&self) -> u64 {
        let d = self.disk();
        if d.boot == self.boot {
            d.ops
        } else {
            0
        }
    }

    /// What the last power cut did, if there was one.
    pub fn last_cut(&self) -> Option<PowerCut> {
        self.disk().last_cut.clone()
    }

    /// Fails operation number `op` of this boot (1 is the first; counted by
    /// [`ops`](SimFs::ops)) with `fault`, the disk going on afterwards: see the module docs
    /// for what a failed write and a failed sync leave. One fault at a time: a later call
    /// replaces an earlier one not met yet.
    pub fn fail_at(&self, op: u64, fault: Fault) {
        let mut d = self.disk();
        if d.boot == self.boot {
            d.fault_at = Some((op, fault));
        }
    }

    /// The faults met so far (over every boot): the operation's number in its boot, the
    /// fault, and what the operation was.
    pub fn faults(&self) -> Vec<(u64, Fault, String)> {
        self.disk().faults.clone()
    }

    /// The files a reader sees now, with their lengths and how many bytes of each are
    /// durable.
    pub fn files(&self) -> Vec<(PathBuf, u64, u64)> {
        let d = self.disk();
        d.names
            .iter()
            .filter_map(|(p, id)| {
                let inode = d.inodes.get(id)?;
                Some((p.clone(), inode.data.len() as u64, inode.durable as u64))
            })
            .collect()
    }

    /// The power comes back: cuts it first if it is still on, then starts a new boot and
    /// returns its handle, which sees what survived. Handles of earlier boots (and the
    /// files and locks opened through them) keep failing.
    pub fn restart(&self) -> SimFs {
        let mut d = self.disk();
        if !d.down {
            d.cut(None);
        }
        d.boot += 1;
        d.down = false;
        d.ops = 0;
        d.cut_at = None;
        d.fault_at = None;
        d.last_write = None;
        SimFs {
            disk: self.disk.clone(),
            boot: d.boot,
        }
    }
}

impl WalFs for SimFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut d = self.disk();
        d.start_whole(self.boot, || format!("create_dir_all {}", dir.display()))?;
        for a in dir.ancestors() {
            d.dirs.insert(a.to_owned());
        }
        Ok(())
    }

    fn lock(&self, path: &Path) -> io::Result<DirLock> {
        let mut d = self.disk();
        d.start_whole(self.boot, || format!("lock {}", path.display()))?;
        d.check_dir(path)?;
        if d.locks.contains(path) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if !d.names.contains_key(path) {
            d.new_inode(path);
        }
        d.locks.insert(path.to_owned());
        Ok(Box::new(SimLock {
            disk: self.disk.clone(),
            boot: self.boot,
            path: path.to_owned(),
        }))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut d = self.disk();
        d.start_whole(self.boot, || format!("list {}", dir.display()))?;
        if !d.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        Ok(d.names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| Some(p.file_name()?.to_str()?.to_owned()))
            .collect())
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WalFile>> {
        let mut d = self.disk();
        d.start_whole(self.boot, || format!("create {}", path.display()))?;
        d.check_dir(path)?;
        if d.names.contains_key(path) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists", path.display()),
            ));
        }
        let inode = d.new_inode(path);
        Ok(Box::new(self.file(inode)))
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WalFile>> {
        let mut d = self.disk();
        d.start_whole(self.boot, || format!("open {}", path.display()))?;
        let inode = d.inode_of(path)?;
        Ok(Box::new(self.file(inode)))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut d = self.disk();
        d.start_whole(self.boot, || format!("read {}", path.display()))?;
        let inode = d.inode_of(path)?;
        Ok(d.inodes
            .get(&inode)
            .map(|i| i.data.clone())
            .unwrap_or_default())
    }

    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut d = self.disk();
        d.start_whole(self.boot, || format!("read {}", path.display()))?;
        let inode = d.inode_of(path)?;
        let data = d.inodes.get(&inode).map(|i| &i.data[..]).unwrap_or(&[]);
        let from = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let to = from.saturating_add(len).min(data.len());
        Ok(data[from..to].to_vec())
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        let mut d = self.disk();
        d.start_whole(self.boot, || format!("len {}", path.display()))?;
        let inode = d.inode_of(path)?;
        Ok(d.inodes.get(&inode).map_or(0, |i| i.data.len() as u64))
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        let mut d = self.disk();
        d.start_whole(self.boot, || format!("exists {}", path.display()))?;
        Ok(d.names.contains_key(path))
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut d = self.disk();
        d.start_whole(self.boot, || {
            format!("truncate {} to {len}", path.display())
        })?;
        let id = d.inode_of(path)?;
        if let Some(inode) = d.inodes.get_mut(&id) {
            inode.data.resize(len as usize, 0);
            inode.durable = inode.data.len();
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut d = self.disk();
        d.start_whole(self.boot, || {
            format!("rename {} to {}", from.display(), to.display())
        })?;
        let id = d.inode_of(from)?;
        d.check_dir(to)?;
        d.names.remove(from);
        d.names.insert(to.to_owned(), id);
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut d = self.disk();
        d.start_whole(self.boot, || format!("remove {}", path.display()))?;
        d.inode_of(path)?;
        d.names.remove(path);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut d = self.disk();
        d.start_whole(self.boot, || format!("sync_dir {}", dir.display()))?;
        if !d.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        let in_dir = |p: &PathBuf| p.parent() == Some(dir);
        let now: Vec<(PathBuf, u64)> = d
            .names
            .iter()
            .filter(|(p, _)| in_dir(p))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        d.durable_names.retain(|p, _| !in_dir(p));
        d.durable_names.extend(now);
        Ok(())
    }
}

impl SimFs {
    fn file(&self, inode: u64) -> SimFile {
        SimFile {
            fs: self.clone(),
            inode,
        }
    }
}

/// A simulated file open for appending.
struct SimFile {
    fs: SimFs,
    inode: u64,
}

impl SimFile {
    fn sync(&self, what: &str) -> io::Result<()> {
        let mut d = self.fs.disk();
        let inode = self.inode;
        let name = || format!("{what} of file #{inode}");
        let failed = match d.start(self.fs.boot, name)? {
            Start::Go => None,
            Start::Cut => {
                d.cut(Some(name()));
                return Err(power_error());
            }
            Start::Fail(fault) => Some(fault),
        };
        if let Some(i) = d.inodes.get_mut(&inode) {
            if failed.is_some() && i.durable < i.data.len() {
                // Linux: the dirty pages are marked clean without being written; the next
                // sync has nothing to write and succeeds.
                i.lost.push((i.durable, i.data.len()));
            }
            i.durable = i.data.len();
        }
        match failed {
            Some(fault) => Err(fault.error(&name())),
            None => Ok(()),
        }
    }
}

impl WalFile for SimFile {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut d = self.fs.disk();
        let inode = self.inode;
        let start = d.start(self.fs.boot, || {
            format!("write of {} bytes to file #{inode}", bytes.len())
        })?;
        // A write cut short, or failed part way (a short write, then the error), leaves a
        // prefix of its bytes in the page cache.
        let n = match start {
            Start::Go => bytes.len(),
            Start::Cut | Start::Fail(_) => (d.next() % (bytes.len() as u64 + 1)) as usize,
        };
        if let Some(i) = d.inodes.get_mut(&self.inode) {
            i.data.extend_from_slice(&bytes[..n]);
        }
        d.last_write = Some(self.inode);
        match start {
            Start::Go => Ok(()),
            Start::Cut => {
                let what = format!("write of {} bytes ({n} done)", bytes.len());
                d.cut(Some(what));
                Err(power_error())
            }
            Start::Fail(fault) => Err(fault.error(&format!(
                "write of {} bytes to file #{inode} ({n} done)",
                bytes.len()
            ))),
        }
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.sync("fdatasync")
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.sync("fsync")
    }

    fn syncer(&self) -> io::Result<Arc<dyn WalSyncer>> {
        Ok(Arc::new(SimSyncer(self.fs.file(self.inode))))
    }
}

/// The sync thread's handle on a simulated file: its `fdatasync` makes durable whatever the
/// file holds when it runs (one of the outcomes a real concurrent sync may have).
struct SimSyncer(SimFile);

impl WalSyncer for SimSyncer {
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync("fdatasync")
    }
}

/// A held lock on the simulated disk; released on drop (a power cut releases all).
struct SimLock {
    disk: Arc<Mutex<Disk>>,
    boot: u64,
    path: PathBuf,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut d = self.disk.lock().unwrap_or_else(|e| e.into_inner());
        if d.boot == self.boot {
            d.locks.remove(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(fs: &SimFs) -> PathBuf {
        let dir = PathBuf::from("/d");
        fs.create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_cut_keeps_synced_bytes_and_drops_the_rest_unless_torn() {
        for seed in 0..64 {
            let fs = SimFs::new(seed);
            let path = dir(&fs).join("f");
            let mut f = fs.create_new(&path).unwrap();
            fs.sync_dir(Path::new("/d")).unwrap();
            f.write_all(b"synced").unwrap();
            f.sync_data().unwrap();
            f.write_all(b"volatile").unwrap();
            fs.cut_power();
            assert!(f.write_all(b"x").is_err(), "a dead disk takes no writes");
            let after = fs.restart();
            let data = after.read(&path).unwrap();
            assert!(data.starts_with(b"synced"), "seed {seed}: {data:?}");
            assert!(
                b"syncedvolatile".starts_with(&data),
                "seed {seed}: {data:?}"
            );
            let cut = fs.last_cut().unwrap();
            assert_eq!(cut.lost_bytes + (data.len() as u64 - 6), 8);
        }
    }

    #[test]
    fn some_seeds_tear_and_some_lose_everything_unsynced() {
        let kept: Vec<usize> = (0..64)
            .map(|seed| {
                let fs = SimFs::new(seed);
                let path = dir(&fs).join("f");
                let mut f = fs.create_new(&path).unwrap();
                fs.sync_dir(Path::new("/d")).unwrap();
                f.write_all(&[1; 100]).unwrap();
                fs.restart().read(&path).unwrap().len()
            })
            .collect();
        assert!(kept.contains(&0));
        assert!(kept.iter().any(|&k| k > 0 && k < 100), "{kept:?}");
    }

    #[test]
    fn an_entry_is_durable_only_after_a_directory_sync() {
        let fs = SimFs::new(1);
        let d = dir(&fs);
        let mut a = fs.create_new(&d.join("a")).unwrap();
        a.write_all(b"a").unwrap();
        a.sync_all().unwrap();
        fs.sync_dir(&d).unwrap();
        let mut b = fs.create_new(&d.join("b")).unwrap();
        b.write_all(b"b").unwrap();
        b.sync_all().unwrap();
        fs.remove(&d.join("a")).unwrap();
        let fs = fs.restart();
        assert_eq!(fs.list(&d).unwrap(), vec!["a".to_string()]);
        assert_eq!(fs.read(&d.join("a")).unwrap(), b"a");
    }

    #[test]
    fn the_power_goes_at_the_chosen_operation() {
        let fs = SimFs::new(3);
        let d = dir(&fs);
        fs.cut_power_at(3);
        let mut f = fs.create_new(&d.join("f")).unwrap(); // op 2
        assert!(f.sync_data().is_err()); // op 3: the cut
        assert!(fs.is_down());
        let cut = fs.last_cut().unwrap();
        assert_eq!(cut.at_op, 3);
        assert!(cut.during.unwrap().starts_with("fdatasync"));
        let fs = fs.restart();
        assert!(!fs.exists(&d.join("f")).unwrap(), "never made durable");
    }

    #[test]
    fn a_failed_sync_drops_the_dirty_pages_and_the_disk_goes_on() {
        let fs = SimFs::new(5);
        let d = dir(&fs);
        let mut f = fs.create_new(&d.join("f")).unwrap();
        fs.sync_dir(&d).unwrap();
        f.write_all(b"kept").unwrap();
        f.sync_data().unwrap();
        f.write_all(b"gone").unwrap();
        fs.fail_at(fs.ops() + 1, Fault::Io);
        let err = f.sync_data().unwrap_err();
        assert_eq!(err.raw_os_error(), None, "wrapped, with what failed: {err}");
        assert!(err.to_string().contains("fdatasync"), "{err}");
        // This boot still reads the bytes; the next sync succeeds without writing them.
        assert_eq!(fs.read(&d.join("f")).unwrap(), b"keptgone");
        f.write_all(b"late").unwrap();
        f.sync_data().unwrap();
        let after = fs.restart();
        assert_eq!(after.read(&d.join("f")).unwrap(), b"kept\0\0\0\0late");
        assert_eq!(fs.faults().len(), 1);
    }

    #[test]
    fn a_failed_write_keeps_a_prefix_and_the_next_one_works() {
        let fs = SimFs::new(9);
        let d = dir(&fs);
        let mut f = fs.create_new(&d.join("f")).unwrap();
        fs.fail_at(fs.ops() + 1, Fault::NoSpace);
        let err = f.write_all(&[7; 64]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::StorageFull, "{err}");
        let short = fs.read(&d.join("f")).unwrap().len();
        assert!(short <= 64);
        f.write_all(b"next").unwrap();
        assert_eq!(fs.read(&d.join("f")).unwrap().len(), short + 4);
        fs.fail_at(fs.ops() + 1, Fault::Io);
        assert!(
            fs.remove(&d.join("f")).is_err(),
            "a failed operation does nothing"
        );
        assert!(fs.exists(&d.join("f")).unwrap());
    }

    #[test]
    fn locks_exclude_and_die_with_the_power() {
        let fs = SimFs::new(0);
        let d = dir(&fs);
        let held = fs.lock(&d.join("LOCK")).unwrap();
        let again = fs.lock(&d.join("LOCK")).err().unwrap();
        assert_eq!(again.kind(), io::ErrorKind::WouldBlock);
        let fs = fs.restart();
        drop(fs.lock(&d.join("LOCK")).unwrap());
        drop(held);
    }
}
