//! A real Zipkin server for one test: the `io.zipkin:zipkin-server` exec
//! jar from Maven Central (scripts/test.sh fetches it into `~/.m2`, or
//! `$STRAIT_ZIPKIN_JAR` names it) on the JVM, with its in-memory storage,
//! on a free port; killed on drop. Spans are read back from its API.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, TempDir};

pub const ZIPKIN_VERSION: &str = "3.5.1";

pub struct ZipkinServer {
    pub port: u16,
    dir: TempDir,
    child: Child,
}

fn jar() -> PathBuf {
    if let Some(jar) = std::env::var_os("STRAIT_ZIPKIN_JAR") {
        return PathBuf::from(jar);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(format!(
        ".m2/repository/io/zipkin/zipkin-server/{ZIPKIN_VERSION}/zipkin-server-{ZIPKIN_VERSION}-exec.jar"
    ))
}

impl ZipkinServer {
    /// Starts the server and waits (up to a minute) until it is healthy.
    pub fn start() -> ZipkinServer {
        let port = free_port();
        let dir = TempDir::new();
        let log = std::fs::File::create(dir.path().join("zipkin.log")).expect("zipkin log");
        let jar = jar();
        assert!(
            jar.exists(),
            "no Zipkin server jar at {} (scripts/test.sh fetches it with mvn, or set STRAIT_ZIPKIN_JAR)",
            jar.display()
        );
        let child = Command::new("java")
            .args(["-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-jar"])
            .arg(&jar)
            .arg(format!("--server.port={port}"))
            .arg("--server.address=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("could not start java ({e}); install Java 17 (scripts/test.sh does)"));
        let server = ZipkinServer { port, dir, child };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() && server.get("/health").0 == 200 {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "Zipkin did not start on {port}: {}",
                std::fs::read_to_string(server.dir.path().join("zipkin.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Where spans are POSTed (`/api/v2/spans`).
    pub fn spans_url(&self) -> String {
        format!("http://127.0.0.1:{}/api/v2/spans", self.port)
    }

    /// A blocking GET on the server's API: status and body.
    pub fn get(&self, path: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return (0, String::new());
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        if stream.write_all(request.as_bytes()).is_err() {
            return (0, String::new());
        }
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let text = String::from_utf8_lossy(&answer).into_owned();
        let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, dechunk(&body))
    }

    /// The spans of a trace (an empty list until Zipkin has it).
    pub fn trace(&self, trace_id: &str) -> Vec<serde_json::Value> {
        match self.get(&format!("/api/v2/trace/{trace_id}")) {
            (200, body) => serde_json::from_str(&body).unwrap_or_default(),
            _ => Vec::new(),
        }
    }
}

/// A chunked body's data (Zipkin answers chunked).
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    loop {
        let Some((size, after)) = rest.split_once("\r\n") else {
            return if out.is_empty() { body.to_string() } else { out };
        };
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            return body.to_string();
        };
        if size == 0 || after.len() < size {
            return out;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
}

impl Drop for ZipkinServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
