//! A real PostgreSQL server for one test: a copy of a cluster made once with
//! `initdb`, in a temporary directory, served on a free port on 127.0.0.1 only (trust
//! authentication, no Unix socket), killed (SIGKILL, as a crash) and started
//! again on the same port on demand, killed on drop.
//!
//! The binaries: `$STRAIT_PG_BINDIR`, else the newest Debian
//! `/usr/lib/postgresql/<version>/bin` (scripts/test.sh installs the
//! `postgresql` package), else the PATH. PostgreSQL refuses to run as root;
//! as root the server runs as the `postgres` user Debian's package creates.

use std::hash::{Hash, Hasher};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::{free_port, TempDir};

/// The superuser and the database every test server has.
pub const USER: &str = "strait";
pub const DATABASE: &str = "strait";

pub struct PgServer {
    port: u16,
    dir: TempDir,
    bin: PathBuf,
    run_as: Option<(u32, u32)>,
    child: Option<Child>,
}

fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("STRAIT_PG_BINDIR") {
        return PathBuf::from(dir);
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql").ok().and_then(|entries| {
        entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let version: u32 = e.file_name().to_str()?.parse().ok()?;
                Some((version, e.path().join("bin")))
            })
            .filter(|(_, bin)| bin.join("postgres").exists())
            .max_by_key(|(version, _)| *version)
    });
    newest.map(|(_, bin)| bin).unwrap_or_default()
}

/// uid and gid of `name` from /etc/passwd.
fn account(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&name) && fields.len() > 3)
            .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
            .flatten()
    })
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// The cluster every server starts from: `initdb` run once per PostgreSQL build and account,
/// in the system's temporary folder, for every test process of every run (made in a scratch
/// folder and renamed into place, so no process sees half of one). A copy takes 0.2 s here
/// against initdb's 1 s, which was most of a server's start: the end-to-end suites' PostgreSQL
/// pass starts a server for every gateway.
fn template(server: &PgServer) -> PathBuf {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            (server.bin.display().to_string(), server.run_as, USER).hash(&mut hasher);
            let key = hasher.finish();
            let done = std::env::temp_dir().join(format!("strait-pg-template-{key:016x}"));
            if done.join("PG_VERSION").exists() {
                return done;
            }
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let scratch =
                std::env::temp_dir().join(format!("strait-pg-template-{key:016x}.{}.{nanos}", std::process::id()));
            std::fs::create_dir_all(&scratch).expect("create the template's folder");
            if let Some((uid, gid)) = server.run_as {
                std::os::unix::fs::chown(&scratch, Some(uid), Some(gid)).expect("chown the template's folder");
            }
            let out = server
                .command("initdb")
                .args([
                    "-D",
                    &scratch.display().to_string(),
                    "-U",
                    USER,
                    "--auth=trust",
                    "--no-sync",
                    "-E",
                    "UTF8",
                ])
                .args(["--locale=C"])
                .output()
                .expect("run initdb (is PostgreSQL installed? scripts/test.sh installs it)");
            assert!(
                out.status.success(),
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            // Another process may have put its own in place first: then that one is used.
            if std::fs::rename(&scratch, &done).is_err() {
                let _ = std::fs::remove_dir_all(&scratch);
            }
            done
        })
        .clone()
}

impl PgServer {
    /// A copy of the template cluster, start, create the `strait` database; panics with the
    /// server's log when any step fails.
    pub fn start() -> PgServer {
        let run_as = if is_root() {
            Some(account("postgres").expect("running as root needs the `postgres` user (apt-get install postgresql)"))
        } else {
            None
        };
        let mut server = PgServer {
            port: free_port(),
            dir: TempDir::new(),
            bin: bin_dir(),
            run_as,
            child: None,
        };
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(server.dir.path(), Some(uid), Some(gid)).expect("chown the test directory");
        }
        // A copy of the cluster `initdb` made once (`cp -a` keeps its owner and modes).
        let template = template(&server);
        let out = Command::new("cp")
            .arg("-a")
            .arg(&template)
            .arg(server.data())
            .output()
            .expect("run cp");
        assert!(
            out.status.success(),
            "copying the cluster template failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The free port may be taken between its pick and the server's bind (test processes
        // run side by side): then another port.
        for attempt in 1.. {
            match server.try_launch() {
                Ok(()) => break,
                Err(log) if attempt < 5 && log.contains("Address already in use") => server.port = free_port(),
                Err(log) => panic!("postgres exited at start:\n{log}"),
            }
        }
        let out = server
            .command("createdb")
            .args(["-h", "127.0.0.1", "-p", &server.port.to_string(), "-U", USER, DATABASE])
            .output()
            .expect("run createdb");
        assert!(
            out.status.success(),
            "createdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        server
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut command = Command::new(if path.exists() { path } else { PathBuf::from(program) });
        if let Some((uid, gid)) = self.run_as {
            // And a home of its own: libpq looks for ~/.postgresql's client
            // certificate, which root's home would deny to that account.
            command.uid(uid).gid(gid).env("HOME", self.dir.path());
        }
        command.current_dir(self.dir.path()).stdin(Stdio::null());
        command
    }

    /// A client program (`psql`, `pg_isready`, ...) pointed at this server
    /// as the superuser, on `database`.
    fn client(&self, program: &str, database: &str) -> Command {
        let mut command = self.command(program);
        command.args([
            "-h",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-U",
            USER,
            "-d",
            database,
        ]);
        command
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `strait migrations bootstrap` against this server (panics with its
    /// output when it fails).
    pub fn bootstrap(&self) {
        let out = Command::new(crate::process::strait_bin())
            .args(["migrations", "bootstrap"])
            .env("STRAIT_PG_PORT", self.port.to_string())
            .env("STRAIT_PG_USER", USER)
            .env("STRAIT_PG_DATABASE", DATABASE)
            .output()
            .expect("run strait migrations bootstrap");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    /// A node's settings for this server's database (`database = postgres`).
    pub fn node_options(&self) -> crate::GatewayOptions {
        crate::GatewayOptions::new()
            .setting("database", "postgres")
            .setting("pg_host", "127.0.0.1")
            .setting("pg_port", &self.port.to_string())
            .setting("pg_user", USER)
            .setting("pg_database", DATABASE)
    }

    /// The store's connection settings for this server.
    pub fn config(&self) -> strait_store::pg::PgConfig {
        strait_store::pg::PgConfig {
            host: "127.0.0.1".into(),
            port: self.port,
            user: USER.into(),
            password: None,
            database: DATABASE.into(),
            schema: None,
            timeout: Duration::from_secs(5),
            tls: None,
            max_concurrent_queries: 0,
            semaphore_timeout: Duration::from_secs(60),
            pool_size: 256,
        }
    }

    /// The server's log (stderr of the postmaster).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
    }

    fn launch(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.try_launch() {
                Ok(()) => return,
                // The backends of a killed postmaster hold its shared memory
                // until they notice and exit (on a loaded machine, a while
                // after the port closed): start again once they have.
                Err(log) if log.contains("pre-existing shared memory block") && Instant::now() < deadline => {
                    let _ = std::fs::remove_file(self.data().join("postmaster.pid"));
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(log) => panic!("postgres exited at start:\n{log}"),
            }
        }
    }

    /// Starts the server and waits until it answers; its log when it exits first.
    fn try_launch(&mut self) -> Result<(), String> {
        let log = std::fs::File::create(self.dir.path().join("postgres.log")).expect("create the server log");
        if let Some((uid, gid)) = self.run_as {
            let _ = std::os::unix::fs::chown(self.dir.path().join("postgres.log"), Some(uid), Some(gid));
        }
        let child = self
            .command("postgres")
            .args(["-D", &self.data().display().to_string(), "-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="])
            // Throwaway data: a killed server loses nothing it acknowledged
            // (the OS keeps the writes), only an OS crash would.
            .args(["-c", "fsync=off", "-c", "max_connections=200"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start postgres");
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("({status})\n{}", self.log()));
                }
            }
            let listening = TcpStream::connect(("127.0.0.1", self.port)).is_ok();
            let ready = listening
                && self
                    .client("pg_isready", "postgres")
                    .stdout(Stdio::null())
                    .status()
                    .map(|s| s.success())
                    .unwrap_or(false);
            if ready {
                return Ok(());
            }
            assert!(
                Instant::now() < deadline,
                "postgres not ready after 60 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL the postmaster (a crash); its backends exit when they notice.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Backends of a killed postmaster hold the port until they notice.
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_ok() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_file(self.data().join("postmaster.pid"));
    }

    /// A streaming replica of this server (`pg_basebackup -R`): a hot
    /// standby on a port of its own that replays what the primary commits.
    pub fn start_replica(&self) -> PgServer {
        let mut replica = PgServer {
            port: free_port(),
            dir: TempDir::new(),
            bin: self.bin.clone(),
            run_as: self.run_as,
            child: None,
        };
        if let Some((uid, gid)) = self.run_as {
            std::os::unix::fs::chown(replica.dir.path(), Some(uid), Some(gid)).expect("chown the replica directory");
        }
        let out = self
            .command("pg_basebackup")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER])
            // A fast checkpoint: the default spreads it over minutes.
            .args([
                "-D",
                &replica.data().display().to_string(),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
            ])
            .output()
            .expect("run pg_basebackup");
        assert!(
            out.status.success(),
            "pg_basebackup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        replica.launch();
        replica
    }

    /// Serve TLS with `cert_pem`/`key_pem` and accept TCP sessions only over
    /// it (`hostssl` in pg_hba.conf: a plaintext session is refused with
    /// `no encryption`); restarts the server.
    pub fn require_tls(&mut self, cert_pem: &str, key_pem: &str) {
        let data = self.data();
        for (name, contents) in [("server.crt", cert_pem), ("server.key", key_pem)] {
            let path = data.join(name);
            std::fs::write(&path, contents).expect("write the server's TLS files");
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .expect("chmod the TLS files");
            if let Some((uid, gid)) = self.run_as {
                std::os::unix::fs::chown(&path, Some(uid), Some(gid)).expect("chown the TLS files");
            }
        }
        let hba = "local all all trust\nhostssl all all 127.0.0.1/32 trust\n";
        std::fs::write(data.join("pg_hba.conf"), hba).expect("write pg_hba.conf");
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .expect("open postgresql.conf");
        std::io::Write::write_all(&mut conf, b"\nssl = on\n").expect("write postgresql.conf");
        self.restart();
    }

    /// Start again on the same port after [`PgServer::kill`] (crash recovery
    /// runs as after a real crash).
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// Run one SQL script with `psql` as the superuser; its stdout.
    pub fn psql(&self, sql: &str) -> String {
        let out = self
            .client("psql", DATABASE)
            .args(["-v", "ON_ERROR_STOP=1", "-At", "-c", sql])
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Every row of the database as `pg_dump --data-only` writes it (plain
    /// SQL text: what a TOAST-compressed data file would hide, this shows).
    pub fn dump(&self) -> String {
        let out = self
            .client("pg_dump", DATABASE)
            .args(["--data-only", "--no-owner"])
            .output()
            .expect("run pg_dump");
        assert!(
            out.status.success(),
            "pg_dump failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A data directory path, for tests that look at the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PgServer {
    /// A fast shutdown (SIGINT), SIGKILL only if it takes over 10 s. A killed
    /// postmaster leaves its System V shared memory segment behind, and a
    /// machine that ran the suite a few dozen times ran out of segment ids
    /// (`SHMMNI`, 4096): every later `initdb` failed with "could not create
    /// shared memory segment: No space left on device".
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `strait start` on the database at `port` (user and database [`USER`],
/// [`DATABASE`]), with `env` (`STRAIT_*` settings) besides: the node's
/// stderr. It must fail to start.
pub fn failed_start_on(port: u16, env: &[(&str, &str)]) -> String {
    let dir = std::env::temp_dir().join(format!("strait-e2e-pg-refuse-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("create a prefix");
    let out = Command::new(crate::process::strait_bin())
        .arg("start")
        .env("STRAIT_PREFIX", &dir)
        .env("STRAIT_DATABASE", "postgres")
        .env("STRAIT_PG_PORT", port.to_string())
        .env("STRAIT_PG_USER", USER)
        .env("STRAIT_PG_DATABASE", DATABASE)
        .env("STRAIT_PROXY_ERROR_LOG", "stderr")
        .envs(env.iter().copied())
        .output()
        .expect("run strait start");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success(), "the node started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}
