//! [`PostgresServer`]: a real PostgreSQL cluster for one test, made by `initdb` in a
//! directory of its own and served by `postgres` on a free loopback port; stopped (and its
//! directory removed) when dropped.
//!
//! The server programs come from the `postgresql` Debian package (`apt-get install -y
//! postgresql`; `test.sh` installs it): `initdb` and `postgres` are looked for in
//! `/usr/lib/postgresql/<version>/bin`, newest first, then on `PATH`. Without them the test
//! fails at once, saying so, rather than pass without having tested anything. `initdb`
//! refuses to run as root: run as root (as CI does), the programs run as the `postgres`
//! user, which owns the directory.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a server may take to accept connections after it was started.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// A running PostgreSQL cluster (see the module docs).
#[derive(Debug)]
pub struct PostgresServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    bin: PathBuf,
    /// The user the programs run as (`postgres` when the test runs as root).
    user: Option<(u32, u32)>,
}

impl PostgresServer {
    /// Makes a cluster (`initdb`, trust authentication on loopback) and starts its server.
    pub fn start() -> PostgresServer {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "event_base-postgres-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create the cluster's directory");
        let user = postgres_user();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .expect("give the cluster's directory to the postgres user");
        }
        let mut server = PostgresServer {
            child: None,
            port: 0,
            dir,
            bin: server_bin(),
            user,
        };
        server.initdb();
        // A free port may be taken between finding it and the server binding it: try again.
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn() {
                return server;
            }
        }
        panic!("postgres did not start; its log:\n{}", server.log_tail());
    }

    /// Starts the server again, on the same port and data (after [`kill`](Self::kill)):
    /// PostgreSQL recovers from its own WAL, as after a crash.
    pub fn restart(&mut self) {
        self.kill();
        assert!(
            self.spawn(),
            "postgres did not restart on port {}; its log:\n{}",
            self.port,
            self.log_tail()
        );
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        cmd.env_remove("PGDATA")
            .env_remove("PGPORT")
            .env_remove("PGHOST")
            .stdin(Stdio::null());
        cmd
    }

    fn initdb(&self) {
        let out = self
            .command("initdb")
            .arg("-D")
            .arg(self.data())
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn spawn(&mut self) -> bool {
        let log = std::fs::File::create(self.dir.join("postgres.log")).expect("create the log");
        if let Some((uid, gid)) = self.user {
            let _ = std::os::unix::fs::chown(self.dir.join("postgres.log"), Some(uid), Some(gid));
        }
        let mut child = self
            .command("postgres")
            .arg("-D")
            .arg(self.data())
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(&self.dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                // Small: many tests run a cluster each at once.
                "-c",
                "shared_buffers=16MB",
                "-c",
                "max_connections=40",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start postgres");
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return false; // exited: the port was taken, or a bad setting
            }
            if self.log_tail().contains("ready to accept connections") {
                self.child = Some(child);
                return true;
            }
            // Polling a process we do not control, which offers nothing to wait on.
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// A plain client of its own (as an application's), its connection driven by a task of
    /// the current runtime.
    pub async fn client(&self) -> event_base::postgres::tokio_postgres::Client {
        use event_base::postgres::tokio_postgres::{Config, NoTls};
        let (client, connection) = self
            .url()
            .parse::<Config>()
            .expect("the server's URL parses")
            .connect(NoTls)
            .await
            .expect("connect to the test's PostgreSQL");
        tokio::spawn(connection);
        client
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its directory (the cluster's `data/`, the log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs SQL with `psql` and returns what it printed (unaligned, tuples only); panics if
    /// it fails.
    pub fn sql(&self, sql: &str) -> String {
        let out = self
            .command("psql")
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"])
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-U", "postgres", "-d", "postgres", "-c", sql])
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql failed on `{sql}`: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Stops the server at once (SIGQUIT: PostgreSQL's immediate shutdown, a crash to the
    /// data files) and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-QUIT", &c.id().to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The folder of `initdb` and `postgres`: the newest `/usr/lib/postgresql/<version>/bin`,
/// else the folder of the `initdb` on `PATH`.
fn server_bin() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("initdb"))
        .find(|p| p.is_file())
        .and_then(|p| std::fs::canonicalize(p).ok())
        .and_then(|p| p.parent().map(Path::to_path_buf));
    match on_path {
        Some(bin) if bin.join("postgres").is_file() => bin,
        _ => panic!(
            "PostgreSQL's server programs (initdb, postgres) are not installed, and this test needs a real server: install them with `apt-get update && apt-get install -y postgresql` (test.sh does)"
        ),
    }
}

/// The `postgres` user's uid and gid when this process runs as root (initdb refuses root);
/// `None` otherwise (the programs then run as this user).
fn postgres_user() -> Option<(u32, u32)> {
    let me = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&me.stdout).trim() != "0" {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let line = passwd.lines().find(|l| l.starts_with("postgres:"));
    let Some(line) = line else {
        panic!("running as root, and there is no `postgres` user to run initdb as (initdb refuses root): install the postgresql package, which makes it")
    };
    let fields: Vec<&str> = line.split(':').collect();
    let id = |i: usize| fields.get(i).and_then(|f| f.parse::<u32>().ok());
    Some((id(2)?, id(3)?))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}
