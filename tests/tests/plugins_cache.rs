//! proxy-cache (memory strategy) end to end: hits, misses and bypasses with
//! their headers, TTL and Cache-Control, the key's parts (query, vary
//! headers, consumer), the store's size limit, and the Admin API's purge
//! endpoints, against a real upstream that counts what reaches it.

use std::time::Duration;

use serde_json::{json, Value};
use strait_e2e::plugins::{echo_service, gateway_with_echo, UPSTREAM};
use strait_e2e::upstream::{Upstream, UpstreamKind};
use strait_e2e::{get, request, Gateway, GatewayOptions, Reply};

fn cache(config: Value) -> Value {
    let mut config = config;
    config["strategy"] = json!("memory");
    json!([{ "name": "proxy-cache", "config": config }])
}

fn status(reply: &Reply) -> String {
    reply.header("x-cache-status").unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miss_is_stored_and_the_next_request_is_a_hit() {
    let routes = json!([
        { "name": "c", "paths": ["/c"], "plugins": cache(json!({})) },
        { "name": "quiet", "paths": ["/quiet"], "plugins": cache(json!({
            "response_headers": { "age": false, "X-Cache-Status": false, "X-Cache-Key": false } })) }
    ]);
    let (gw, upstream) = gateway_with_echo(&echo_service(routes, json!([]))).await;

    let first = gw.proxy(get("/c/echo?a=1")).await;
    assert_eq!(first.status, 200);
    assert_eq!(status(&first), "Miss");
    let key = first.header("x-cache-key").expect("key header");
    assert_eq!(key.len(), 64, "a SHA-256 hex key");
    assert!(first.header("age").is_none(), "a miss has no Age");
    assert_eq!(upstream.hits(), 1);

    let second = gw.proxy(get("/c/echo?a=1")).await;
    assert_eq!(status(&second), "Hit");
    assert_eq!(second.header("x-cache-key").as_deref(), Some(key.as_str()));
    // Whole seconds since it was stored, as Kong counts: 0, or 1 when a second turned between
    // the two requests (seen under the full suite's load).
    let age: u64 = second.header("age").expect("age").parse().expect("number");
    assert!(age <= 1, "age {age}");
    assert_eq!(second.body, first.body, "the stored body is replayed");
    assert_eq!(second.header("content-type").as_deref(), Some("application/json"));
    assert_eq!(upstream.hits(), 1, "a hit never reaches the service");

    // Argument order does not matter; a different argument is another entry.
    let reordered = gw.proxy(get("/c/echo?a=1")).await;
    assert_eq!(status(&reordered), "Hit");
    let other = gw.proxy(get("/c/echo?a=2")).await;
    assert_eq!(status(&other), "Miss");
    assert_ne!(other.header("x-cache-key"), Some(key.clone()));

    // Not cacheable: the method, the status, the content type.
    let post = gw.proxy(request("POST", "/c/echo?a=1", &[], "x")).await;
    assert_eq!(status(&post), "Bypass");
    assert!(post.header("x-cache-key").is_none());
    for _ in 0..2 {
        let error = gw.proxy(get("/c/status/500")).await;
        assert_eq!((error.status.as_u16(), status(&error)), (500, "Bypass".to_string()));
        let html = gw
            .proxy(request(
                "GET",
                "/c/html",
                &[("x-respond-with-content-type", "text/html")],
                "",
            ))
            .await;
        assert_eq!(status(&html), "Bypass");
        let charset = gw
            .proxy(request(
                "GET",
                "/c/charset",
                &[("x-respond-with-content-type", "application/json; charset=utf-8")],
                "",
            ))
            .await;
        assert_eq!(status(&charset), "Bypass", "Kong matches content types exactly");
    }
    // 404 is cacheable by default.
    gw.proxy(get("/c/status/404")).await;
    let not_found = gw.proxy(get("/c/status/404")).await;
    assert_eq!(
        (not_found.status.as_u16(), status(&not_found)),
        (404, "Hit".to_string())
    );

    // Diagnostic headers can be turned off, and Kong-Debug turns them on.
    let hits = upstream.hits();
    let quiet = gw.proxy(get("/quiet/echo")).await;
    assert!(quiet.header("x-cache-status").is_none() && quiet.header("x-cache-key").is_none());
    let quiet = gw.proxy(get("/quiet/echo")).await;
    assert!(quiet.header("x-cache-status").is_none() && quiet.header("age").is_none());
    assert_eq!(upstream.hits(), hits + 1, "the second was still served from the cache");
    let debug = gw
        .proxy(request("GET", "/quiet/echo", &[("kong-debug", "1")], ""))
        .await;
    assert_eq!(status(&debug), "Hit");
    assert!(debug.header("x-cache-key").is_some() && debug.header("age").is_some());

    // A configuration change does not empty the cache.
    let added = gw
        .admin(
            "POST",
            "/services/echo/routes",
            &[("content-type", "application/json")],
            r#"{"name":"new","paths":["/new"]}"#,
        )
        .await;
    assert_eq!(added.status, 201, "{}", added.text());
    let after = gw.proxy(get("/c/echo?a=1")).await;
    assert_eq!(status(&after), "Hit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_and_cache_control_decide_freshness() {
    let routes = json!([
        { "name": "ttl", "paths": ["/ttl"], "plugins": cache(json!({ "cache_ttl": 1, "storage_ttl": 60 })) },
        { "name": "gone", "paths": ["/gone"], "plugins": cache(json!({ "cache_ttl": 1 })) },
        { "name": "cc", "paths": ["/cc"], "plugins": cache(json!({ "cache_control": true })) }
    ]);
    let (gw, upstream) = gateway_with_echo(&echo_service(routes, json!([]))).await;

    for path in ["/ttl/a", "/gone/a"] {
        assert_eq!(status(&gw.proxy(get(path)).await), "Miss");
        assert_eq!(status(&gw.proxy(get(path)).await), "Hit");
    }

    let max_age = [("x-respond-with-cache-control", "public, max-age=60")];
    assert_eq!(
        status(&gw.proxy(request("GET", "/cc/fresh", &max_age, "")).await),
        "Miss"
    );
    assert_eq!(status(&gw.proxy(get("/cc/fresh")).await), "Hit");

    // The response forbids or does not allow caching.
    for respond in ["no-store", "private, max-age=60", "no-cache"] {
        let headers = [("x-respond-with-cache-control", respond)];
        assert_eq!(
            status(&gw.proxy(request("GET", "/cc/no", &headers, "")).await),
            "Bypass",
            "{respond}"
        );
    }
    assert_eq!(
        status(&gw.proxy(get("/cc/no-ttl")).await),
        "Bypass",
        "no max-age nor Expires"
    );
    let expires = [("x-respond-with-expires", "Thu, 01 Jan 2099 00:00:00 GMT")];
    assert_eq!(
        status(&gw.proxy(request("GET", "/cc/expires", &expires, "")).await),
        "Miss"
    );
    assert_eq!(status(&gw.proxy(get("/cc/expires")).await), "Hit");

    // The request asks not to use the cache, or only the cache.
    let no_cache = [("cache-control", "no-cache")];
    assert_eq!(
        status(&gw.proxy(request("GET", "/cc/fresh", &no_cache, "")).await),
        "Bypass"
    );
    let only = [("cache-control", "only-if-cached")];
    let refused = gw.proxy(request("GET", "/cc/never-stored", &only, "")).await;
    assert_eq!(refused.status, 504);
    assert_eq!(status(&gw.proxy(request("GET", "/cc/fresh", &only, "")).await), "Hit");

    let hits = upstream.hits();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let refreshed = gw.proxy(get("/ttl/a")).await;
    assert_eq!(status(&refreshed), "Refresh", "older than cache_ttl");
    assert_eq!(status(&gw.proxy(get("/ttl/a")).await), "Hit", "refreshed entry");
    let gone = gw.proxy(get("/gone/a")).await;
    assert_eq!(status(&gone), "Miss", "kept only cache_ttl without storage_ttl");
    let aged = gw.proxy(get("/cc/fresh")).await;
    assert_eq!(status(&aged), "Hit");
    let age: u64 = aged.header("age").expect("age").parse().expect("number");
    assert!(age >= 2, "age counts from the store: {age}");
    let strict = [
        ("cache-control", "max-age=1"),
        ("x-respond-with-cache-control", "max-age=60"),
    ];
    assert_eq!(
        status(&gw.proxy(request("GET", "/cc/fresh", &strict, "")).await),
        "Refresh"
    );
    assert_eq!(upstream.hits(), hits + 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vary_settings_and_consumers_split_the_key() {
    let routes = json!([
        { "name": "v", "paths": ["/v"], "plugins": cache(json!({
            "vary_query_params": ["page"], "vary_headers": ["X-Tenant"], "ignore_uri_case": true })) },
        { "name": "k", "paths": ["/k"], "plugins": [
            { "name": "key-auth", "config": {} },
            { "name": "proxy-cache", "config": { "strategy": "memory" } }
        ] }
    ]);
    let consumers = json!([
        { "username": "alice", "keyauth_credentials": [{ "key": "alice-key" }] },
        { "username": "bob", "keyauth_credentials": [{ "key": "bob-key" }] }
    ]);
    let (gw, upstream) = gateway_with_echo(&echo_service(routes, consumers)).await;

    let t1 = [("x-tenant", "one")];
    assert_eq!(
        status(&gw.proxy(request("GET", "/v/a?page=1&x=1", &t1, "")).await),
        "Miss"
    );
    assert_eq!(
        status(&gw.proxy(request("GET", "/v/A?page=1&x=2", &t1, "")).await),
        "Hit"
    );
    assert_eq!(status(&gw.proxy(request("GET", "/v/a?page=2", &t1, "")).await), "Miss");
    let t2 = [("x-tenant", "two")];
    assert_eq!(status(&gw.proxy(request("GET", "/v/a?page=1", &t2, "")).await), "Miss");
    assert_eq!(status(&gw.proxy(get("/v/a?page=1")).await), "Miss");

    let alice = [("apikey", "alice-key")];
    let bob = [("apikey", "bob-key")];
    assert_eq!(status(&gw.proxy(request("GET", "/k/me", &alice, "")).await), "Miss");
    assert_eq!(status(&gw.proxy(request("GET", "/k/me", &alice, "")).await), "Hit");
    let for_bob = gw.proxy(request("GET", "/k/me", &bob, "")).await;
    assert_eq!(status(&for_bob), "Miss", "each consumer has its own entries");
    assert_eq!(for_bob.json()["headers"]["x-consumer-username"], "bob");
    let anonymous = gw.proxy(get("/k/me")).await;
    assert_eq!(anonymous.status, 401, "authentication still runs before the cache");
    assert_eq!(upstream.hits(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_reads_and_purges_entries() {
    let routes = json!([{ "name": "c", "paths": ["/c"], "plugins": cache(json!({})) }]);
    let (gw, upstream) = gateway_with_echo(&echo_service(routes, json!([]))).await;
    let key_a = gw.proxy(get("/c/a")).await.header("x-cache-key").expect("key");
    let key_b = gw.proxy(get("/c/b")).await.header("x-cache-key").expect("key");

    let entry = gw.admin_get(&format!("/proxy-cache/{key_a}")).await;
    assert_eq!(entry.status, 200, "{}", entry.text());
    let entry = entry.json();
    assert_eq!(entry["status"], 200);
    assert_eq!(entry["version"], 1);
    assert_eq!(entry["headers"]["content-type"], "application/json");
    let body: Value = serde_json::from_str(entry["body"].as_str().expect("body")).expect("json");
    assert_eq!(body["path"], "/a");
    assert_eq!(
        entry["body_len"].as_u64(),
        Some(entry["body"].as_str().unwrap().len() as u64)
    );

    let plugins = gw.admin_get("/plugins").await.json();
    let plugin = plugins["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "proxy-cache");
    let plugin_id = plugin.expect("the plugin")["id"]
        .as_str()
        .expect("plugin id")
        .to_string();
    let by_plugin = gw.admin_get(&format!("/proxy-cache/{plugin_id}/caches/{key_b}")).await;
    assert_eq!(by_plugin.status, 200, "{plugins}: {}", by_plugin.text());
    let unknown = gw
        .admin_get(&format!("/proxy-cache/{}/caches/{key_b}", uuid::Uuid::new_v4()))
        .await;
    assert_eq!(unknown.status, 404);
    assert_eq!(gw.admin_get("/proxy-cache/not-a-key").await.status, 404);

    let purged = gw.admin("DELETE", &format!("/proxy-cache/{key_a}"), &[], "").await;
    assert_eq!(purged.status, 204);
    assert_eq!(
        gw.admin("DELETE", &format!("/proxy-cache/{key_a}"), &[], "")
            .await
            .status,
        404
    );
    assert_eq!(status(&gw.proxy(get("/c/a")).await), "Miss", "purged");
    assert_eq!(status(&gw.proxy(get("/c/b")).await), "Hit", "untouched");

    let purged = gw
        .admin("DELETE", &format!("/proxy-cache/{plugin_id}/caches/{key_b}"), &[], "")
        .await;
    assert_eq!(purged.status, 204);
    assert_eq!(status(&gw.proxy(get("/c/b")).await), "Miss");

    gw.proxy(get("/c/a")).await;
    let flushed = gw.admin("DELETE", "/proxy-cache", &[], "").await;
    assert_eq!(flushed.status, 204);
    assert_eq!(status(&gw.proxy(get("/c/a")).await), "Miss", "flushed");
    assert_eq!(status(&gw.proxy(get("/c/b")).await), "Miss", "flushed");
    assert_eq!(gw.admin("GET", "/proxy-cache", &[], "").await.status, 405);
    assert_eq!(upstream.hits(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_keeps_to_mem_cache_size() {
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new().setting("mem_cache_size", "64k")).await;
    let config = echo_service(
        json!([{ "name": "c", "paths": ["/c"], "plugins": cache(json!({})) }]),
        json!([]),
    );
    let text = config.to_string().replace(UPSTREAM, &upstream.url("http"));
    gw.apply(&serde_json::from_str(&text).expect("config")).await;

    for bytes in [30_000, 30_001] {
        let path = format!("/c/big?bytes={bytes}");
        assert_eq!(status(&gw.proxy(get(&path)).await), "Miss");
        let hit = gw.proxy(get(&path)).await;
        assert_eq!((status(&hit), hit.body.len()), ("Hit".to_string(), bytes));
    }
    // A third entry does not fit: the least recently used one goes.
    assert_eq!(status(&gw.proxy(get("/c/big?bytes=30002")).await), "Miss");
    assert_eq!(status(&gw.proxy(get("/c/big?bytes=30002")).await), "Hit");
    assert_eq!(status(&gw.proxy(get("/c/big?bytes=30000")).await), "Miss", "evicted");

    // A body larger than the whole store streams through whole, uncached.
    for _ in 0..2 {
        let big = gw.proxy(get("/c/big?bytes=200000")).await;
        assert_eq!((big.status.as_u16(), big.body.len()), (200, 200_000));
        assert_eq!(status(&big), "Miss");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_proxy_cache_configs_are_refused_with_field_paths() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let cases = [
        (json!({}), "strategy", "required field missing"),
        (json!({ "strategy": "redis" }), "strategy", "expected one of: memory"),
        (
            json!({ "strategy": "memory", "cache_ttl": 0 }),
            "cache_ttl",
            "value must be greater than 0",
        ),
        (
            json!({ "strategy": "memory", "request_method": ["DELETE"] }),
            "request_method",
            "expected one of",
        ),
        (
            json!({ "strategy": "memory", "response_code": [] }),
            "response_code",
            "length must be at least 1",
        ),
    ];
    for (config, field, message) in cases {
        let body = json!({ "name": "proxy-cache", "config": config }).to_string();
        let reply = gw
            .admin("POST", "/plugins", &[("content-type", "application/json")], body)
            .await;
        assert_eq!(reply.status, 400, "{config}: {}", reply.text());
        let text = reply.json()["fields"]["config"].to_string();
        assert!(text.contains(field) && text.contains(message), "{config}: {text}");
    }
    let schema = gw.admin_get("/schemas/plugins/proxy-cache").await;
    assert_eq!(schema.status, 200);
    assert!(schema.text().contains("kong_db_cache"));
    let plugins = gw.admin_get("/plugins").await.json();
    assert!(plugins["data"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["name"] != "proxy-cache"));
}
