//! Background work yields to the proxy and gives memory back: the admin and
//! compiler threads run under SCHED_IDLE (nice 19) while workers keep the
//! default, and a large configuration's memory is returned to the OS once a
//! small one replaces it, without any further traffic.

use std::time::Duration;

use strait_e2e::declarative::many_routes;
use strait_e2e::{Gateway, GatewayOptions};

/// (thread name, nice, scheduling policy) of every thread of `pid`.
fn threads(pid: u32) -> Vec<(String, i64, i64)> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("task list") {
        let path = task.expect("task entry").path().join("stat");
        let Ok(stat) = std::fs::read_to_string(&path) else {
            continue;
        };
        // `pid (comm) state ...`: fields after the comm's closing parenthesis,
        // numbered from 3 (state) as in proc(5): nice is 19, policy is 41.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let rest: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        let field = |n: usize| rest[n - 3].parse::<i64>().expect("numeric stat field");
        found.push((comm, field(19), field(41)));
    }
    found
}

/// The node opts out of transparent huge pages (see `strait_runtime::background`).
#[tokio::test]
async fn the_node_runs_without_transparent_huge_pages() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    // Kernels before 5.0 have no such line; there is nothing to check.
    if let Some(enabled) = status_field(gw.pid(), "THP_enabled:") {
        assert_eq!(enabled, "0");
    }
}

const SCHED_OTHER: i64 = 0;
const SCHED_IDLE: i64 = 5;

#[tokio::test]
async fn admin_and_compiler_threads_run_below_the_workers() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let threads = threads(gw.pid());
    let named =
        |prefix: &str| -> Vec<&(String, i64, i64)> { threads.iter().filter(|t| t.0.starts_with(prefix)).collect() };
    for name in ["strait-admin", "strait-compil"] {
        let found = named(name);
        assert!(!found.is_empty(), "no {name} thread in {threads:?}");
        for (comm, nice, policy) in found {
            assert_eq!(
                (*nice, *policy),
                (19, SCHED_IDLE),
                "{comm}: nice {nice}, policy {policy}"
            );
        }
    }
    let workers = named("strait-worker");
    assert!(!workers.is_empty(), "no worker thread in {threads:?}");
    for (comm, nice, policy) in workers {
        assert_eq!(
            (*nice, *policy),
            (0, SCHED_OTHER),
            "{comm}: nice {nice}, policy {policy}"
        );
    }
}

/// The value of a `/proc/PID/status` line (`VmRSS:`), trimmed.
fn status_field(pid: u32, field: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .map(|rest| rest.trim().to_string())
}

fn kib(pid: u32, field: &str) -> u64 {
    status_field(pid, field)
        .and_then(|value| value.trim_end_matches("kB").trim().parse().ok())
        .expect("status field")
}

#[tokio::test]
async fn memory_of_a_replaced_large_config_goes_back_to_the_os() {
    // What is measured is the snapshot's memory, whatever stores the configuration: the
    // embedded store keeps the posts quick (on a debug build, 8,000 rows written to PostgreSQL
    // took over the client's 15 s with other suites running beside it).
    let gw = Gateway::start(GatewayOptions::new().setting("database", "embedded")).await;
    let small = many_routes(10, "small").to_string().into_bytes();
    let large = many_routes(4000, "large").to_string().into_bytes();
    let post = |body: Vec<u8>| {
        let gw = &gw;
        async move {
            let reply = gw.post_config_as("/config", "application/json", body).await;
            assert_eq!(reply.status, 201, "{}", reply.text());
        }
    };
    post(small.clone()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let base = gw.rss_kib();
    post(large).await;
    post(small).await;
    let peak = kib(gw.pid(), "VmHWM:");
    // No request after the last post: only the gateway's own release can
    // lower RSS now.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = gw.rss_kib();
    assert!(
        peak > base + 20 * 1024,
        "the large config should cost memory: base {base} KiB, peak {peak} KiB"
    );
    assert!(
        after < base + (peak - base) / 4,
        "RSS stayed at {after} KiB after the large config was replaced (base {base} KiB, peak {peak} KiB)"
    );
}
