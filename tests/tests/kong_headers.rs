//! Kong's informational headers (`headers` / `headers_upstream` in
//! kong.conf): X-Kong-Request-Id both ways, latency headers, Server/Via,
//! X-Kong-Upstream-Status, and the Admin API's X-Kong-Admin-Latency and
//! X-Kong-Admin-Request-ID; each switched as Kong switches it.

use serde_json::Value;
use strait_e2e::declarative::{config, route, service};
use strait_e2e::{get, request, run_strait, Gateway, GatewayOptions, Reply, TempDir, Upstream, UpstreamKind};

fn upstream_headers(reply: &Reply) -> Value {
    assert_eq!(reply.status, 200, "upstream echo expected: {}", reply.text());
    reply.json()["headers"].clone()
}

fn is_request_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `/r/echo` with the client's own `X-Kong-Request-Id`.
async fn echo_with_a_client_id(gw: &Gateway) -> Reply {
    gw.proxy(request(
        "GET",
        "/r/echo",
        &[("x-kong-request-id", "from-the-client")],
        "",
    ))
    .await
}

async fn gateway_with(up: &Upstream, env: &[(&str, &str)]) -> Gateway {
    let mut options = GatewayOptions::new();
    for (key, value) in env {
        options = options.env(key, value);
    }
    let gw = Gateway::start(options).await;
    gw.apply(&config(vec![service("s", &up.url("http"), vec![route("r", &["/r"])])]))
        .await;
    gw
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defaults_send_the_request_id_both_ways_and_the_latencies() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = gateway_with(&up, &[]).await;
    let reply = echo_with_a_client_id(&gw).await;
    let id = reply.header("x-kong-request-id").expect("X-Kong-Request-Id");
    assert!(is_request_id(&id), "{id}");
    // The upstream saw the same id; the client's own value was replaced.
    assert_eq!(upstream_headers(&reply)["x-kong-request-id"], id.as_str());
    assert!(reply.header("x-kong-upstream-latency").is_some());
    assert!(reply.header("x-kong-proxy-latency").is_some());
    assert!(reply.header("via").is_some_and(|via| via.contains("strait/")));
    assert!(reply.header("x-kong-response-latency").is_none(), "proxied");
    assert!(reply.header("x-kong-upstream-status").is_none(), "not in the defaults");
    let next = gw.proxy(get("/r/echo")).await.header("x-kong-request-id").unwrap();
    assert_ne!(next, id, "one id per request");

    let admin = gw.admin_get("/").await;
    let latency = admin.header("x-kong-admin-latency").expect("X-Kong-Admin-Latency");
    assert!(latency.parse::<u64>().is_ok(), "{latency}");
    let admin_id = admin
        .header("x-kong-admin-request-id")
        .expect("X-Kong-Admin-Request-ID");
    assert!(admin_id.len() == 32 && admin_id.bytes().all(|b| b.is_ascii_alphanumeric()));
    assert!(admin.header("server").is_some());
    assert!(
        admin.header("x-kong-request-id").is_none(),
        "Kong sets it on the proxy only"
    );
    assert_eq!(
        admin.json()["configuration"]["headers"],
        serde_json::json!(["server_tokens", "latency_tokens", "X-Kong-Request-Id"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_turns_every_header_off_and_leaves_the_clients_id_alone() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = gateway_with(&up, &[("STRAIT_HEADERS", "off"), ("STRAIT_HEADERS_UPSTREAM", "off")]).await;
    let reply = echo_with_a_client_id(&gw).await;
    for name in [
        "x-kong-request-id",
        "x-kong-upstream-latency",
        "x-kong-proxy-latency",
        "via",
        "server",
    ] {
        assert!(reply.header(name).is_none(), "{name} sent with headers = off");
    }
    assert_eq!(upstream_headers(&reply)["x-kong-request-id"], "from-the-client");
    let missing = gw.proxy(get("/nowhere")).await;
    assert_eq!(missing.status, 404);
    for name in ["x-kong-request-id", "x-kong-response-latency", "server"] {
        assert!(missing.header(name).is_none(), "{name} sent with headers = off");
    }
    assert!(
        missing.json()["request_id"].as_str().is_some_and(is_request_id),
        "the body keeps it, as Kong's"
    );
    let admin = gw.admin_get("/").await;
    assert!(admin.header("x-kong-admin-latency").is_none());
    assert!(admin.header("server").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_headers_can_be_named() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = gateway_with(&up, &[("STRAIT_HEADERS", "X-Kong-Upstream-Status, server")]).await;
    let reply = gw.proxy(get("/r/status/201")).await;
    assert_eq!(reply.status, 201);
    assert_eq!(reply.header("x-kong-upstream-status").as_deref(), Some("201"));
    assert!(reply.header("server").is_some());
    for name in ["x-kong-request-id", "x-kong-upstream-latency", "via"] {
        assert!(reply.header(name).is_none(), "{name} not asked for");
    }
    // headers_upstream still defaults to sending the id.
    let echoed = upstream_headers(&gw.proxy(get("/r/echo")).await);
    assert!(echoed["x-kong-request-id"].as_str().is_some_and(is_request_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_entry_stops_the_node_with_its_name() {
    let dir = TempDir::new();
    let out = run_strait(
        &["start"],
        dir.path(),
        &[("STRAIT_HEADERS", "server_tokens, X-Powered-By")],
    )
    .await;
    assert_ne!(out.code, Some(0));
    assert!(
        out.all().contains("headers: invalid entry 'X-Powered-By'"),
        "{}",
        out.all()
    );
}
