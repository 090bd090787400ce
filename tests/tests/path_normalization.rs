//! The path is normalized before routing, as Kong does, so spellings of `/admin` cannot slip
//! past the route (and its plugins) that guards `/admin` to an open route on `/`. Requests are
//! written as raw bytes so no client library rewrites the path first. The upstream receives
//! the normalized path, the one the route was chosen for.

use std::time::Duration;

use serde_json::{json, Value};
use strait_e2e::{Gateway, GatewayOptions, RawConn, Upstream, UpstreamKind};

async fn guarded_gateway(origin: &Upstream) -> Gateway {
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&json!({
        "_format_version": "3.0",
        "services": [{
            "name": "app", "url": origin.url("http"),
            "routes": [
                {
                    "name": "admin", "paths": ["/admin"], "strip_path": false,
                    "plugins": [{ "name": "request-termination",
                                  "config": { "status_code": 403, "message": "admin is restricted" } }]
                },
                { "name": "open", "paths": ["/"], "strip_path": false }
            ]
        }]
    }))
    .await;
    gw
}

/// Sends `GET <target>` as raw bytes; returns the status and the body.
async fn raw_get(gw: &Gateway, target: &str) -> (u16, String) {
    let mut raw = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    let request = format!("GET {target} HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n");
    raw.write(request.as_bytes()).await.expect("write");
    let reply = raw.read_until_close(Duration::from_secs(5)).await;
    let text = reply.text();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (reply.status().unwrap_or(0), body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spellings_of_a_guarded_path_meet_its_route() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = guarded_gateway(&origin).await;
    for target in [
        "/admin",
        "/%61dmin",
        "/%61%64%6D%69%6E/users",
        "//admin",
        "///admin/",
        "/a/../admin",
        "/x/%2e%2e/admin",
        "/x/%2E%2E/admin/settings",
        "/./admin",
        "/admin/./",
        "/admin%2e%2e/",
    ] {
        let (status, body) = raw_get(&gw, target).await;
        assert_eq!(status, 403, "{target}: {body}");
        assert!(body.contains("admin is restricted"), "{target}: {body}");
    }
    assert_eq!(origin.hits(), 0, "no spelling of /admin reached the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_gets_the_normalized_path_and_the_query_unchanged() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = guarded_gateway(&origin).await;
    let (status, body) = raw_get(&gw, "/echo/a/./b/../%63%2fd//e?q=%2e%2e/x&y").await;
    assert_eq!(status, 200, "{body}");
    let echoed: Value = serde_json::from_str(&body).expect("echo json");
    assert_eq!(echoed["path"], "/echo/a/c%2Fd/e?q=%2e%2e/x&y", "{body}");
    let (status, body) = raw_get(&gw, "/echo/plain-path?x=1").await;
    assert_eq!(status, 200, "{body}");
    let echoed: Value = serde_json::from_str(&body).expect("echo json");
    assert_eq!(echoed["path"], "/echo/plain-path?x=1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_escapes_nul_and_climbing_above_root_are_400() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = guarded_gateway(&origin).await;
    // As nginx answers before Kong's router: bad escapes, NUL, and `..` above the root.
    for target in [
        "/%zz",
        "/admin%2",
        "/a%g1b",
        "/a%00",
        "/../admin",
        "/x/../../admin",
        "/%2e%2e/admin",
    ] {
        let (status, body) = raw_get(&gw, target).await;
        assert_eq!(status, 400, "{target}: {body}");
    }
    assert_eq!(origin.hits(), 0);
}
