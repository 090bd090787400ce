//! HTTP/3 from a real client: aioquic (PyPI) driven by tests/h3/client.py, one
//! connection per call (tests/tests/http3.rs).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::{Gateway, TestCa};

/// Runs `plan` (the format tests/h3/client.py documents) on one HTTP/3
/// connection to `gw`'s TLS port with SNI `sni`, trusting `ca`; the
/// client's report.
pub fn run(gw: &Gateway, ca: &TestCa, sni: &str, plan: &Value) -> Value {
    let ca_path = gw.prefix().join(format!("h3-ca-{}.pem", crate::random_token()));
    std::fs::write(&ca_path, ca.cert_pem()).expect("write the CA for the HTTP/3 client");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("h3").join("client.py");
    let output = Command::new(crate::llm::python())
        .arg(script)
        .arg("127.0.0.1")
        .arg(gw.proxy_tls_addr().port().to_string())
        .arg(&ca_path)
        .arg(sni)
        .arg(plan.to_string())
        .output()
        .expect("run the aioquic client (scripts/test.sh installs it into target/tools/venv)");
    assert!(
        output.status.success(),
        "HTTP/3 client failed: {}\n{}",
        String::from_utf8_lossy(&output.stderr),
        gw.log_tail()
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "HTTP/3 client output is not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// A response header's value from a report of one request.
pub fn header<'a>(result: &'a Value, name: &str) -> Option<&'a str> {
    result["headers"]
        .as_array()?
        .iter()
        .find(|pair| pair[0].as_str() == Some(name))
        .and_then(|pair| pair[1].as_str())
}
