//! `response-ratelimiting` on a real node: the upstream spends from named
//! limits with `X-Kong-Limit`, the gateway answers Kong's usage headers,
//! tells the upstream what remains, refuses (429, no body) a response that
//! would spend from a used-up limit, `block_on_first_violation` refuses
//! before proxying, and the `redis` policy keeps the counts in Redis under
//! Kong's key names.

use serde_json::{json, Value};
use strait_e2e::plugins::{echo_headers, gateway_with_echo};
use strait_e2e::redis::{RedisOptions, RedisServer};
use strait_e2e::{request, Gateway, Reply};

fn spend(path: &str, limit: &str) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    request("GET", path, &[("x-respond-with-x-kong-limit", limit)], "")
}

fn routes(plugin: Value) -> Value {
    json!({
        "_format_version": "3.0",
        "services": [{
            "name": "echo", "url": "UPSTREAM",
            "routes": [{ "id": "5e7b0000-0000-4000-8000-000000000001", "name": "media", "paths": ["/media"],
                "plugins": [plugin] }]
        }]
    })
}

async fn spend_on(gw: &Gateway, limit: &str) -> Reply {
    gw.proxy(spend("/media", limit)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_spends_named_limits() {
    let plugin = json!({ "name": "response-ratelimiting", "config": {
        "limit_by": "ip",
        "limits": { "video": { "minute": 5, "hour": 20 }, "image": { "minute": 100 } } } });
    let (gw, _upstream) = gateway_with_echo(&routes(plugin)).await;
    let first = spend_on(&gw, "video=2").await;
    assert_eq!(first.status, 200, "{}", first.text());
    // The upstream learns what remains (before this response's spend).
    let sent = echo_headers(&first);
    assert_eq!(sent["x-ratelimit-remaining-video"], "5");
    assert_eq!(sent["x-ratelimit-remaining-image"], "100");
    // The client sees the spend of this response.
    assert_eq!(first.header("x-ratelimit-limit-video-minute").as_deref(), Some("5"));
    assert_eq!(first.header("x-ratelimit-remaining-video-minute").as_deref(), Some("3"));
    assert_eq!(first.header("x-ratelimit-remaining-video-hour").as_deref(), Some("18"));
    assert_eq!(
        first.header("x-ratelimit-remaining-image-minute").as_deref(),
        Some("100")
    );
    assert!(
        first.header("x-kong-limit").is_none(),
        "the upstream's header is removed"
    );

    let second = spend_on(&gw, "video=3, image=1").await;
    assert_eq!(second.status, 200);
    assert_eq!(echo_headers(&second)["x-ratelimit-remaining-video"], "3");
    assert_eq!(
        second.header("x-ratelimit-remaining-video-minute").as_deref(),
        Some("0")
    );
    assert_eq!(
        second.header("x-ratelimit-remaining-image-minute").as_deref(),
        Some("99")
    );

    // Video is used up: a response spending from it is refused, one that
    // does not still passes.
    let refused = spend_on(&gw, "video=1").await;
    assert_eq!(refused.status, 429);
    assert!(refused.body.is_empty(), "no body: {:?}", refused.text());
    let other = spend_on(&gw, "image=1").await;
    assert_eq!(other.status, 200);
    assert_eq!(other.header("x-ratelimit-remaining-video-minute").as_deref(), Some("0"));
    assert_eq!(
        other.header("x-ratelimit-remaining-image-minute").as_deref(),
        Some("98")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_on_first_violation_refuses_before_proxying() {
    let plugin = json!({ "name": "response-ratelimiting", "config": {
        "limit_by": "ip", "block_on_first_violation": true, "hide_client_headers": true,
        "header_name": "x-spent",
        "limits": { "video": { "hour": 2 } } } });
    let (gw, upstream) = gateway_with_echo(&routes(plugin)).await;
    let reply = gw
        .proxy(request("GET", "/media", &[("x-respond-with-x-spent", "video=2")], ""))
        .await;
    assert_eq!(reply.status, 200);
    assert!(reply.header("x-ratelimit-remaining-video-hour").is_none(), "hidden");
    assert!(reply.header("x-spent").is_none(), "header_name is the one removed");
    let seen = upstream.hits();
    let refused = gw.proxy(request("GET", "/media", &[], "")).await;
    assert_eq!(refused.status, 429);
    assert_eq!(
        refused.message().as_deref(),
        Some("API rate limit exceeded for 'video'")
    );
    assert_eq!(upstream.hits(), seen, "refused before the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_policy_counts_in_redis() {
    let redis = RedisServer::start(RedisOptions::default());
    let plugin = json!({ "name": "response-ratelimiting", "config": {
        "limit_by": "ip", "policy": "redis", "redis": { "host": "127.0.0.1", "port": redis.port() },
        "limits": { "video": { "hour": 10 } } } });
    let (gw, _upstream) = gateway_with_echo(&routes(plugin)).await;
    assert_eq!(spend_on(&gw, "video=4").await.status, 200);
    let hour_ms = {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        (now - now % 3600) * 1000
    };
    let key = format!(
        "response-ratelimit:5e7b0000-0000-4000-8000-000000000001:00000000-0000-0000-0000-000000000000:127.0.0.1:{hour_ms}:video:hour"
    );
    // The increment is added after the response.
    strait_e2e::eventually(std::time::Duration::from_secs(5), "the increment lands", || async {
        anyhow::ensure!(redis.get_int(&key) == 4, "{:?}", redis.keys("*"));
        Ok(())
    })
    .await;
    // Another node's spend, written straight to Redis, counts here.
    redis.command(&["INCRBY", &key, "6"]);
    let next = spend_on(&gw, "video=1").await;
    assert_eq!(next.status, 429);
}
