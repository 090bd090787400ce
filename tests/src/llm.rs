//! What the AI plugins' tests (tests/tests/plugins_ai.rs) share: the LLM
//! provider stand-ins (tests/stand-ins/llm.py, one process answering as each
//! provider) and the official SDKs as clients (tests/stand-ins/llm_sdk.py,
//! one process for a test).

use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde_json::Value;

pub fn python() -> PathBuf {
    std::env::var_os("STRAIT_AI_PYTHON").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/venv/bin/python"),
        PathBuf::from,
    )
}

pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("stand-ins").join(name)
}

/// The provider stand-ins, one process.
pub struct Providers {
    pub port: u16,
    child: std::process::Child,
}

impl Providers {
    pub fn start() -> Providers {
        let port = crate::free_port();
        let mut child = std::process::Command::new(python())
            .arg(script("llm.py"))
            .arg(port.to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python for tests/stand-ins/llm.py (scripts/test.sh makes its venv)");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("stand-in output");
        assert_eq!(line.trim(), "ready", "the LLM stand-in did not start");
        Providers { port, child }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The usage each answer reported, in order.
    pub async fn usage(&self) -> Vec<Value> {
        self.list("/_usage").await
    }

    /// The requests the providers received, in order.
    pub async fn requests(&self) -> Vec<Value> {
        self.list("/_requests").await
    }

    async fn list(&self, path: &str) -> Vec<Value> {
        let url = self.url(path);
        let text = tokio::task::spawn_blocking(move || {
            std::process::Command::new("curl")
                .args(["-s", &url])
                .output()
                .expect("curl")
                .stdout
        })
        .await
        .expect("join");
        serde_json::from_slice::<Value>(&text)
            .expect("usage JSON")
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for Providers {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The SDKs (tests/stand-ins/llm_sdk.py `--serve`): one Python process for
/// a test, the SDKs imported once, one command a line.
pub struct Sdk {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Sdk {
    pub fn start() -> Sdk {
        let mut child = std::process::Command::new(python())
            .arg(script("llm_sdk.py"))
            .arg("--serve")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python for tests/stand-ins/llm_sdk.py");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        Sdk { child, stdin, stdout }
    }

    pub fn run(&mut self, command: &Value) -> Value {
        use std::io::Write;
        writeln!(self.stdin, "{command}").expect("to the SDK process");
        self.stdin.flush().expect("flush");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("from the SDK process");
        serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("SDK output not JSON ({e}): {line}"))
    }
}

impl Drop for Sdk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
