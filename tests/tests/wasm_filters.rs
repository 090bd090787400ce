//! proxy-wasm filters on a real node with a real upstream: a filter built
//! with the proxy-wasm Go SDK and standard Go's wasip1 target
//! (tests/filters/strait-test-filter, built by scripts/test.sh) adds request
//! headers (one from a property), rewrites the response body, answers
//! locally on a condition and logs; `filter_chains` made through a
//! declarative file and through the Admin API behave the same; its
//! `meta.json` schema is enforced on writes; a filter that panics, loops or
//! grows its memory past the limit ends only its request.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strait_e2e::admin_api::send_json;
use strait_e2e::plugins::{echo_headers, echo_service, UPSTREAM};
use strait_e2e::upstream::{Upstream, UpstreamKind};
use strait_e2e::{request, Gateway, GatewayOptions};

const FILTER: &str = "strait-test-filter";

/// Where scripts/test.sh put the filter and its meta file.
fn filters_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("STRAIT_WASM_FILTERS") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .ancestors()
        .nth(3)
        .expect("target dir")
        .join("tools")
        .join("filters");
    assert!(
        dir.join(format!("{FILTER}.wasm")).exists(),
        "{} has no {FILTER}.wasm: run ./scripts/test.sh (it builds it), or set STRAIT_WASM_FILTERS",
        dir.display()
    );
    dir
}

fn wasm_node() -> GatewayOptions {
    GatewayOptions::new()
        .setting("wasm", "on")
        .setting("wasm_filters_path", &filters_dir().display().to_string())
        .setting("wasm_max_run_time", "300ms")
        .setting("log_level", "info")
}

/// Everything the filter does, configured for one route.
fn full_config() -> Value {
    json!({
        "header": "x-wasm",
        "value": "on",
        "deny_header": "x-deny",
        "route_header": "x-wasm-route",
        "response_header": "x-wasm-response",
        "body_from": "\"/w",
        "body_to": "\"/W",
        "log": true
    })
}

/// A node with `options` serving `config` (its `UPSTREAM` the upstream).
async fn serving(options: GatewayOptions, config: Value, upstream: &Upstream) -> Gateway {
    let gw = Gateway::start(options).await;
    let text = config.to_string().replace(UPSTREAM, &upstream.url("http"));
    let applied = gw.apply(&serde_json::from_str(&text).unwrap()).await;
    assert!(applied.status.is_success(), "{}", applied.text());
    gw
}

/// The route at `path` runs the full filter: checked from outside.
async fn filters(gw: &Gateway, path: &str, route_id: &str) {
    let reply = gw.proxy(request("GET", path, &[("x-wasm-in", "hi")], "")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let body = reply.json();
    assert_eq!(echo_headers(&reply)["x-wasm"], "on|hi", "{body}");
    assert_eq!(echo_headers(&reply)["x-wasm-route"], route_id, "{body}");
    assert_eq!(reply.header("x-wasm-response").as_deref(), Some("1"));
    // The route's path the upstream saw (x-forwarded-path: "/w...") rewritten
    // in the body by the filter.
    assert_eq!(
        body["headers"]["x-forwarded-path"],
        path.replacen("/w", "/W", 1),
        "{body}"
    );
    assert!(!reply.text().contains(&format!("\"{path}")), "{}", reply.text());

    let denied = gw.proxy(request("GET", path, &[("x-deny", "1")], "")).await;
    assert_eq!(denied.status, 403, "{}", denied.text());
    assert_eq!(denied.text(), "denied by wasm\n");
    assert_eq!(denied.header("x-wasm-denied").as_deref(), Some("1"));
    assert!(
        gw.log_shows(&format!("strait-test-filter saw {path}"), Duration::from_secs(10))
            .await,
        "{}",
        gw.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_filter_sets_headers_rewrites_bodies_and_answers_locally_by_file_and_admin_api() {
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let declared = echo_service(
        json!([
            { "name": "declared", "paths": ["/wdeclared"],
              "filter_chains": [{ "name": "declared-chain",
                                  "filters": [{ "name": FILTER, "config": full_config() }] }] },
            { "name": "by-api", "paths": ["/wapi"] }
        ]),
        json!([]),
    );
    let gw = serving(wasm_node(), declared, &upstream).await;
    let declared_id = gw.admin_get("/routes/declared").await.json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    filters(&gw, "/wdeclared", &declared_id).await;

    // The filter's meta.json schema is enforced on the Admin API.
    let bad = json!({ "filters": [{ "name": FILTER, "config": { "header": 5 } }] });
    let refused = send_json(&gw, "POST", "/routes/by-api/filter-chains", &bad).await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert!(refused.text().contains("header"), "{}", refused.text());
    let unknown = json!({ "filters": [{ "name": "no-such-filter" }] });
    let refused = send_json(&gw, "POST", "/routes/by-api/filter-chains", &unknown).await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert!(refused.text().contains("no such filter"), "{}", refused.text());

    // The same chain made through the Admin API behaves the same.
    let chain = json!({ "name": "api-chain", "filters": [{ "name": FILTER, "config": full_config() }] });
    let made = send_json(&gw, "POST", "/routes/by-api/filter-chains", &chain).await;
    assert_eq!(made.status, 201, "{}", made.text());
    let api_id = gw.admin_get("/routes/by-api").await.json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    filters(&gw, "/wapi", &api_id).await;

    // Disabled, the chain no longer runs; deleted, neither.
    let off = send_json(&gw, "PATCH", "/filter-chains/api-chain", &json!({ "enabled": false })).await;
    assert_eq!(off.status, 200, "{}", off.text());
    let plain = gw.proxy(request("GET", "/wapi", &[("x-wasm-in", "hi")], "")).await;
    assert_eq!(plain.status, 200);
    assert!(echo_headers(&plain).get("x-wasm").is_none(), "{}", plain.text());
    assert_eq!(echo_headers(&plain)["x-forwarded-path"], "/wapi");
    let gone = gw.admin("DELETE", "/filter-chains/declared-chain", &[], "").await;
    assert_eq!(gone.status, 204, "{}", gone.text());
    let plain = gw.proxy(request("GET", "/wdeclared", &[("x-deny", "1")], "")).await;
    assert_eq!(plain.status, 200, "{}", plain.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_that_panics_loops_or_hoards_memory_ends_only_its_request() {
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let chain = |fail: Option<&str>| {
        let mut config = json!({ "header": "x-wasm", "value": "fine" });
        if let Some(fail) = fail {
            config["fail"] = json!(fail);
        }
        json!([{ "filters": [{ "name": FILTER, "config": config }] }])
    };
    let declared = echo_service(
        json!([
            { "name": "panics", "paths": ["/panics"], "filter_chains": chain(Some("panic")) },
            { "name": "loops", "paths": ["/loops"], "filter_chains": chain(Some("loop")) },
            { "name": "hoards", "paths": ["/hoards"], "filter_chains": chain(Some("memory")) },
            { "name": "fine", "paths": ["/fine"], "filter_chains": chain(None) }
        ]),
        json!([]),
    );
    let gw = serving(wasm_node(), declared, &upstream).await;

    let fine = |reply: &strait_e2e::client::Reply| {
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(echo_headers(reply)["x-wasm"], "fine", "{}", reply.text());
        // A filter that leaves the body alone leaves its length too (a
        // filter that changes it removes Content-Length itself).
        let length = reply.header("content-length").unwrap_or_default();
        assert_eq!(length, reply.body.len().to_string(), "{:?}", reply.headers);
    };
    fine(&gw.proxy(request("GET", "/fine", &[], "")).await);
    for _ in 0..3 {
        let failed = gw.proxy(request("GET", "/panics", &[], "")).await;
        assert_eq!(failed.status, 500, "{}", failed.text());
        assert_eq!(failed.json(), json!({ "message": "An unexpected error occurred" }));
        // The filter's instance was made again: the next request is served.
        fine(&gw.proxy(request("GET", "/fine", &[], "")).await);
    }
    assert!(
        gw.log_shows("wasm filter failed", Duration::from_secs(5)).await,
        "{}",
        gw.log_tail()
    );

    // Memory past `wasm_max_memory` (256m by default): the filter's
    // allocation fails, Go's runtime gives up, the request fails alone.
    let hoarded = gw.proxy(request("GET", "/hoards", &[], "")).await;
    assert_eq!(hoarded.status, 500, "{}", hoarded.text());
    fine(&gw.proxy(request("GET", "/fine", &[], "")).await);

    // A loop is ended by the time budget (300 ms here); requests beside it
    // go on being served.
    let started = Instant::now();
    let (looped, beside) = tokio::join!(gw.proxy(request("GET", "/loops", &[], "")), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        gw.proxy(request("GET", "/fine", &[], "")).await
    });
    assert_eq!(looped.status, 500, "{}", looped.text());
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    fine(&beside);
    assert!(
        gw.log_shows("time budget", Duration::from_secs(5)).await,
        "{}",
        gw.log_tail()
    );
    for _ in 0..5 {
        fine(&gw.proxy(request("GET", "/fine", &[], "")).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_asking_for_ticks_gets_them_and_counts_in_shared_data_on_its_worker() {
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let config = json!({ "tick_ms": 20, "ticks_header": "x-wasm-ticks", "count_header": "x-wasm-count" });
    let mut declared = echo_service(json!([{ "name": "ticks", "paths": ["/ticks"] }]), json!([]));
    declared["services"][0]["filter_chains"] = json!([{ "filters": [{ "name": FILTER, "config": config }] }]);
    // One worker: its instance (and its ticks) serves every request.
    let gw = serving(wasm_node().setting("worker_threads", "1"), declared, &upstream).await;
    let ticks = |reply: &strait_e2e::client::Reply| -> u64 {
        assert_eq!(reply.status, 200, "{}", reply.text());
        echo_headers(reply)["x-wasm-ticks"].as_str().unwrap().parse().unwrap()
    };
    let count = |reply: &strait_e2e::client::Reply| echo_headers(reply)["x-wasm-count"].clone();
    let reply = gw.proxy(request("GET", "/ticks", &[], "")).await;
    let first = ticks(&reply);
    assert_eq!(count(&reply), "1");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reply = gw.proxy(request("GET", "/ticks", &[], "")).await;
    let later = ticks(&reply);
    assert!(later >= first + 5, "{first} ticks, then {later} half a second later");
    // The worker's shared data kept the count between requests.
    assert_eq!(count(&reply), "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_waits_for_its_http_call_and_reads_the_answer() {
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let origin = upstream.url("http").trim_start_matches("http://").to_string();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = closed.local_addr().unwrap().to_string();
    drop(closed);
    let calling = |to: &str| {
        json!([{ "filters": [{ "name": FILTER, "config": {
        "header": "x-wasm", "value": "called", "call_upstream": to, "call_path": "/called" } }] }])
    };
    let declared = echo_service(
        json!([
            { "name": "calls", "paths": ["/calls"], "filter_chains": calling(&origin) },
            { "name": "fails", "paths": ["/fails"], "filter_chains": calling(&nowhere) }
        ]),
        json!([]),
    );
    let gw = serving(wasm_node(), declared, &upstream).await;

    for _ in 0..3 {
        let reply = gw
            .proxy(request("GET", "/calls", &[("x-wasm-call-deny", "1")], ""))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let headers = echo_headers(&reply);
        assert_eq!(headers["x-wasm"], "called", "{headers}");
        assert_eq!(headers["x-wasm-call-status"], "200", "{headers}");
        let bytes: usize = headers["x-wasm-call-bytes"].as_str().unwrap().parse().unwrap();
        assert!(bytes > 20, "the echo's answer to the call: {bytes} bytes");
    }
    // A call that cannot connect reaches the filter as an answer without
    // status, which this filter refuses.
    let refused = gw
        .proxy(request("GET", "/fails", &[("x-wasm-call-deny", "1")], ""))
        .await;
    assert_eq!(refused.status, 401, "{}", refused.text());
    assert_eq!(refused.text(), "call answered \n");
    let passed = gw.proxy(request("GET", "/fails", &[], "")).await;
    assert_eq!(passed.status, 200, "{}", passed.text());
    assert_eq!(echo_headers(&passed)["x-wasm-call-status"], "", "{}", passed.text());
    assert!(
        gw.log_shows("wasm filter's HTTP call failed", Duration::from_secs(5))
            .await,
        "{}",
        gw.log_tail()
    );
}

/// A filter whose response-headers callback leaves the head alone gets it
/// lazily: the upstream's head goes on in its own bytes (names in the
/// upstream's case, its `Content-Length`), as on a route without plugins.
/// A filter that adds a field gets the map (names as the map writes them)
/// and its field is sent; one that drops the body's length sends it chunked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_no_filter_changes_goes_on_as_the_upstream_wrote_it() {
    let (upstream, _task) = strait_e2e::upstream::fixed_upstream().await;
    let chain =
        |name: &str, config: Value| json!([{ "name": name, "filters": [{ "name": FILTER, "config": config }] }]);
    let config = json!({
        "_format_version": "3.0",
        "services": [{
            "name": "fixed", "url": format!("http://{upstream}"),
            "routes": [
                { "name": "quiet", "paths": ["/quiet"],
                  "filter_chains": chain("quiet", json!({ "header": "x-wasm", "value": "on" })) },
                { "name": "loud", "paths": ["/loud"],
                  "filter_chains": chain("loud", json!({ "response_header": "x-wasm-response" })) },
                { "name": "rewrites", "paths": ["/rewrites"],
                  "filter_chains": chain("rewrites", json!({ "body_from": "o", "body_to": "0" })) }
            ]
        }]
    });
    let gw = Gateway::start(wasm_node()).await;
    let applied = gw.apply(&config).await;
    assert!(applied.status.is_success(), "{}", applied.text());
    let raw =
        |path: &str| format!("GET {path} HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\n\r\n").into_bytes();
    use strait_e2e::upstream::{assert_relayed, head_lines};

    for _ in 0..2 {
        let reply = strait_e2e::send_h1_raw(gw.proxy_addr(), &raw("/quiet")).await;
        let lines = assert_relayed(&reply);
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("X-Kong-Upstream-Latency: ") || l.starts_with("x-kong-upstream-latency: ")),
            "{lines:?}"
        );
    }

    let reply = strait_e2e::send_h1_raw(gw.proxy_addr(), &raw("/loud")).await;
    assert!(reply.ends_with("\r\n\r\nok"), "{reply}");
    let lines = head_lines(&reply);
    assert!(
        lines.contains(&"x-upstream-case: Kept".to_string()),
        "mapped: {lines:?}"
    );
    assert!(lines.contains(&"x-wasm-response: 1".to_string()), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.eq_ignore_ascii_case("content-length: 2")),
        "{lines:?}"
    );

    let reply = strait_e2e::send_h1_raw(gw.proxy_addr(), &raw("/rewrites")).await;
    let lines = head_lines(&reply);
    assert!(
        lines.contains(&"x-upstream-case: Kept".to_string()),
        "mapped: {lines:?}"
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.to_ascii_lowercase().starts_with("content-length")),
        "{lines:?}"
    );
    assert!(
        reply.contains("\r\n\r\n2\r\n0k\r\n0\r\n\r\n"),
        "chunked, rewritten: {reply}"
    );
}
