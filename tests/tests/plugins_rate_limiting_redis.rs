//! `rate-limiting` with the `redis` policy against a real `redis-server`:
//! Kong's keys and headers, two nodes sharing one Redis never admitting more
//! than the limit (with `sync_rate = -1` and with leases, `sync_rate = 1`),
//! Redis killed mid-test (`fault_tolerant` both ways, answers without
//! stalling) and counting resuming once it is back, and every field of the
//! `redis` record: `database`, `username`/`password`, `ssl`, `ssl_verify`,
//! `server_name`, `timeout`.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strait_e2e::redis::{RedisOptions, RedisServer};
use strait_e2e::{eventually, get, send_h1, Gateway, GatewayOptions, Reply, TestCa};

const SERVICE: &str = "5e7a0000-0000-4000-8000-000000000001";

/// A route at `/<name>` answering 200 through request-termination, with a
/// rate-limiting plugin (which runs first) using `config`.
fn limited_route(id: &str, name: &str, config: Value) -> Value {
    json!({
        "id": id, "name": name, "paths": [format!("/{name}")],
        "plugins": [
            { "name": "rate-limiting", "config": config },
            { "name": "request-termination", "config": { "status_code": 200, "message": "passed" } }
        ]
    })
}

fn config_with(routes: Vec<Value>) -> Value {
    json!({
        "_format_version": "3.0",
        "services": [{ "id": SERVICE, "name": "limited", "url": "http://127.0.0.1:9", "routes": routes }]
    })
}

fn redis_record(redis: &RedisServer) -> Value {
    json!({ "host": "127.0.0.1", "port": redis.port() })
}

/// Waits, when needed, so that the next `seconds` stay inside one UTC minute.
async fn inside_one_minute(seconds: u64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let left = 60 - now % 60;
    if left < seconds {
        tokio::time::sleep(Duration::from_secs(left + 1)).await;
    }
}

fn minute_ms() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    (now - now % 60) * 1000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_live_in_redis_under_kongs_keys_with_kongs_headers() {
    let redis = RedisServer::start(RedisOptions::default());
    let route = "5e7a0000-0000-4000-8000-000000000010";
    let config = config_with(vec![
        limited_route(
            route,
            "counted",
            json!({ "minute": 3, "hour": 10, "limit_by": "ip", "policy": "redis", "redis": redis_record(&redis),
                "error_code": 418, "error_message": "slow down" }),
        ),
        limited_route(
            "5e7a0000-0000-4000-8000-000000000011",
            "by-header",
            json!({ "minute": 1, "limit_by": "header", "header_name": "x-tenant", "policy": "redis",
                "hide_client_headers": true, "redis": redis_record(&redis) }),
        ),
    ]);
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config).await;
    inside_one_minute(10).await;
    let minute = minute_ms();
    for remaining in ["2", "1", "0"] {
        let reply = gw.proxy(get("/counted")).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-ratelimit-limit-minute").as_deref(), Some("3"));
        assert_eq!(reply.header("x-ratelimit-remaining-minute").as_deref(), Some(remaining));
        assert_eq!(reply.header("x-ratelimit-limit-hour").as_deref(), Some("10"));
        assert_eq!(reply.header("ratelimit-remaining").as_deref(), Some(remaining));
    }
    let refused = gw.proxy(get("/counted")).await;
    assert_eq!(
        (refused.status.as_u16(), refused.message().as_deref()),
        (418, Some("slow down"))
    );
    assert!(refused.header("retry-after").is_some());
    assert_eq!(refused.header("x-ratelimit-remaining-hour").as_deref(), Some("7"));
    // Kong's key: ratelimit:<route>:<service>:<identifier>:<window start ms>:<period>,
    // the plugin's own scope (a route's plugin: no service).
    let key = format!("ratelimit:{route}:00000000-0000-0000-0000-000000000000:127.0.0.1:{minute}:minute");
    assert_eq!(redis.get_int(&key), 3, "keys: {:?}", redis.keys("ratelimit:*"));
    // A refused request is not counted; the key expires with its window.
    let ttl: i64 = redis
        .command(&["TTL", &key])
        .trim_start_matches(':')
        .trim()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&ttl), "ttl {ttl}");
    // Another node's count is this node's count: one write in Redis shows.
    redis.command(&["SET", &key, "0"]);
    assert_eq!(gw.proxy(get("/counted")).await.status, 200);

    // limit_by header: each tenant its own key, named by the header's value.
    let tenant = |name: &str| strait_e2e::request("GET", "/by-header", &[("x-tenant", name)], "");
    let first = gw.proxy(tenant("acme")).await;
    assert_eq!(first.status, 200);
    assert!(
        first.header("x-ratelimit-limit-minute").is_none(),
        "hide_client_headers"
    );
    assert_eq!(gw.proxy(tenant("acme")).await.status, 429);
    assert_eq!(gw.proxy(tenant("globex")).await.status, 200);
    let key = format!(
        "ratelimit:5e7a0000-0000-4000-8000-000000000011:00000000-0000-0000-0000-000000000000:acme:{minute}:minute"
    );
    assert_eq!(redis.get_int(&key), 1, "keys: {:?}", redis.keys("ratelimit:*"));
}

/// `count` requests split evenly over the gateways, all in flight at once;
/// the statuses.
async fn burst(gateways: &[&Gateway], path: &str, count: usize) -> Vec<u16> {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..count {
        let addr = gateways[i % gateways.len()].proxy_addr();
        let path = path.to_string();
        tasks.spawn(async move {
            match send_h1(addr, get(&path)).await {
                Ok(reply) => reply.status.as_u16(),
                Err(_) => 0,
            }
        });
    }
    let mut statuses = Vec::with_capacity(count);
    while let Some(status) = tasks.join_next().await {
        statuses.push(status.expect("request task"));
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_sharing_redis_never_admit_more_than_the_limit() {
    let redis = RedisServer::start(RedisOptions::default());
    let config = config_with(vec![
        limited_route(
            "5e7a0000-0000-4000-8000-000000000020",
            "realtime",
            json!({ "minute": 100, "limit_by": "ip", "policy": "redis", "redis": redis_record(&redis) }),
        ),
        limited_route(
            "5e7a0000-0000-4000-8000-000000000021",
            "leased",
            json!({ "minute": 100, "limit_by": "ip", "policy": "redis", "sync_rate": 1,
                "redis": redis_record(&redis) }),
        ),
    ]);
    let (a, b) = tokio::join!(
        Gateway::start(GatewayOptions::new()),
        Gateway::start(GatewayOptions::new())
    );
    tokio::join!(a.apply(&config), b.apply(&config));
    for path in ["/realtime", "/leased"] {
        inside_one_minute(20).await;
        let statuses = burst(&[&a, &b], path, 1000).await;
        let passed = statuses.iter().filter(|s| **s == 200).count();
        let refused = statuses.iter().filter(|s| **s == 429).count();
        assert_eq!(
            passed + refused,
            1000,
            "{path}: every request answered 200 or 429: {statuses:?}"
        );
        // Never more than the limit (the documented allowance is 0 for
        // both modes); with every node busy, the whole limit is used.
        assert_eq!(passed, 100, "{path}: {passed} passed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_follows_fault_tolerant_and_counting_resumes() {
    let mut redis = RedisServer::start(RedisOptions::default());
    let limit = |tolerant: bool| {
        json!({ "hour": 1000, "limit_by": "ip", "policy": "redis", "fault_tolerant": tolerant,
            "redis": { "host": "127.0.0.1", "port": redis.port(), "timeout": 500 } })
    };
    let config = config_with(vec![
        limited_route("5e7a0000-0000-4000-8000-000000000030", "tolerant", limit(true)),
        limited_route("5e7a0000-0000-4000-8000-000000000031", "strict", limit(false)),
    ]);
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config).await;
    for path in ["/tolerant", "/strict"] {
        let reply = gw.proxy(get(path)).await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("x-ratelimit-remaining-hour").as_deref(), Some("999"));
    }
    let errors_before = redis_errors(&gw).await;

    redis.kill();
    for _ in 0..20 {
        let started = Instant::now();
        let tolerant = gw.proxy(get("/tolerant")).await;
        assert_eq!(tolerant.status, 200, "fault_tolerant passes: {}", tolerant.text());
        assert!(
            tolerant.header("x-ratelimit-limit-hour").is_none(),
            "no usage, no headers"
        );
        let strict = gw.proxy(get("/strict")).await;
        assert_eq!(
            (strict.status.as_u16(), strict.message().as_deref()),
            (500, Some("An unexpected error occurred"))
        );
        // Refused connections fail at once; nothing waits out a timeout.
        assert!(
            started.elapsed() < Duration::from_millis(1500),
            "{:?}",
            started.elapsed()
        );
    }
    assert!(redis_errors(&gw).await >= errors_before + 40, "failures are counted");
    assert!(gw.log().contains("failed to get usage from Redis"), "and logged");

    // Back (empty: its counts died with it): counting resumes.
    redis.restart();
    eventually(Duration::from_secs(10), "counting resumes", || async {
        let reply = gw.proxy(get("/strict")).await;
        anyhow::ensure!(reply.status == 200, "status {}", reply.status);
        anyhow::ensure!(
            reply.header("x-ratelimit-remaining-hour").as_deref() == Some("999"),
            "remaining {:?}",
            reply.header("x-ratelimit-remaining-hour")
        );
        Ok(())
    })
    .await;
    // Each plugin's connection waits out its own reconnect backoff.
    eventually(
        Duration::from_secs(10),
        "counting resumes on the tolerant route",
        || async {
            let remaining = gw.proxy(get("/tolerant")).await.header("x-ratelimit-remaining-hour");
            anyhow::ensure!(remaining.as_deref() == Some("999"), "remaining {remaining:?}");
            Ok(())
        },
    )
    .await;
}

async fn redis_errors(gw: &Gateway) -> u64 {
    let status = gw.admin_get("/status").await.json();
    status["redis"]["errors_total"]
        .as_u64()
        .expect("redis.errors_total in /status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_redis_times_out_within_its_timeout() {
    // A listener that accepts and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let config = config_with(vec![limited_route(
        "5e7a0000-0000-4000-8000-000000000040",
        "silent",
        json!({ "hour": 10, "policy": "redis", "fault_tolerant": false,
            "redis": { "host": "127.0.0.1", "port": port, "timeout": 300 } }),
    )]);
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config).await;
    let started = Instant::now();
    let reply = gw.proxy(get("/silent")).await;
    assert_eq!(reply.status, 500);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(1500),
        "{took:?}"
    );
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_and_database_are_used() {
    let redis = RedisServer::start(RedisOptions {
        password: Some("default-pw".into()),
        user: Some(("limiter".into(), "user-pw".into())),
        tls: None,
    });
    let record = |extra: Value| {
        let mut record = redis_record(&redis);
        record
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({ "hour": 10, "limit_by": "ip", "policy": "redis", "fault_tolerant": false, "redis": record })
    };
    let config = config_with(vec![
        limited_route(
            "5e7a0000-0000-4000-8000-000000000050",
            "password",
            record(json!({ "password": "default-pw" })),
        ),
        limited_route(
            "5e7a0000-0000-4000-8000-000000000051",
            "user",
            record(json!({ "username": "limiter", "password": "user-pw", "database": 3 })),
        ),
        limited_route(
            "5e7a0000-0000-4000-8000-000000000052",
            "wrong",
            record(json!({ "password": "not-it" })),
        ),
        limited_route("5e7a0000-0000-4000-8000-000000000053", "none", record(json!({}))),
    ]);
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config).await;
    assert_eq!(gw.proxy(get("/password")).await.status, 200);
    assert_eq!(gw.proxy(get("/user")).await.status, 200);
    assert_eq!(
        gw.proxy(get("/wrong")).await.status,
        500,
        "a wrong password is an error"
    );
    assert_eq!(gw.proxy(get("/none")).await.status, 500, "so is none");
    // The user's counts went to database 3, the default user's to 0.
    let in_db = |db: &str, route: &str| {
        let reply = redis.command_in(db, &["KEYS", &format!("ratelimit:{route}:*")]);
        reply.starts_with("*1\r\n")
    };
    assert!(in_db("0", "5e7a0000-0000-4000-8000-000000000050"));
    assert!(!in_db("0", "5e7a0000-0000-4000-8000-000000000051"));
    assert!(in_db("3", "5e7a0000-0000-4000-8000-000000000051"));
    assert!(
        gw.log().contains("WRONGPASS"),
        "the reason is logged: {}",
        gw.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_and_without_verification() {
    let ca = TestCa::new("redis test ca");
    let leaf = ca.issue(&["redis.test"]);
    let redis = RedisServer::start(RedisOptions {
        tls: Some((leaf.cert_pem.clone(), leaf.key_pem.clone())),
        ..RedisOptions::default()
    });
    let dir = strait_e2e::TempDir::new();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap();
    let tls = |name: &str, extra: Value| {
        let mut record = json!({ "host": "127.0.0.1", "port": redis.port(), "ssl": true });
        record
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({ "hour": 10, "limit_by": "ip", "policy": "redis", "fault_tolerant": false, "redis": record,
            "error_message": name })
    };
    let config = config_with(vec![
        limited_route(
            "5e7a0000-0000-4000-8000-000000000060",
            "unverified",
            tls("u", json!({})),
        ),
        limited_route(
            "5e7a0000-0000-4000-8000-000000000061",
            "verified",
            tls("v", json!({ "ssl_verify": true, "server_name": "redis.test" })),
        ),
        limited_route(
            "5e7a0000-0000-4000-8000-000000000062",
            "wrong-name",
            tls("w", json!({ "ssl_verify": true, "server_name": "other.test" })),
        ),
        limited_route(
            "5e7a0000-0000-4000-8000-000000000063",
            "plain",
            json!({ "hour": 10, "policy": "redis", "fault_tolerant": false,
                "redis": { "host": "127.0.0.1", "port": redis.port(), "timeout": 500 } }),
        ),
    ]);
    // The CA is trusted the way every outbound TLS connection's roots are
    // set: SSL_CERT_FILE.
    let gw = Gateway::start(GatewayOptions::new().env("SSL_CERT_FILE", ca_file.to_str().unwrap())).await;
    gw.apply(&config).await;
    let status = |reply: Reply| reply.status.as_u16();
    assert_eq!(status(gw.proxy(get("/unverified")).await), 200);
    let verified = gw.proxy(get("/verified")).await;
    assert_eq!(verified.status, 200);
    assert_eq!(verified.header("x-ratelimit-remaining-hour").as_deref(), Some("9"));
    assert_eq!(status(gw.proxy(get("/wrong-name")).await), 500, "the name is verified");
    assert_eq!(
        status(gw.proxy(get("/plain")).await),
        500,
        "plain text to a TLS port fails"
    );
}

/// Scripts Redis has run (EVALSHA and EVAL calls).
fn script_calls(redis: &RedisServer) -> u64 {
    let info = redis.command(&["INFO", "commandstats"]);
    info.lines()
        .filter(|line| line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:"))
        .filter_map(|line| line.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sync_rate_a_node_asks_redis_for_leases_not_for_each_request() {
    let redis = RedisServer::start(RedisOptions::default());
    let config = config_with(vec![
        limited_route(
            "5e7a0000-0000-4000-8000-000000000070",
            "leased",
            json!({ "hour": 1000, "limit_by": "ip", "policy": "redis", "sync_rate": 10,
                "redis": redis_record(&redis) }),
        ),
        limited_route(
            "5e7a0000-0000-4000-8000-000000000071",
            "realtime",
            json!({ "hour": 1000, "limit_by": "ip", "policy": "redis", "redis": redis_record(&redis) }),
        ),
    ]);
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config).await;
    let before = script_calls(&redis);
    for _ in 0..64 {
        assert_eq!(gw.proxy(get("/realtime")).await.status, 200);
    }
    let realtime = script_calls(&redis) - before;
    // (The first may be an EVALSHA Redis does not know yet, then an EVAL.)
    assert!(
        (64..=65).contains(&realtime),
        "sync_rate -1: one script per request, not {realtime}"
    );
    let before = script_calls(&redis);
    let mut remaining = Vec::new();
    for _ in 0..64 {
        let reply = gw.proxy(get("/leased")).await;
        assert_eq!(reply.status, 200);
        remaining.push(
            reply
                .header("x-ratelimit-remaining-hour")
                .unwrap()
                .parse::<i64>()
                .unwrap(),
        );
    }
    let leased = script_calls(&redis) - before;
    // Leases double while they run out early: 1 + 2 + 4 + ... tokens.
    assert!(leased <= 8, "{leased} scripts for 64 requests");
    assert_eq!(remaining.first(), Some(&999));
    assert_eq!(remaining.last(), Some(&(1000 - 64)), "{remaining:?}");
    // Redis holds what this node used plus what its lease still holds.
    let key = format!(
        "ratelimit:5e7a0000-0000-4000-8000-000000000070:00000000-0000-0000-0000-000000000000:127.0.0.1:{}:hour",
        {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            (now - now % 3600) * 1000
        }
    );
    let counted = redis.get_int(&key);
    assert!((64..=128).contains(&counted), "{counted}");
}
