//! Upstreams with several real target servers: how each algorithm spreads
//! requests, health checks that eject a killed target and re-admit it,
//! retries, the health endpoints and what happens when every target is down.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use strait_e2e::declarative::{config, route, service};
use strait_e2e::{eventually, get, request, Conn, Gateway, GatewayOptions, Upstream, UpstreamKind};
use tokio::io::AsyncReadExt;

const NO_PEER: &str = "failure to get a peer from the ring-balancer";

/// A service `pool` routed at `/pool`, balancing over the upstream `pool`.
fn pool_config(upstream: Value, retries: u64) -> Value {
    let mut svc = service("pool", "http://pool", vec![route("pool", &["/pool"])]);
    svc["retries"] = json!(retries);
    svc["connect_timeout"] = json!(2000);
    let mut cfg = config(vec![svc]);
    cfg["upstreams"] = json!([upstream]);
    cfg
}

fn targets(ups: &[&Upstream], weights: &[u64]) -> Value {
    let list: Vec<Value> = ups
        .iter()
        .zip(weights)
        .map(|(up, weight)| json!({ "target": up.addr().to_string(), "weight": weight }))
        .collect();
    json!(list)
}

/// The target that answered, from the `Host` Strait sent it (`127.0.0.1:<port>`).
fn served_by(reply: &strait_e2e::Reply) -> String {
    reply.json()["headers"]["host"].as_str().unwrap_or_default().to_string()
}

/// `total` GETs of `path` over `connections` keep-alive connections at
/// once; the statuses and, per target port, how many it answered.
async fn load(gw: &Gateway, path: &str, total: usize, connections: usize) -> (Vec<u16>, HashMap<String, usize>) {
    let addr = gw.proxy_addr();
    let mut tasks = Vec::new();
    for worker in 0..connections {
        let path = path.to_string();
        let share = total / connections + usize::from(worker < total % connections);
        tasks.push(tokio::spawn(async move {
            let mut statuses = Vec::with_capacity(share);
            let mut by = HashMap::new();
            let mut conn = Conn::h1(addr).await.expect("connect");
            for _ in 0..share {
                let reply = match conn.send(get(&path)).await {
                    Ok(reply) => reply,
                    Err(_) => {
                        conn = Conn::h1(addr).await.expect("reconnect");
                        conn.send(get(&path)).await.expect("request")
                    }
                };
                if reply.status == 200 {
                    *by.entry(served_by(&reply)).or_insert(0) += 1;
                }
                statuses.push(reply.status.as_u16());
            }
            (statuses, by)
        }));
    }
    let mut statuses = Vec::new();
    let mut by = HashMap::new();
    for task in tasks {
        let (s, b) = task.await.expect("load task");
        statuses.extend(s);
        for (k, v) in b {
            *by.entry(k).or_insert(0) += v;
        }
    }
    (statuses, by)
}

fn host(up: &Upstream) -> String {
    up.addr().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_follows_weights_within_5_percent_over_10k_requests() {
    let ups = [
        Upstream::start(UpstreamKind::Http1).await,
        Upstream::start(UpstreamKind::Http1).await,
        Upstream::start(UpstreamKind::Http1).await,
    ];
    let gw = Gateway::start(GatewayOptions::new()).await;
    let weights = [50, 30, 20];
    let upstream = json!({ "name": "pool", "targets": targets(&[&ups[0], &ups[1], &ups[2]], &weights) });
    gw.apply(&pool_config(upstream, 0)).await;
    let (statuses, by) = load(&gw, "/pool/echo", 10_000, 8).await;
    assert!(statuses.iter().all(|s| *s == 200));
    for (up, weight) in ups.iter().zip(weights) {
        let share = by.get(&host(up)).copied().unwrap_or(0) as f64 / 10_000.0;
        let expected = weight as f64 / 100.0;
        assert!(
            ((share - expected) / expected).abs() <= 0.05,
            "weight {weight}: share {share:.4} against {expected}: {by:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_connections_splits_evenly_and_starves_a_slow_target() {
    let ups = [
        Upstream::start(UpstreamKind::Http1).await,
        Upstream::start(UpstreamKind::Http1).await,
    ];
    let gw = Gateway::start(GatewayOptions::new()).await;
    let upstream = json!({ "name": "pool", "algorithm": "least-connections",
        "targets": targets(&[&ups[0], &ups[1]], &[100, 100]) });
    gw.apply(&pool_config(upstream, 0)).await;
    let (_, by) = load(&gw, "/pool/echo", 2000, 8).await;
    let first = by.get(&host(&ups[0])).copied().unwrap_or(0) as f64 / 2000.0;
    assert!((0.4..=0.6).contains(&first), "equal targets: {by:?}");

    ups[1].set_delay(Duration::from_millis(40));
    let (statuses, by) = load(&gw, "/pool/echo", 800, 8).await;
    assert!(statuses.iter().all(|s| *s == 200));
    let slow = by.get(&host(&ups[1])).copied().unwrap_or(0) as f64 / 800.0;
    assert!(
        slow < 0.2,
        "the slow target keeps requests in flight and gets few: {by:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_sends_most_requests_to_the_fastest_target() {
    let ups = [
        Upstream::start(UpstreamKind::Http1).await,
        Upstream::start(UpstreamKind::Http1).await,
    ];
    ups[0].set_delay(Duration::from_millis(30));
    let gw = Gateway::start(GatewayOptions::new()).await;
    let upstream = json!({ "name": "pool", "algorithm": "latency",
        "targets": targets(&[&ups[0], &ups[1]], &[100, 100]) });
    gw.apply(&pool_config(upstream, 0)).await;
    let (statuses, by) = load(&gw, "/pool/echo", 600, 4).await;
    assert!(statuses.iter().all(|s| *s == 200));
    let slow = by.get(&host(&ups[0])).copied().unwrap_or(0) as f64 / 600.0;
    assert!(slow < 0.2, "slow target share {slow}: {by:?}");
}

/// Which target each of `users` lands on, hashing on `x-user`.
async fn placement(gw: &Gateway, users: usize) -> Vec<String> {
    let mut conn = Conn::h1(gw.proxy_addr()).await.expect("connect");
    let mut out = Vec::with_capacity(users);
    for user in 0..users {
        let reply = conn
            .send(request("GET", "/pool/echo", &[("x-user", &format!("user-{user}"))], ""))
            .await
            .expect("request");
        assert_eq!(reply.status, 200, "{}", reply.text());
        out.push(served_by(&reply));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_hashing_keeps_keys_and_moves_about_one_in_n_when_a_target_joins() {
    let ups = [
        Upstream::start(UpstreamKind::Http1).await,
        Upstream::start(UpstreamKind::Http1).await,
        Upstream::start(UpstreamKind::Http1).await,
        Upstream::start(UpstreamKind::Http1).await,
        Upstream::start(UpstreamKind::Http1).await,
    ];
    let gw = Gateway::start(GatewayOptions::new()).await;
    let upstream = json!({ "name": "pool", "hash_on": "header", "hash_on_header": "x-user",
        "targets": targets(&[&ups[0], &ups[1], &ups[2], &ups[3]], &[100, 100, 100, 100]) });
    gw.apply(&pool_config(upstream, 0)).await;
    let first = placement(&gw, 400).await;
    assert_eq!(placement(&gw, 400).await, first, "the same key reaches the same target");
    for up in &ups[..4] {
        let share = first.iter().filter(|t| **t == host(up)).count();
        assert!(share > 40, "{} got {share} of 400 keys", host(up));
    }

    let added = gw
        .admin(
            "POST",
            "/upstreams/pool/targets",
            &[("content-type", "application/json")],
            json!({ "target": host(&ups[4]) }).to_string(),
        )
        .await;
    assert_eq!(added.status, 201, "{}", added.text());
    let after = placement(&gw, 400).await;
    let moved: Vec<_> = first.iter().zip(&after).filter(|(a, b)| a != b).collect();
    assert!(
        moved.iter().all(|(_, to)| **to == host(&ups[4])),
        "keys only move to the new target"
    );
    let share = moved.len() as f64 / 400.0;
    assert!((0.1..=0.3).contains(&share), "{share} of keys moved (1/5 expected)");
}

/// Health checks as one would set them: passive ejects on the first TCP
/// failure or timeout, active probes unhealthy targets every 0.2 s and
/// re-admits one after two good answers.
fn checked_pool(ups: &[&Upstream]) -> Value {
    json!({ "name": "pool", "targets": targets(ups, &vec![100; ups.len()]),
        "healthchecks": {
            "passive": { "unhealthy": { "tcp_failures": 1, "timeouts": 1, "http_failures": 3 } },
            "active": { "type": "http", "http_path": "/status/200", "timeout": 1,
                "healthy": { "interval": 0, "successes": 2 },
                "unhealthy": { "interval": 0.2, "tcp_failures": 1 } }
        } })
}

async fn health_of(gw: &Gateway) -> HashMap<String, String> {
    let body = gw.admin_get("/upstreams/pool/health").await.json();
    body["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|t| {
            (
                t["target"].as_str().unwrap_or_default().to_string(),
                t["health"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_target_is_ejected_by_passive_checks_and_readmitted_by_active_checks() {
    let mut ups = [
        Upstream::start(UpstreamKind::Http1).await,
        Upstream::start(UpstreamKind::Http1).await,
        Upstream::start(UpstreamKind::Http1).await,
    ];
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&pool_config(checked_pool(&[&ups[0], &ups[1], &ups[2]]), 3))
        .await;
    let health = health_of(&gw).await;
    assert!(health.values().all(|h| h == "HEALTHY"), "{health:?}");

    let victim = host(&ups[1]);
    ups[1].kill();
    // Retries move every request on to a live target; the failure ejects the victim.
    let (statuses, _) = load(&gw, "/pool/echo", 300, 4).await;
    assert!(statuses.iter().all(|s| *s == 200), "no client sees the kill");
    assert_eq!(health_of(&gw).await[&victim], "UNHEALTHY");
    let (_, by) = load(&gw, "/pool/echo", 300, 4).await;
    assert_eq!(by.get(&victim), None, "an unhealthy target gets nothing: {by:?}");

    ups[1].revive().await;
    eventually(Duration::from_secs(5), "active checks re-admit the target", || {
        let gw = &gw;
        let victim = victim.clone();
        async move {
            let health = health_of(gw).await;
            anyhow::ensure!(health[&victim] == "HEALTHY", "{health:?}");
            Ok(())
        }
    })
    .await;
    let (statuses, by) = load(&gw, "/pool/echo", 300, 4).await;
    assert!(statuses.iter().all(|s| *s == 200));
    assert!(by.get(&victim).copied().unwrap_or(0) > 50, "back in rotation: {by:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_endpoints_mark_targets_and_all_down_is_503() {
    let ups = [
        Upstream::start(UpstreamKind::Http1).await,
        Upstream::start(UpstreamKind::Http1).await,
    ];
    let gw = Gateway::start(GatewayOptions::new()).await;
    let upstream = json!({ "name": "pool", "targets": targets(&[&ups[0], &ups[1]], &[100, 100]) });
    gw.apply(&pool_config(upstream, 1)).await;

    let body = gw.admin_get("/upstreams/pool/health").await.json();
    assert_eq!(body["data"][0]["health"], "HEALTHCHECKS_OFF", "{body}");
    assert_eq!(body["data"][0]["data"]["addresses"][0]["health"], "HEALTHCHECKS_OFF");
    assert!(body["node_id"].is_string());
    let balancer = gw.admin_get("/upstreams/pool/health?balancer_health=1").await.json();
    assert_eq!(balancer["data"]["health"], "HEALTHCHECKS_OFF", "{balancer}");
    assert_eq!(balancer["data"]["balancer_health"], "HEALTHY");

    let put = |path: String| {
        let gw = &gw;
        async move { gw.admin("PUT", &path, &[], "").await }
    };
    let first = host(&ups[0]);
    assert_eq!(
        put(format!("/upstreams/pool/targets/{first}/unhealthy")).await.status,
        204
    );
    let (_, by) = load(&gw, "/pool/echo", 50, 2).await;
    assert_eq!(by.get(&first), None, "{by:?}");
    assert_eq!(health_of(&gw).await[&first], "UNHEALTHY");

    let second = host(&ups[1]);
    let with_address = format!("/upstreams/pool/targets/{second}/{second}/unhealthy");
    assert_eq!(put(with_address).await.status, 204);
    let reply = gw.proxy(get("/pool/echo")).await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert_eq!(reply.message().as_deref(), Some(NO_PEER));
    let balancer = gw.admin_get("/upstreams/pool/health?balancer_health=1").await.json();
    assert_eq!(balancer["data"]["balancer_health"], "UNHEALTHY", "{balancer}");

    assert_eq!(
        put(format!("/upstreams/pool/targets/{second}/healthy")).await.status,
        204
    );
    assert_eq!(gw.proxy(get("/pool/echo")).await.status, 200);

    // Errors name what was wrong.
    assert_eq!(
        put("/upstreams/nope/targets/1.2.3.4:80/healthy".into()).await.status,
        404
    );
    assert_eq!(
        put("/upstreams/pool/targets/1.2.3.4:80/healthy".into()).await.status,
        404
    );
    let wrong = put(format!("/upstreams/pool/targets/{second}/10.9.9.9:1/healthy")).await;
    assert_eq!(wrong.status, 400, "{}", wrong.text());
    assert_eq!(gw.admin_get("/upstreams/nope/health").await.status, 404);
    let get_mark = gw
        .admin("GET", &format!("/upstreams/pool/targets/{second}/healthy"), &[], "")
        .await;
    assert_eq!(get_mark.status, 405);
}

/// A server that reads a request and closes the connection without answering.
async fn slammer() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = tcp.read(&mut buf).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_before_the_response_is_retried_only_for_idempotent_requests() {
    let good = Upstream::start(UpstreamKind::Http1).await;
    let bad = slammer().await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let upstream = json!({ "name": "pool", "targets": [
        { "target": bad.to_string() }, { "target": host(&good) } ] });
    gw.apply(&pool_config(upstream, 2)).await;
    for i in 0..10 {
        let reply = gw.proxy(get(&format!("/pool/echo?i={i}"))).await;
        assert_eq!(reply.status, 200, "GET {i}: {}", reply.text());
    }
    assert_eq!(good.hits(), 10, "each GET reached the good target once");
    // An idempotent request whose body was buffered (request_buffering, Kong's default) is
    // sent again whole.
    for i in 0..4 {
        let reply = gw
            .proxy(request("PUT", &format!("/pool/echo?put={i}"), &[], "the body"))
            .await;
        assert_eq!(reply.status, 200, "PUT {i}: {}", reply.text());
        assert_eq!(reply.json()["body"], "the body");
    }
    let mut failed = 0;
    for i in 0..10 {
        let reply = gw
            .proxy(request("POST", &format!("/pool/echo?i={i}"), &[], "payload"))
            .await;
        if reply.status == 502 {
            failed += 1;
        } else {
            assert_eq!(reply.status, 200);
        }
    }
    assert!(failed > 0, "a POST that reached the upstream is not sent twice");
}

/// A DNS server on loopback: every A query is answered with `127.0.0.<last>` and a 1 s TTL,
/// except names starting with `nx`, which do not exist. An SRV query for a name starting with
/// `_` is answered with `backend.strait.test` and port `srv_port`; other SRV queries have no
/// answer. Counts the queries.
async fn test_resolver(
    last: std::sync::Arc<std::sync::atomic::AtomicU8>,
    srv_port: u16,
) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    let addr = socket.local_addr().expect("addr");
    let queries = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = queries.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while let Ok((n, peer)) = socket.recv_from(&mut buf).await {
            counted.fetch_add(1, Ordering::SeqCst);
            let mut reply = buf[..n].to_vec();
            reply[2] |= 0x80;
            let qtype = u16::from_be_bytes([buf[n - 4], buf[n - 3]]);
            if buf[13..15] == *b"nx" {
                reply[3] = 3;
            } else if qtype == 33 && buf[13] == b'_' {
                reply[7] = 1;
                let target: &[u8] = b"\x07backend\x06strait\x04test\x00";
                reply.extend_from_slice(&[0xc0, 12, 0, 33, 0, 1, 0, 0, 0, 1]);
                reply.extend_from_slice(&(6 + target.len() as u16).to_be_bytes());
                reply.extend_from_slice(&[0, 1, 0, 1]);
                reply.extend_from_slice(&srv_port.to_be_bytes());
                reply.extend_from_slice(target);
            } else if qtype == 33 {
                // No SRV records: an empty answer.
            } else {
                reply[7] = 1;
                reply.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 127, 0, 0]);
                reply.push(last.load(Ordering::SeqCst));
            }
            let _ = socket.send_to(&reply, peer).await;
        }
    });
    (addr, queries)
}

/// A target named by a host name moves when its record changes: Strait uses the answer for its
/// TTL (1 s here), then asks again; a name that does not exist is a 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_answers_are_used_for_their_ttl_and_then_resolved_again() {
    use std::sync::atomic::Ordering;
    let first = Upstream::start(UpstreamKind::Http1).await;
    let port = first.port();
    let second = Upstream::start_at(SocketAddr::from(([127, 0, 0, 2], port))).await;
    let last = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(1));
    let (resolver, queries) = test_resolver(last.clone(), port).await;
    let gw = Gateway::start(GatewayOptions::new().setting("dns_resolver", &resolver.to_string())).await;
    let upstream = json!({ "name": "pool", "targets": [{ "target": format!("backend.strait.test:{port}") }] });
    let mut cfg = pool_config(upstream, 0);
    let mut direct = service(
        "direct",
        &format!("http://svc.strait.test:{port}"),
        vec![route("d", &["/direct"])],
    );
    direct["retries"] = json!(0);
    let missing = service("missing", "http://nx.strait.test", vec![route("m", &["/missing"])]);
    // An SRV name: the record's host and port replace the service's (port 1 here).
    let by_srv = service(
        "by-srv",
        "http://_http._tcp.svc.strait.test:1",
        vec![route("v", &["/srv"])],
    );
    cfg["services"]
        .as_array_mut()
        .expect("services")
        .extend([direct, missing, by_srv]);
    gw.apply(&cfg).await;

    for path in ["/pool/echo", "/direct/echo", "/srv/echo"] {
        for _ in 0..10 {
            let reply = gw.proxy(get(path)).await;
            assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        }
    }
    assert_eq!(first.hits(), 30);
    // Kong's dns_order (LAST,SRV,A,CNAME): SRV then A for each of the two plain names, and
    // SRV for the service name plus SRV then A for its record's host (asked already).
    assert!(
        queries.load(Ordering::SeqCst) <= 6,
        "a few queries per name while the answers are fresh, not one per request: {}",
        queries.load(Ordering::SeqCst)
    );

    last.store(2, Ordering::SeqCst);
    eventually(Duration::from_secs(5), "both names move to 127.0.0.2", || {
        let gw = &gw;
        let second = &second;
        async move {
            let before = second.hits();
            gw.proxy(get("/pool/echo")).await;
            gw.proxy(get("/direct/echo")).await;
            anyhow::ensure!(second.hits() == before + 2, "still on the old address");
            Ok(())
        }
    })
    .await;

    let reply = gw.proxy(get("/missing")).await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert_eq!(reply.message().as_deref(), Some("name resolution failed"));
}

/// Kong's `upstream_keepalive_*`: a connection carries at most `max_requests` requests, an idle
/// one is closed after `idle_timeout`, and a pool size of 0 keeps none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_keepalive_limits_requests_idle_time_and_pool_size() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let options = GatewayOptions::new()
        .setting("upstream_keepalive_max_requests", "3")
        .setting("upstream_keepalive_idle_timeout", "1")
        .setting("worker_threads", "1");
    let gw = Gateway::start(options).await;
    let mut svc = service("kept", &up.url("http"), vec![route("k", &["/kept"])]);
    svc["retries"] = json!(0);
    gw.apply(&config(vec![svc])).await;
    let before = up.connections_accepted();
    let mut conn = Conn::h1(gw.proxy_addr()).await.expect("connect");
    for _ in 0..10 {
        assert_eq!(conn.send(get("/kept/echo")).await.expect("request").status, 200);
    }
    assert_eq!(
        up.connections_accepted() - before,
        4,
        "10 requests, at most 3 per connection"
    );
    assert_eq!(up.connections_open(), 1, "the last connection idles in the pool");
    let idle_since = std::time::Instant::now();
    eventually(Duration::from_secs(4), "idle connections are closed", || {
        let up = &up;
        async move {
            anyhow::ensure!(up.connections_open() == 0, "{} open", up.connections_open());
            Ok(())
        }
    })
    .await;
    assert!(
        idle_since.elapsed() >= Duration::from_millis(900),
        "{:?}",
        idle_since.elapsed()
    );

    let none = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new().setting("upstream_keepalive_pool_size", "0")).await;
    gw.apply(&config(vec![service(
        "fresh",
        &none.url("http"),
        vec![route("f", &["/fresh"])],
    )]))
    .await;
    let before = none.connections_accepted();
    let mut conn = Conn::h1(gw.proxy_addr()).await.expect("connect");
    for _ in 0..4 {
        assert_eq!(conn.send(get("/fresh/echo")).await.expect("request").status, 200);
    }
    assert_eq!(none.connections_accepted() - before, 4, "a connection per request");
}

/// Active checks of `type: grpc` speak the gRPC health-checking protocol
/// (`grpc.health.v1.Health/Check`): NOT_SERVING takes the target out, SERVING brings it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_checks_follow_the_serving_status() {
    let up = Upstream::start(UpstreamKind::H2c).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let upstream = json!({ "name": "pool", "targets": [{ "target": host(&up) }],
        "healthchecks": { "active": { "type": "grpc", "timeout": 1,
            "healthy": { "interval": 0.2, "successes": 1 },
            "unhealthy": { "interval": 0.2, "http_failures": 1 } } } });
    let mut svc = service("pool", "grpc://pool", vec![]);
    svc["routes"] = json!([{ "name": "g", "paths": ["/g"], "protocols": ["grpc"] }]);
    let mut cfg = config(vec![svc]);
    cfg["upstreams"] = json!([upstream]);
    gw.apply(&cfg).await;
    let expect = |state: &'static str| {
        let gw = &gw;
        let target = host(&up);
        async move {
            eventually(Duration::from_secs(5), state, || {
                let target = target.clone();
                async move {
                    let health = health_of(gw).await;
                    anyhow::ensure!(health[&target] == state, "{health:?}");
                    Ok(())
                }
            })
            .await
        }
    };
    expect("HEALTHY").await;
    up.set_grpc_serving(false);
    expect("UNHEALTHY").await;
    up.set_grpc_serving(true);
    expect("HEALTHY").await;
}
