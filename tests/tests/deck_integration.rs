//! decK's own integration suite against a Strait node, unchanged and run as decK's CI runs
//! it against Kong 3.9: the test binary `scripts/test.sh` builds from the decK module
//! (`tests/integration`, build tag `integration`), pointed at the node's Admin API. Every
//! test that a Kong 3.9 OSS gateway runs must pass; the others skip themselves (Kong
//! Enterprise, Konnect, other versions). Each test wipes the node (`deck gateway reset`),
//! so the node is this test's own.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use strait_core::schema::deck_testdata::{DECK_SUITE_LEAVES, DECK_SUITE_PASSED, DECK_VERSION};
use strait_e2e::tools::deck_suite;
use strait_e2e::{Gateway, GatewayOptions};

/// Each test's outcome from `go test -v` output (`--- PASS: name (0.1s)`, indented for subtests).
fn outcomes(output: &str) -> BTreeMap<String, String> {
    output
        .lines()
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix("--- ")?;
            let (verdict, rest) = rest.split_once(": ")?;
            let name = rest.split_whitespace().next()?;
            matches!(verdict, "PASS" | "FAIL" | "SKIP").then(|| (name.to_string(), verdict.to_string()))
        })
        .collect()
}

/// Tests without subtests: the ones that check something.
fn leaves(all: &BTreeMap<String, String>) -> BTreeMap<&str, &str> {
    all.iter()
        .filter(|(name, _)| !all.keys().any(|other| other.starts_with(&format!("{name}/"))))
        .map(|(name, verdict)| (name.as_str(), verdict.as_str()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decks_integration_suite_passes_every_test_kong_3_9_runs() {
    let suite = deck_suite();
    let gw = Gateway::start(GatewayOptions::new()).await;
    let admin = gw.admin_url();
    let mut command = tokio::process::Command::new(suite.join("integration.test"));
    command
        .args(["-test.v", "-test.count=1", "-test.timeout=20m"])
        .current_dir(suite.join("tests/integration"))
        .env("DECK_KONG_ADDR", &admin)
        .env("KONG_ADMIN_URL", &admin)
        .env("DECK_ANALYTICS", "off")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    // The Kong OSS path: no Konnect account, no Enterprise token.
    for name in [
        "DECK_KONNECT_EMAIL",
        "DECK_KONNECT_PASSWORD",
        "DECK_KONNECT_TOKEN",
        "DECK_KONNECT_ADDR",
        "DECK_KONNECT_CONTROL_PLANE_NAME",
        "KONG_ADMIN_TOKEN",
        "DECK_HEADERS",
    ] {
        command.env_remove(name);
    }
    let output = tokio::time::timeout(Duration::from_secs(25 * 60), command.output())
        .await
        .expect("decK's suite ran past 25 minutes")
        .expect("run decK's integration suite");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let all = outcomes(&text);
    let leaves = leaves(&all);
    let count = |verdict: &str| leaves.values().filter(|v| **v == verdict).count();
    let failed: Vec<&str> = leaves
        .iter()
        .filter(|(_, v)| **v == "FAIL")
        .map(|(name, _)| *name)
        .collect();
    eprintln!(
        "decK {DECK_VERSION} integration suite: {} leaf tests, {} passed, {} failed, {} skipped",
        leaves.len(),
        count("PASS"),
        count("FAIL"),
        count("SKIP")
    );
    assert!(failed.is_empty(), "decK tests failed: {failed:?}\n{text}");
    assert!(output.status.success(), "the suite exited {:?}\n{text}", output.status);
    assert_eq!(leaves.len(), DECK_SUITE_LEAVES, "{text}");
    // Every test a Kong 3.9.0 OSS gateway runs ran: none skipped itself for a version or an
    // edition this node does not claim (a wrong `GET /` would skip them all and fail nothing).
    assert_eq!(count("PASS"), DECK_SUITE_PASSED, "{text}");
}
