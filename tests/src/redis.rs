//! A real `redis-server` for one test: started on a free port with nothing
//! persisted, killed (SIGKILL) and started again on the same port on demand,
//! killed on drop. `$STRAIT_REDIS_SERVER` names the binary, else
//! `redis-server` on the PATH (scripts/test.sh installs Debian's).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, TempDir};

/// How a test's Redis is set up.
#[derive(Default, Clone)]
pub struct RedisOptions {
    /// `requirepass`: the default user's password.
    pub password: Option<String>,
    /// An ACL user `(name, password)` allowed every command and key.
    pub user: Option<(String, String)>,
    /// Serve TLS (only) with this certificate and key (PEM).
    pub tls: Option<(String, String)>,
}

pub struct RedisServer {
    port: u16,
    options: RedisOptions,
    dir: TempDir,
    child: Option<Child>,
}

fn binary() -> PathBuf {
    std::env::var_os("STRAIT_REDIS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("redis-server"))
}

impl RedisServer {
    pub fn start(options: RedisOptions) -> RedisServer {
        let mut server = RedisServer {
            port: free_port(),
            options,
            dir: TempDir::new(),
            child: None,
        };
        server.launch();
        server
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    fn launch(&mut self) {
        let port = self.port.to_string();
        let mut args: Vec<String> = vec![
            "--bind".into(),
            "127.0.0.1".into(),
            "--save".into(),
            String::new(),
            "--appendonly".into(),
            "no".into(),
            "--dir".into(),
            self.dir.path().display().to_string(),
        ];
        match &self.options.tls {
            Some((cert, key)) => {
                let (cert_path, key_path) = (self.dir.path().join("cert.pem"), self.dir.path().join("key.pem"));
                std::fs::write(&cert_path, cert).expect("write redis cert");
                std::fs::write(&key_path, key).expect("write redis key");
                args.extend([
                    "--port".into(),
                    "0".into(),
                    "--tls-port".into(),
                    port.clone(),
                    "--tls-cert-file".into(),
                    cert_path.display().to_string(),
                    "--tls-key-file".into(),
                    key_path.display().to_string(),
                    "--tls-auth-clients".into(),
                    "no".into(),
                ]);
            }
            None => args.extend(["--port".into(), port.clone()]),
        }
        if let Some(password) = &self.options.password {
            args.extend(["--requirepass".into(), password.clone()]);
        }
        if let Some((user, password)) = &self.options.user {
            args.extend([
                "--user".into(),
                user.clone(),
                "on".into(),
                format!(">{password}"),
                "~*".into(),
                "&*".into(),
                "+@all".into(),
            ]);
        }
        let log = std::fs::File::create(self.dir.path().join("redis.log")).expect("redis log");
        let child = Command::new(binary())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "could not start {} ({e}); install Debian's redis-server (scripts/test.sh does) or set STRAIT_REDIS_SERVER",
                    binary().display()
                )
            });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen on {}: {}",
                self.port,
                std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL the server (its counters are lost with it).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start it again on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// Run one command over plain TCP (a non-TLS server only) as the
    /// default user, and return the raw reply.
    pub fn command(&self, args: &[&str]) -> String {
        self.command_in("0", args)
    }

    /// [`RedisServer::command`] in database `db`.
    pub fn command_in(&self, db: &str, args: &[&str]) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to redis");
        stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let mut frame = String::new();
        let mut replies = 1;
        if let Some(password) = &self.options.password {
            frame.push_str(&encode(&["AUTH", password]));
            replies += 1;
        }
        if db != "0" {
            frame.push_str(&encode(&["SELECT", db]));
            replies += 1;
        }
        frame.push_str(&encode(args));
        stream.write_all(frame.as_bytes()).expect("write to redis");
        let mut reply = Vec::new();
        let mut buf = [0u8; 4096];
        // Replies are small: read until each one's final CRLF.
        loop {
            let n = stream.read(&mut buf).expect("read from redis");
            reply.extend_from_slice(&buf[..n]);
            if n == 0 || complete(&reply, replies) {
                break;
            }
        }
        let mut text = String::from_utf8_lossy(&reply).into_owned();
        // Drop the +OK of AUTH and SELECT.
        for _ in 1..replies {
            text = text
                .split_once("\r\n")
                .map(|(_, rest)| rest.to_string())
                .unwrap_or(text);
        }
        text
    }

    /// The value of `key` as an integer (0 when absent).
    pub fn get_int(&self, key: &str) -> i64 {
        let reply = self.command(&["GET", key]);
        if reply.starts_with("$-1") {
            return 0;
        }
        reply
            .lines()
            .nth(1)
            .and_then(|line| line.trim().parse().ok())
            .unwrap_or_else(|| panic!("GET {key}: {reply:?}"))
    }

    /// Every key matching `pattern`.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let reply = self.command(&["KEYS", pattern]);
        reply
            .lines()
            .skip(1)
            .filter(|line| !line.starts_with('$'))
            .map(str::to_string)
            .collect()
    }
}

fn encode(args: &[&str]) -> String {
    let mut out = format!("*{}\r\n", args.len());
    for arg in args {
        out.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    out
}

/// True when `reply` holds `count` whole simple replies (a status, an
/// integer, an error, a bulk string or an array of bulk strings).
fn complete(reply: &[u8], count: usize) -> bool {
    let text = String::from_utf8_lossy(reply);
    let mut lines = text.split("\r\n").peekable();
    let mut done = 0;
    while done < count {
        let Some(line) = lines.next() else { return false };
        if lines.peek().is_none() {
            return false;
        }
        let rest = &line[1.min(line.len())..];
        match line.as_bytes().first() {
            Some(b'$') if rest != "-1" && (lines.next().is_none() || lines.peek().is_none()) => {
                return false;
            }
            Some(b'*') => {
                let items: usize = rest.parse().unwrap_or(0);
                for _ in 0..items * 2 {
                    if lines.next().is_none() || lines.peek().is_none() {
                        return false;
                    }
                }
            }
            _ => {}
        }
        done += 1;
    }
    true
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
