//! The embedded store survives crashes: a committed config is served after `kill -9` and a
//! restart, a crash in the middle of a stream of posts loses at most the one in flight, and
//! `declarative_config` at start replaces what the store held.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use strait_e2e::declarative::{answering, config, many_routes, route, terminating_service};
use strait_e2e::{get, request, send_h1, within, Gateway, GatewayOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_config_survives_kill9() {
    let mut gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![terminating_service(
        "p",
        vec![answering(route("p", &["/p"]), "persisted")],
    )]))
    .await;
    let before = gw.admin_get("/status").await.json();
    gw.kill9();
    gw.restart().await;
    let reply = gw.proxy(get("/p")).await;
    assert_eq!(
        (reply.status.as_u16(), reply.message()),
        (200, Some("persisted".to_string()))
    );
    let after = gw.admin_get("/status").await.json();
    assert_eq!(after["configuration_hash"], before["configuration_hash"]);
    let version = |status: &serde_json::Value| status["config_version"].as_u64().expect("config_version");
    assert!(
        version(&after) >= version(&before),
        "config_version went backwards: {before} -> {after}"
    );
}

/// Posts `v1, v2, ...` as fast as possible, kills the gateway with SIGKILL mid-stream, restarts:
/// the served version is the last acknowledged one, or the one in flight if its commit landed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_posts_keeps_the_last_commit() {
    let mut gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&many_routes(20, "v0")).await;
    let admin = gw.admin_addr();
    let acknowledged = Arc::new(AtomicUsize::new(0));
    let poster = {
        let acknowledged = acknowledged.clone();
        tokio::spawn(async move {
            for n in 1..100_000usize {
                let body = many_routes(20, &format!("v{n}")).to_string();
                let req = request("POST", "/config", &[("content-type", "application/json")], body);
                match send_h1(admin, req).await {
                    Ok(reply) if reply.status == 201 => acknowledged.store(n, Ordering::SeqCst),
                    Ok(reply) => panic!("v{n} rejected: {} {}", reply.status, reply.text()),
                    Err(_) => return n,
                }
            }
            panic!("the gateway was never killed");
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let at_kill = acknowledged.load(Ordering::SeqCst);
    gw.kill9();
    let failed_at = within(Duration::from_secs(30), "poster to notice the kill", poster)
        .await
        .expect("poster task");
    let last_ok = acknowledged.load(Ordering::SeqCst);
    assert!(
        at_kill >= 2,
        "too few posts before the kill ({at_kill}) for the test to mean anything"
    );
    assert_eq!(failed_at, last_ok + 1);

    gw.restart().await;
    let served = gw.proxy(get("/version")).await.message().unwrap_or_default();
    let accepted = [format!("v{last_ok}"), format!("v{}", last_ok + 1)];
    assert!(
        accepted.contains(&served),
        "served {served:?}, last acknowledged v{last_ok}"
    );
    let reply = gw.proxy(get("/r7")).await;
    assert_eq!(reply.message().as_deref(), Some("r7"), "the whole config was restored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declarative_config_at_start_replaces_the_store() {
    let mut gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![terminating_service(
        "old",
        vec![answering(route("old", &["/old"]), "old")],
    )]))
    .await;
    let yaml = "_format_version: \"3.0\"\nservices:\n  - name: new\n    url: http://127.0.0.1:9\n    routes:\n      - name: new\n        paths: [/new]\n        plugins:\n          - name: request-termination\n            config: {status_code: 200, message: new}\n";
    gw.set_options(GatewayOptions::new().declarative(yaml));
    gw.restart().await;
    let reply = gw.proxy(get("/new")).await;
    assert_eq!((reply.status.as_u16(), reply.message()), (200, Some("new".to_string())));
    assert_eq!(
        gw.proxy(get("/old")).await.status,
        404,
        "store contents must be replaced"
    );
    let services = gw.admin_get("/services").await.json();
    let names: Vec<&str> = services["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, ["new"]);
}
