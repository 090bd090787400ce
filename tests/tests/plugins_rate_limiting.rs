//! `rate-limiting` with the `local` policy on a real node (and `cluster` on two nodes on
//! Cassandra): Kong's headers and
//! 429, exact counting under concurrency (both workers share the counters),
//! `limit_by` sources with the IP fallback, the plugin's scope as the
//! counting scope, counters that survive a configuration change, Redis
//! credentials as vault references, and the policies not built yet refused
//! with a clear error.
//!
//! Limits are per hour (and day) so that a window boundary is practically
//! never crossed during a test.

use serde_json::{json, Value};
use strait_e2e::admin_api::{expect_error, send_json};
use strait_e2e::plugins::gateway_with_echo;
use strait_e2e::{get, request, send_h1, Gateway, Reply};

fn limited(config: Value) -> Value {
    json!({ "name": "rate-limiting", "config": config })
}

fn header(reply: &Reply, name: &str) -> Option<String> {
    reply.header(name)
}

async fn statuses(gw: &Gateway, path: &str, headers: &[(&str, &str)], count: usize) -> Vec<u16> {
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(gw.proxy(request("GET", path, headers, "")).await.status.as_u16());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_answer_kongs_headers_and_429() {
    let config = json!({
        "_format_version": "3.0",
        "services": [{
            "name": "echo", "url": "UPSTREAM",
            "routes": [
                { "name": "limited", "paths": ["/limited"],
                  "plugins": [limited(json!({ "hour": 3, "day": 10, "limit_by": "ip" }))] },
                { "name": "quiet", "paths": ["/quiet"],
                  "plugins": [limited(json!({ "hour": 1, "limit_by": "ip", "hide_client_headers": true,
                      "error_code": 418, "error_message": "slow down" }))] }
            ]
        }]
    });
    let (gw, _upstream) = gateway_with_echo(&config).await;
    for expected_remaining in ["2", "1", "0"] {
        let reply = gw.proxy(get("/limited")).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(header(&reply, "x-ratelimit-limit-hour").as_deref(), Some("3"));
        assert_eq!(
            header(&reply, "x-ratelimit-remaining-hour").as_deref(),
            Some(expected_remaining)
        );
        assert_eq!(header(&reply, "x-ratelimit-limit-day").as_deref(), Some("10"));
        // The RateLimit-* headers follow the period with the least left.
        assert_eq!(header(&reply, "ratelimit-limit").as_deref(), Some("3"));
        assert_eq!(
            header(&reply, "ratelimit-remaining").as_deref(),
            Some(expected_remaining)
        );
        let reset: i64 = header(&reply, "ratelimit-reset").unwrap().parse().unwrap();
        assert!((1..=3600).contains(&reset), "reset {reset}");
    }
    let refused = gw.proxy(get("/limited")).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.message().as_deref(), Some("API rate limit exceeded"));
    assert_eq!(header(&refused, "x-ratelimit-remaining-hour").as_deref(), Some("0"));
    assert_eq!(header(&refused, "x-ratelimit-remaining-day").as_deref(), Some("7"));
    let retry: i64 = header(&refused, "retry-after").unwrap().parse().unwrap();
    assert!((1..=3600).contains(&retry), "retry-after {retry}");

    let first = gw.proxy(get("/quiet")).await;
    assert_eq!(first.status, 200);
    assert!(
        header(&first, "x-ratelimit-limit-hour").is_none(),
        "hide_client_headers"
    );
    let refused = gw.proxy(get("/quiet")).await;
    assert_eq!(refused.status, 418);
    assert_eq!(refused.message().as_deref(), Some("slow down"));
    assert!(header(&refused, "retry-after").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_never_pass_the_limit() {
    let config = json!({
        "_format_version": "3.0",
        "services": [{ "name": "echo", "url": "UPSTREAM",
            "routes": [{ "name": "r", "paths": ["/r"], "plugins": [limited(json!({ "hour": 50, "limit_by": "ip" }))] }] }]
    });
    let (gw, _upstream) = gateway_with_echo(&config).await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let addr = gw.proxy_addr();
        tasks.spawn(async move { send_h1(addr, get("/r")).await.expect("a reply").status.as_u16() });
    }
    let statuses = tasks.join_all().await;
    let passed = statuses.iter().filter(|s| **s == 200).count();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!((passed, refused), (50, 150));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identifiers_scopes_and_a_change_of_config() {
    let config = |message: &str| {
        json!({
            "_format_version": "3.0",
            "consumers": [
                { "username": "alice", "keyauth_credentials": [{ "key": "alice-key" }] },
                { "username": "bob", "keyauth_credentials": [{ "key": "bob-key" }] }
            ],
            "plugins": [limited(json!({ "hour": 4, "limit_by": "ip", "error_message": message }))],
            "services": [{
                "name": "echo", "url": "UPSTREAM",
                "routes": [
                    { "name": "by-consumer", "paths": ["/by-consumer"], "plugins": [
                        { "name": "key-auth" },
                        limited(json!({ "hour": 2 }))
                    ] },
                    { "name": "by-header", "paths": ["/by-header"], "plugins": [
                        limited(json!({ "hour": 1, "limit_by": "header", "header_name": "X-Tenant" }))
                    ] },
                    { "name": "global-a", "paths": ["/global-a"] },
                    { "name": "global-b", "paths": ["/global-b"] }
                ]
            }]
        })
    };
    let (gw, upstream) = gateway_with_echo(&config("global limit")).await;
    // Each consumer has its own count.
    let alice = [("apikey", "alice-key")];
    let bob = [("apikey", "bob-key")];
    assert_eq!(statuses(&gw, "/by-consumer", &alice, 3).await, [200, 200, 429]);
    assert_eq!(statuses(&gw, "/by-consumer", &bob, 3).await, [200, 200, 429]);
    // Each header value has its own count; without the header the IP counts.
    assert_eq!(statuses(&gw, "/by-header", &[("x-tenant", "t1")], 2).await, [200, 429]);
    assert_eq!(statuses(&gw, "/by-header", &[("x-tenant", "t2")], 2).await, [200, 429]);
    assert_eq!(statuses(&gw, "/by-header", &[], 2).await, [200, 429]);
    // A global plugin counts across the routes it applies to (the harness's
    // readiness probes on its marker route counted too: start from what is left).
    let first = gw.proxy(get("/global-a")).await;
    assert_eq!(first.status, 200);
    let left: usize = header(&first, "x-ratelimit-remaining-hour").unwrap().parse().unwrap();
    assert!(left >= 1, "the probes left room: {left}");
    let mut passed = Vec::new();
    for path in ["/global-b", "/global-a"].into_iter().cycle().take(left + 2) {
        passed.push((path, gw.proxy(get(path)).await.status.as_u16()));
    }
    let ok: Vec<&str> = passed.iter().filter(|(_, s)| *s == 200).map(|(p, _)| *p).collect();
    assert_eq!(ok.len(), left, "{passed:?}");
    assert!(
        ok.contains(&"/global-b"),
        "the other route shares the count: {passed:?}"
    );
    let refused = gw.proxy(get("/global-a")).await;
    assert_eq!(
        (refused.status.as_u16(), refused.message()),
        (429, Some("global limit".to_string()))
    );
    // A change of the plugin's config keeps its counters (as Kong's shared dict does).
    let (status, body) = gw
        .post_config(
            &config("still limited")
                .to_string()
                .replace("UPSTREAM", &upstream.url("http")),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let refused = gw.proxy(get("/global-b")).await;
    assert_eq!(
        (refused.status.as_u16(), refused.message()),
        (429, Some("still limited".to_string()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_not_built_yet_are_refused_with_their_name() {
    let gw = Gateway::start(strait_e2e::GatewayOptions::new().env("STRAIT_T_REDIS_PW", "s3cret")).await;
    // Redis credentials are referenceable: resolved when the plugin is built.
    let with_reference = |reference: &str| {
        json!({ "name": "rate-limiting", "instance_name": "referenced",
            "config": { "minute": 5, "redis": { "password": reference } } })
    };
    let reply = send_json(&gw, "POST", "/plugins", &with_reference("{vault://env/strait-t-unset}")).await;
    let error = expect_error(&reply, 400, 2, "schema violation");
    assert!(
        error
            .to_string()
            .contains("config.redis.password: could not resolve {vault://env/strait-t-unset}"),
        "{error}"
    );
    let reply = send_json(
        &gw,
        "POST",
        "/plugins",
        &with_reference("{vault://env/strait-t-redis-pw}"),
    )
    .await;
    assert_eq!(reply.status.as_u16(), 201, "{}", reply.text());
    assert_eq!(
        reply.json()["config"]["redis"]["password"],
        "{vault://env/strait-t-redis-pw}"
    );
    assert!(!gw.admin_get("/config").await.text().contains("s3cret"));
    // The cluster policy needs Cassandra (a run with every gateway on it takes it).
    if std::env::var("STRAIT_E2E_STORE").as_deref() != Ok("cassandra") {
        let body = json!({ "name": "rate-limiting", "config": { "minute": 5, "policy": "cluster" } });
        let reply = send_json(&gw, "POST", "/plugins", &body).await;
        let error = expect_error(&reply, 400, 2, "schema violation");
        assert!(
            error["fields"]["config"]["policy"]
                .as_str()
                .is_some_and(|m| m.contains("'cluster' policy needs database = cassandra")),
            "{error}"
        );
    }
    let reply = send_json(&gw, "POST", "/plugins", &json!({ "name": "rate-limiting" })).await;
    let error = expect_error(&reply, 400, 2, "schema violation");
    assert!(
        error
            .to_string()
            .contains("at least one of these fields must be non-empty"),
        "{error}"
    );
}

/// Kong 3.9 still takes rate-limiting's pre-3.6 `redis_*` fields (decK files of 3.x users have
/// them), stores them in `config.redis`, and answers with each one mirroring its new field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kong_3x_redis_fields_are_taken_and_answered() {
    let gw = Gateway::start(strait_e2e::GatewayOptions::new()).await;
    let body = json!({ "name": "rate-limiting", "config": {
        "minute": 5, "redis_host": "cache.internal", "redis_port": 6380, "redis_timeout": 500
    }});
    let reply = send_json(&gw, "POST", "/plugins", &body).await;
    assert_eq!(reply.status.as_u16(), 201, "{}", reply.text());
    let id = reply.json()["id"].as_str().expect("id").to_string();
    for answer in [reply.json(), gw.admin_get(&format!("/plugins/{id}")).await.json()] {
        let config = &answer["config"];
        assert_eq!(config["redis"]["host"], "cache.internal", "{config}");
        assert_eq!(config["redis"]["port"], 6380, "{config}");
        assert_eq!(config["redis_host"], "cache.internal", "{config}");
        assert_eq!(config["redis_port"], 6380, "{config}");
        assert_eq!(config["redis_timeout"], 500, "{config}");
        assert_eq!(config["redis_database"], 0, "{config}");
        assert!(config.as_object().unwrap().contains_key("redis_password"), "{config}");
    }
    let listed = gw.admin_get("/plugins").await.json();
    assert_eq!(listed["data"][0]["config"]["redis_host"], "cache.internal");

    let both = json!({ "name": "rate-limiting", "instance_name": "both", "config": {
        "minute": 5, "redis_host": "a.internal", "redis": { "host": "b.internal" }
    }});
    let reply = send_json(&gw, "POST", "/plugins", &both).await;
    let error = expect_error(&reply, 400, 2, "schema violation");
    assert_eq!(
        error["fields"]["config"]["redis_host"],
        "both deprecated and new field are used but their values mismatch: redis_host = a.internal vs redis.host = b.internal",
        "{error}"
    );
    let schema = gw.admin_get("/schemas/plugins/rate-limiting").await.json();
    let config = schema["fields"]
        .as_array()
        .and_then(|fields| fields.iter().find_map(|f| f.get("config")))
        .expect("config field");
    let names: Vec<String> = config["shorthand_fields"]
        .as_array()
        .expect("shorthand_fields")
        .iter()
        .filter_map(|f| f.as_object().and_then(|o| o.keys().next().cloned()))
        .collect();
    assert!(names.contains(&"redis_host".to_string()), "{names:?}");
    assert_eq!(names.len(), 9, "{names:?}");
}

/// A route whose plugins leave the response head alone (key-auth,
/// rate-limiting, prometheus) passes the upstream's head on in its own
/// bytes, names in the upstream's case as on a route without plugins, with
/// rate-limiting's and Kong's fields after it; a route with a header filter
/// (response-transformer) gets the same fields through the header map,
/// where the filter sees and changes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_no_plugin_filters_goes_on_as_the_upstream_wrote_it() {
    let (upstream, _task) = strait_e2e::upstream::fixed_upstream().await;
    let url = format!("http://{upstream}");
    let auth = json!({ "name": "key-auth", "config": { "key_names": ["apikey"] } });
    let config = json!({
        "_format_version": "3.0",
        "consumers": [{ "username": "ann", "keyauth_credentials": [{ "key": "ann-key" }] }],
        "services": [{
            "name": "fixed", "url": url,
            "routes": [
                { "name": "plain", "paths": ["/plain"] },
                { "name": "relayed", "paths": ["/relayed"],
                  "plugins": [auth.clone(), limited(json!({ "hour": 100, "limit_by": "consumer" })),
                              { "name": "prometheus" }] },
                { "name": "filtered", "paths": ["/filtered"],
                  "plugins": [auth, limited(json!({ "hour": 100, "limit_by": "consumer" })),
                              { "name": "response-transformer",
                                "config": { "remove": { "headers": ["x-ratelimit-limit-hour"] },
                                            "add": { "headers": ["x-added:yes"] } } }] }
            ]
        }]
    });
    let gw = Gateway::start(strait_e2e::GatewayOptions::new()).await;
    gw.apply(&config).await;
    let raw = |path: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: example.test\r\napikey: ann-key\r\nConnection: close\r\n\r\n")
            .into_bytes()
    };
    use strait_e2e::upstream::{assert_relayed, head_lines};
    let value = |lines: &[String], name: &str| -> Option<String> {
        lines
            .iter()
            .find_map(|line| line.split_once(": ").filter(|(n, _)| n.eq_ignore_ascii_case(name)))
            .map(|(_, v)| v.to_string())
    };

    let plain = head_lines(&strait_e2e::send_h1_raw(gw.proxy_addr(), &raw("/plain")).await);
    assert!(plain.contains(&"X-Upstream-Case: Kept".to_string()), "{plain:?}");

    for round in 1..=2 {
        let reply = strait_e2e::send_h1_raw(gw.proxy_addr(), &raw("/relayed")).await;
        let lines = assert_relayed(&reply);
        assert_eq!(value(&lines, "x-ratelimit-limit-hour").as_deref(), Some("100"));
        let remaining = (100 - round).to_string();
        assert_eq!(value(&lines, "x-ratelimit-remaining-hour"), Some(remaining.clone()));
        assert_eq!(value(&lines, "ratelimit-remaining"), Some(remaining));
        assert!(value(&lines, "ratelimit-reset").is_some(), "{lines:?}");
        assert!(value(&lines, "x-kong-upstream-latency").is_some(), "{lines:?}");
        assert!(value(&lines, "x-kong-request-id").is_some(), "{lines:?}");
        assert!(value(&lines, "via").is_some(), "{lines:?}");
        // Each field once: nothing written by both the relay and the map.
        let mut names: Vec<String> = lines
            .iter()
            .map(|l| l.split(':').next().unwrap().to_ascii_lowercase())
            .collect();
        names.sort();
        let count = names.len();
        names.dedup();
        assert_eq!(names.len(), count, "{lines:?}");
    }

    let reply = strait_e2e::send_h1_raw(gw.proxy_addr(), &raw("/filtered")).await;
    let lines = head_lines(&reply);
    // Through the map: names as the map writes them, and the filter saw
    // rate-limiting's fields.
    assert!(
        lines.contains(&"x-upstream-case: Kept".to_string()),
        "mapped: {lines:?}"
    );
    assert_eq!(value(&lines, "x-ratelimit-limit-hour"), None, "{lines:?}");
    assert_eq!(value(&lines, "x-ratelimit-remaining-hour").as_deref(), Some("99"));
    assert_eq!(value(&lines, "x-added").as_deref(), Some("yes"));
    assert!(value(&lines, "x-kong-upstream-latency").is_some(), "{lines:?}");

    // No key: key-auth answers, with no upstream head to relay.
    let refused = strait_e2e::send_h1_raw(
        gw.proxy_addr(),
        b"GET /relayed HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
}

/// `policy: cluster` on two nodes sharing one Cassandra keyspace: the hour's
/// limit holds across both nodes (each node's count a row of the window's
/// partition); with `sync_rate` the nodes decide locally and learn the
/// other's count at their next sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_policy_counts_across_nodes_on_cassandra() {
    use strait_e2e::cassandra::CassandraServer;
    use strait_e2e::upstream::{Upstream, UpstreamKind};
    let server = CassandraServer::start();
    server.bootstrap();
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let a = Gateway::start(server.node_options()).await;
    let b = Gateway::start(server.node_options()).await;
    let config = json!({
        "_format_version": "3.0",
        "services": [{ "name": "echo", "url": origin.url("http"), "routes": [
            { "name": "sync", "paths": ["/sync"], "plugins": [
                limited(json!({ "hour": 6, "policy": "cluster", "limit_by": "ip" })) ] },
            { "name": "lazy", "paths": ["/lazy"], "plugins": [
                limited(json!({ "hour": 4, "policy": "cluster", "sync_rate": 0.2, "limit_by": "ip" })) ] }
        ] }]
    });
    let reply = a.apply(&config).await;
    assert!(reply.status.is_success(), "{}", reply.text());
    b.until_proxied("/sync", 200, std::time::Duration::from_secs(5)).await;
    // until_proxied spent one request on b: 5 left in the hour.
    assert_eq!(statuses(&a, "/sync", &[], 3).await, [200, 200, 200]);
    let last = b.proxy(get("/sync")).await;
    assert_eq!(last.status, 200);
    assert_eq!(header(&last, "x-ratelimit-remaining-hour").as_deref(), Some("1"));
    assert_eq!(statuses(&b, "/sync", &[], 1).await, [200]);
    let refused = a.proxy(get("/sync")).await;
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert_eq!(header(&refused, "x-ratelimit-remaining-hour").as_deref(), Some("0"));
    assert_eq!(statuses(&b, "/sync", &[], 2).await, [429, 429]);

    // sync_rate: a spends 3 of 4, b learns it within a sync.
    assert_eq!(statuses(&a, "/lazy", &[], 3).await, [200, 200, 200]);
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let first_on_b = b.proxy(get("/lazy")).await;
    assert_eq!(first_on_b.status, 200);
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    assert_eq!(statuses(&b, "/lazy", &[], 1).await, [429]);
    // a decides on what it read at its last sync, before b's request: a
    // limit may be passed by what another node admitted within one sync.
    assert_eq!(statuses(&a, "/lazy", &[], 1).await, [200]);
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    assert_eq!(statuses(&a, "/lazy", &[], 1).await, [429]);
}
