//! Running the `strait` binary directly: locating it, one-shot CLI commands (`strait version`,
//! `strait config validate`), processes a test starts itself, and temporary directories.

use std::fs::{self, File};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use http::StatusCode;

use crate::client::send_h1;
use crate::gateway::START_TIMEOUT;
use crate::random_token;

/// The binary: `$STRAIT_BIN`, else `<dir of the test executable>/../strait` (target/debug/strait).
pub fn strait_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("STRAIT_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("exe dir");
    let candidate = deps.parent().unwrap_or(deps).join("strait");
    if !candidate.exists() {
        panic!(
            "strait binary not found at {} (set STRAIT_BIN or run `cargo build -p strait` first)",
            candidate.display()
        );
    }
    candidate
}

/// A command with the test process's own `STRAIT_*` settings removed, so only what a test sets
/// reaches the binary.
pub(crate) fn strait_command() -> Command {
    let mut command = Command::new(strait_bin());
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("STRAIT_") && key != "STRAIT_BIN" {
            command.env_remove(key);
        }
    }
    command
}

/// Output of a one-shot CLI command.
#[derive(Debug)]
pub struct CliOutput {
    /// Exit code; `None` when killed by a signal or the time limit.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CliOutput {
    /// stdout and stderr together.
    pub fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs `strait <args>` in `cwd` with extra `env`, killed after 30 s. Output goes through files,
/// so a chatty command cannot block on a full pipe.
pub async fn run_strait(args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> CliOutput {
    let token = random_token();
    let out_path = std::env::temp_dir().join(format!("strait-e2e-cli-{token}.out"));
    let err_path = std::env::temp_dir().join(format!("strait-e2e-cli-{token}.err"));
    let mut command = strait_command();
    command
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).expect("cli out"))
        .stderr(File::create(&err_path).expect("cli err"))
        .envs(env.iter().copied());
    let mut child = command.spawn().expect("spawn strait");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let code = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status.code();
        }
        if tokio::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let stdout = String::from_utf8_lossy(&fs::read(&out_path).unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&fs::read(&err_path).unwrap_or_default()).into_owned();
    let _ = fs::remove_file(&out_path);
    let _ = fs::remove_file(&err_path);
    CliOutput { code, stdout, stderr }
}

/// A `strait` process started by a test itself (not through [`Gateway`]); killed on drop.
pub struct StraitProcess {
    child: Child,
}

impl StraitProcess {
    /// Spawns `strait <args>` in `cwd` with extra `env`; output goes to `cwd/strait.{stdout,stderr}.log`.
    pub fn spawn(args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> StraitProcess {
        let stdout = File::create(cwd.join("strait.stdout.log")).expect("log");
        let stderr = File::create(cwd.join("strait.stderr.log")).expect("log");
        let child = strait_command()
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .envs(env.iter().copied())
            .spawn()
            .expect("spawn strait");
        StraitProcess { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `GET /` on `admin` answers 200; panics (with `cwd`'s logs) after 20 s or if
    /// the process exits.
    pub async fn wait_admin(&mut self, admin: SocketAddr, cwd: &Path) {
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("strait exited with {status}\n{}", read_logs(cwd));
            }
            let probe = tokio::time::timeout(Duration::from_secs(1), send_h1(admin, crate::get("/"))).await;
            if matches!(probe, Ok(Ok(ref reply)) if reply.status == StatusCode::OK) {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "strait admin {admin} not up within {START_TIMEOUT:?}\n{}",
                    read_logs(cwd)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM, then waits up to `limit` for the exit status.
    pub async fn terminate(&mut self, limit: Duration) -> Option<ExitStatus> {
        let _ = Command::new("kill").arg("-TERM").arg(self.pid().to_string()).status();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for StraitProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_logs(cwd: &Path) -> String {
    ["strait.stdout.log", "strait.stderr.log"]
        .iter()
        .map(|name| {
            format!(
                "--- {name} ---\n{}",
                fs::read_to_string(cwd.join(name)).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A fresh, empty temporary directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        let path = std::env::temp_dir().join(format!("strait-e2e-{}", random_token()));
        fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Default for TempDir {
    fn default() -> TempDir {
        TempDir::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("STRAIT_E2E_KEEP").is_none() {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}
