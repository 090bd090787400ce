//! Protocol and API conformance against the real binary, with the tools users run:
//! h2spec (every HTTP/2 and HPACK case, on the h2c port and on the TLS port) and schemathesis
//! (property-based requests generated from the Admin API's own `/openapi.json`: no 5xx, every
//! response conforming to the document). Both tools are installed by `scripts/test.sh`.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use strait_e2e::tools::tool;
use strait_e2e::{Gateway, GatewayOptions, TempDir, Upstream, UpstreamKind};

/// Runs `program args` in a scratch directory (tools keep caches in theirs), bounded;
/// returns (success, stdout + stderr).
async fn run(program: &Path, args: &[&str], limit: Duration) -> (bool, String) {
    let scratch = TempDir::new();
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .current_dir(scratch.path())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(limit, command.output())
        .await
        .unwrap_or_else(|_| panic!("{} {args:?} ran past {limit:?}", program.display()))
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// h2spec's closing line, `N tests, P passed, S skipped, F failed`.
fn h2spec_totals(output: &str) -> &str {
    output
        .lines()
        .rev()
        .find(|line| line.contains(" tests, "))
        .unwrap_or("(no totals line)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2spec_passes_every_case_on_h2c_and_tls() {
    let h2spec = tool("h2spec", "STRAIT_H2SPEC_BIN");
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    // h2spec requests one path; proxied to a real upstream whose echo reads the request body and
    // answers with a body long enough for the flow-control cases (6.9.2) to run, not skip.
    gw.apply(&json!({
        "_format_version": "3.0",
        "services": [{ "name": "echo", "url": origin.url("http"), "routes": [{ "name": "h2spec", "paths": ["/h2spec"] }] }]
    }))
    .await;
    let h2c = gw.proxy_addr().port().to_string();
    let tls = gw.proxy_tls_addr().port().to_string();
    for (name, args) in [
        ("h2c", vec!["-h", "127.0.0.1", "-p", &h2c, "-P", "/h2spec", "-o", "5"]),
        (
            "tls",
            vec!["-h", "127.0.0.1", "-p", &tls, "-P", "/h2spec", "-o", "5", "-t", "-k"],
        ),
    ] {
        let (success, output) = run(&h2spec, &args, Duration::from_secs(300)).await;
        let totals = h2spec_totals(&output);
        if name == "h2c" {
            // One case is HTTP/1's on a port that serves both: see `invalid_preface_on_h2c`.
            assert_eq!(
                totals, "146 tests, 145 passed, 0 skipped, 1 failed",
                "h2spec on {name}:\n{output}"
            );
            invalid_preface_on_h2c(&output);
            continue;
        }
        assert!(success, "h2spec on {name}: {totals}\n{output}");
        assert_eq!(
            totals, "146 tests, 146 passed, 0 skipped, 0 failed",
            "h2spec on {name}:\n{output}"
        );
    }
}

/// The plain port serves HTTP/1.1 and h2c, and only the exact HTTP/2 preface selects h2c (as in
/// nginx), so h2spec 3.5 #2's `INVALID CONNECTION PREFACE` line is an HTTP/1 request that is no
/// HTTP: Kong's 400, then a reset that terminates the connection, as RFC 9113 §3.4 asks of an
/// HTTP/2 endpoint. h2spec 2.6.0 (the last release) counts only a GOAWAY or an EOF between frames
/// as terminated: it compares the read error with ECONNRESET directly, which Go's wrapped errno
/// never equals on Linux (fixed on h2spec's master in 9b53157, which no release carries). So the
/// one failure allowed is that case, failing on the reset and on nothing else.
fn invalid_preface_on_h2c(output: &str) {
    let failures: Vec<&str> = output
        .lines()
        .filter(|line| line.trim_start().starts_with('×'))
        .collect();
    assert!(
        failures
            .iter()
            .all(|line| line.trim() == "× 2: Sends invalid connection preface"),
        "h2spec on h2c: {failures:?}\n{output}"
    );
    let reason = output
        .split("× 2: Sends invalid connection preface")
        .nth(1)
        .and_then(|rest| rest.lines().find(|line| line.trim_start().starts_with("Actual:")))
        .unwrap_or("(no reason)");
    assert!(
        reason.ends_with("connection reset by peer"),
        "h2spec 3.5 #2 on h2c must fail only on the reset: {reason}\n{output}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_or_schema_violation() {
    let schemathesis = tool("schemathesis", "STRAIT_SCHEMATHESIS_BIN");
    let gw = Gateway::start(GatewayOptions::new()).await;
    let base = gw.admin_url();
    let document = format!("{base}/openapi.json");
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance/schemathesis.toml");
    let examples = std::env::var("STRAIT_SCHEMATHESIS_EXAMPLES").unwrap_or_else(|_| "10".to_string());
    let args = [
        "--config-file",
        config.to_str().expect("utf-8 path"),
        "run",
        &document,
        "--url",
        &base,
        "--seed",
        "42",
        "--max-examples",
        &examples,
        "--checks",
        "not_a_server_error,response_schema_conformance",
        "--phases",
        "examples,coverage,fuzzing",
        "--request-timeout",
        "10",
        "--workers",
        "1",
        "--no-color",
    ];
    let (success, output) = run(&schemathesis, &args, Duration::from_secs(900)).await;
    assert!(success, "schemathesis found failures:\n{output}\n{}", gw.log_tail());
    let summary = output
        .lines()
        .rev()
        .find(|line| line.contains("generated"))
        .unwrap_or("");
    assert!(
        summary.contains("passed"),
        "every generated case passed: {summary}\n{output}"
    );
}
