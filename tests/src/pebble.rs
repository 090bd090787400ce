//! Let's Encrypt's Pebble ACME test server with its DNS stand-in
//! (`pebble-challtestsrv`, answering every A query with 127.0.0.1), for
//! the acme plugin's tests: scripts/test.sh installs both from the Go
//! module proxy (`$STRAIT_PEBBLE_BIN_DIR`) and names the module's source
//! (`$STRAIT_PEBBLE_DIR`) for Pebble's TLS certificate and its CA. Pebble
//! validates http-01 challenges against `http_port` (the gateway's plain
//! proxy port). Killed on drop.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, TempDir};

pub struct Pebble {
    pub port: u16,
    pub management_port: u16,
    dir: TempDir,
    pebble: Child,
    dns: Child,
}

fn bin(name: &str) -> PathBuf {
    let dir = std::env::var_os("STRAIT_PEBBLE_BIN_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tools/bin"),
        PathBuf::from,
    );
    dir.join(name)
}

/// Pebble's module source (its `test/certs`).
pub fn source() -> PathBuf {
    match std::env::var_os("STRAIT_PEBBLE_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
            home.join("go/pkg/mod/github.com/letsencrypt/pebble/v2@v2.10.0")
        }
    }
}

/// The CA that signed Pebble's own HTTPS certificate (for `SSL_CERT_FILE`).
pub fn minica() -> PathBuf {
    source().join("test/certs/pebble.minica.pem")
}

fn wait_for(port: u16, what: &str, log: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on {port}: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Pebble {
    /// Starts the DNS stand-in and Pebble, validating http-01 on `http_port`.
    pub fn start(http_port: u16) -> Pebble {
        let dir = TempDir::new();
        let dns_port = free_port();
        let dns_log = dir.path().join("challtestsrv.log");
        let dns = Command::new(bin("pebble-challtestsrv"))
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""])
            .args(["-management", &format!("127.0.0.1:{}", free_port())])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&dns_log).expect("log"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("pebble-challtestsrv ({e}): scripts/test.sh installs it"));
        let port = free_port();
        let management_port = free_port();
        let certs = source().join("test/certs/localhost");
        let config = serde_json::json!({ "pebble": {
            "listenAddress": format!("127.0.0.1:{port}"),
            "managementListenAddress": format!("127.0.0.1:{management_port}"),
            "certificate": certs.join("cert.pem"),
            "privateKey": certs.join("key.pem"),
            "httpPort": http_port,
            "tlsPort": free_port(),
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
            "domainBlocklist": ["blocked-domain.example"],
            "retryAfter": { "authz": 1, "order": 1 },
            "keyAlgorithm": "ecdsa",
            "profiles": { "default": { "description": "default", "validityPeriod": 7776000 } }
        }});
        let config_path = dir.path().join("pebble.json");
        std::fs::write(&config_path, config.to_string()).expect("pebble config");
        let log = dir.path().join("pebble.log");
        let pebble = Command::new(bin("pebble"))
            .arg("-config")
            .arg(&config_path)
            .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
            // No random sleep before validating, no random nonce rejections.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).expect("log"))
            .stderr(std::fs::File::create(dir.path().join("pebble.err")).expect("log"))
            .spawn()
            .unwrap_or_else(|e| panic!("pebble ({e}): scripts/test.sh installs it"));
        let server = Pebble {
            port,
            management_port,
            dir,
            pebble,
            dns,
        };
        wait_for(port, "pebble", &log);
        wait_for(management_port, "pebble's management API", &log);
        server
    }

    /// The ACME directory URL.
    pub fn directory(&self) -> String {
        format!("https://localhost:{}/dir", self.port)
    }

    /// What Pebble logged (for assertion messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pebble.log")).unwrap_or_default()
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for child in [&mut self.pebble, &mut self.dns] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
