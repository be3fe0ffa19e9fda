//! [`RedisServer`]: a real `redis-server` for one test, on a free loopback port, in a
//! directory of its own; killed (and its directory removed) when dropped.
//!
//! `redis-server` must be installed (`apt-get install -y redis-server`); without it the
//! test fails at once, saying so, rather than pass without having tested anything.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a server may take to answer `PING` after it was started.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// A running `redis-server` (see the module docs).
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server without persistence (`--save '' --appendonly no`).
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Starts a server with these extra arguments (e.g. `["--appendonly", "yes",
    /// "--appendfsync", "always"]`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "event_base-redis-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create the server's directory");
        let mut server = RedisServer {
            child: None,
            port: 0,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        // A free port may be taken between finding it and the server binding it: try again.
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn() {
                return server;
            }
        }
        panic!(
            "redis-server did not start; its log:\n{}",
            server.log_tail()
        );
    }

    /// Starts the server again, on the same port and directory (after [`kill`](Self::kill)).
    pub fn restart(&mut self) {
        self.kill();
        assert!(
            self.spawn(),
            "redis-server did not restart on port {}; its log:\n{}",
            self.port,
            self.log_tail()
        );
    }

    fn spawn(&mut self) -> bool {
        let log = self.dir.join("redis.log");
        let mut cmd = Command::new("redis-server");
        cmd.args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server is not installed, and this test needs a real one: install it with `apt-get update && apt-get install -y redis-server` (.ci/run does)"
            ),
            Err(e) => panic!("cannot start redis-server: {e}"),
        };
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return false; // exited: the port was taken, or a bad argument
            }
            if ping(self.port) {
                self.child = Some(child);
                return true;
            }
            // Polling a process we do not control, which offers nothing to wait on.
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its directory (AOF and RDB files, the log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self) {
        signal(self.pid(), "-STOP");
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        signal(self.pid(), "-CONT");
    }

    /// Kills the server (SIGKILL) and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Runs one command (inline protocol: words without spaces) and returns the raw reply.
    pub fn command(&self, words: &[&str]) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to redis");
        s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        let mut line = words.join(" ");
        line.push_str("\r\n");
        s.write_all(line.as_bytes()).expect("write to redis");
        let mut r = BufReader::new(s);
        let mut first = String::new();
        r.read_line(&mut first).expect("read from redis");
        if let Some(n) = first
            .strip_prefix('$')
            .and_then(|n| n.trim().parse::<usize>().ok())
        {
            let mut body = vec![0; n + 2];
            r.read_exact(&mut body).expect("read a bulk reply");
            return String::from_utf8_lossy(&body[..n]).into_owned();
        }
        first.trim_end().to_owned()
    }

    /// Runs one command (inline protocol: words without spaces) and returns its whole reply,
    /// nested arrays included.
    pub fn query(&self, words: &[&str]) -> Reply {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to redis");
        s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        let mut line = words.join(" ");
        line.push_str("\r\n");
        s.write_all(line.as_bytes()).expect("write to redis");
        read_reply(&mut BufReader::new(s))
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A paused server ignores SIGKILL until... it does not: SIGKILL works on a stopped
        // process. Resume first anyway, so nothing is left frozen if the kill fails.
        self.resume();
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A reply, as [`RedisServer::query`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Status(String),
    /// `-ERR ...`.
    Error(String),
    /// `:1`.
    Int(i64),
    /// A bulk string; `None` for a nil one.
    Bulk(Option<String>),
    /// An array; `None` for a nil one.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The integer of an `Int`, or of a `Bulk` that holds one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            Reply::Bulk(Some(s)) => s.parse().ok(),
            _ => None,
        }
    }

    /// The text of a `Status` or `Bulk`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Reply::Status(s) | Reply::Bulk(Some(s)) => Some(s),
            _ => None,
        }
    }

    /// The items of an array (empty for anything else).
    pub fn items(&self) -> &[Reply] {
        match self {
            Reply::Array(Some(v)) => v,
            _ => &[],
        }
    }
}

fn read_reply(r: &mut impl BufRead) -> Reply {
    let mut line = String::new();
    r.read_line(&mut line).expect("read from redis");
    let line = line.trim_end();
    let (kind, rest) = line.split_at(1.min(line.len()));
    let len = || rest.parse::<i64>().expect("a length");
    match kind {
        "+" => Reply::Status(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Int(len()),
        "$" => match usize::try_from(len()) {
            Err(_) => Reply::Bulk(None),
            Ok(n) => {
                let mut body = vec![0; n + 2];
                r.read_exact(&mut body).expect("read a bulk reply");
                Reply::Bulk(Some(String::from_utf8_lossy(&body[..n]).into_owned()))
            }
        },
        "*" => match usize::try_from(len()) {
            Err(_) => Reply::Array(None),
            Ok(n) => Reply::Array(Some((0..n).map(|_| read_reply(r)).collect())),
        },
        _ => panic!("not a RESP reply: {line:?}"),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_millis(500))).ok();
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

fn signal(pid: u32, sig: &str) {
    if pid == 0 {
        return;
    }
    let _ = Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
