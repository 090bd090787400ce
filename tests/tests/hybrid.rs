//! Hybrid mode with real processes: a control plane (`role =
//! control_plane`) and data planes (`role = data_plane`) over mutual TLS,
//! in both `cluster_mtls` modes. A route created on the control plane is
//! proxied by every data plane within a second; a data plane with the
//! wrong certificate gets nothing; data planes keep serving (and restart
//! serving) their cached configuration while the control plane is down,
//! then catch up by deltas; one that missed more versions than the change
//! log keeps gets the whole configuration; data planes refuse Admin API
//! writes; `/clustering/data-planes` lists them as they are.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strait_e2e::client::get;
use strait_e2e::tls::{LeafCert, TestCa};
use strait_e2e::upstream::{Upstream, UpstreamKind};
use strait_e2e::{eventually, free_port, Gateway, GatewayOptions, Reply};

/// PEM files in a directory of the test's own.
struct Files(PathBuf);

impl Files {
    fn new() -> Files {
        let dir = std::env::temp_dir().join(format!("strait-hybrid-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Files(dir)
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write a PEM file");
        path.display().to_string()
    }

    /// `cluster_cert` and `cluster_cert_key` settings for `leaf`.
    fn cert(&self, name: &str, leaf: &LeafCert) -> Vec<(&'static str, String)> {
        vec![
            ("cluster_cert", self.write(&format!("{name}.crt"), &leaf.cert_pem)),
            ("cluster_cert_key", self.write(&format!("{name}.key"), &leaf.key_pem)),
        ]
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn with(options: GatewayOptions, settings: &[(&'static str, String)]) -> GatewayOptions {
    settings
        .iter()
        .fold(options, |options, (key, value)| options.setting(key, value))
}

fn control_plane(port: u16, settings: &[(&'static str, String)]) -> GatewayOptions {
    with(
        GatewayOptions::new()
            .setting("role", "control_plane")
            .setting("cluster_listen", &format!("127.0.0.1:{port}")),
        settings,
    )
}

fn data_plane(port: u16, settings: &[(&'static str, String)]) -> GatewayOptions {
    with(
        GatewayOptions::new()
            .setting("role", "data_plane")
            .setting("database", "off")
            .setting("cluster_control_plane", &format!("127.0.0.1:{port}")),
        settings,
    )
}

async fn post(node: &Gateway, path: &str, body: Value) -> Reply {
    post_within(node, path, body, strait_e2e::client::REQUEST_TIMEOUT).await
}

/// [`post`] with a wait of the caller's (a bulk configuration, which a
/// debug build takes seconds to parse, store and compile).
async fn post_within(node: &Gateway, path: &str, body: Value, wait: Duration) -> Reply {
    let request = strait_e2e::client::request("POST", path, &[("content-type", "application/json")], body.to_string());
    let reply = strait_e2e::Conn::h1(node.admin_addr())
        .await
        .expect("connect to the admin API")
        .send_within(request, wait)
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e:#}\n{}", node.log_tail()));
    assert_eq!(reply.status, 201, "POST {path}: {}", reply.text());
    reply
}

/// The control plane's data planes, by id.
async fn data_planes(cp: &Gateway) -> Vec<Value> {
    let reply = cp.admin_get("/clustering/data-planes").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()["data"].as_array().expect("data").clone()
}

async fn config_version(node: &Gateway) -> u64 {
    node.admin_get("/status").await.json()["config_version"]
        .as_u64()
        .expect("config_version")
}

/// Until `count` data planes are connected and have acknowledged the
/// control plane's running version.
async fn until_in_sync(cp: &Gateway, count: usize) -> Vec<Value> {
    let version = config_version(cp).await;
    eventually(Duration::from_secs(5), "the data planes to acknowledge", || async {
        let planes = data_planes(cp).await;
        let synced = planes
            .iter()
            .filter(|p| p["connected"] == true && p["config_version"] == version && p["sync_status"] == "normal")
            .count();
        match synced == count {
            true => Ok(planes),
            false => Err(anyhow::anyhow!("{synced} of {count} in sync at {version}: {planes:?}")),
        }
    })
    .await
}

fn bytes_sent(planes: &[Value], id: &str) -> u64 {
    planes
        .iter()
        .find(|p| p["id"] == id)
        .and_then(|p| p["bytes_sent"].as_u64())
        .expect("the data plane is listed")
}

async fn node_id(node: &Gateway) -> String {
    node.admin_get("/").await.json()["node_id"]
        .as_str()
        .expect("node_id")
        .to_string()
}

/// A service on `origin` with a route `name` on `path`, on the control plane.
async fn route(cp: &Gateway, name: &str, path: &str) {
    post(cp, "/services/orders/routes", json!({ "name": name, "paths": [path] })).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_mtls_control_plane_and_two_data_planes() {
    let files = Files::new();
    let shared = LeafCert::self_signed(&["kong_clustering"]);
    let cert = files.cert("cluster", &shared);
    let port = free_port();
    let mut cp = Gateway::start(control_plane(port, &cert)).await;
    let origin = Upstream::start(UpstreamKind::Http1).await;
    // 300 consumers make the whole configuration several times a route's
    // size even deflated: a delta of one route is easy to tell from it.
    let consumers: Vec<Value> = (0..300)
        .map(|i| json!({ "username": format!("consumer-{i:03}"), "custom_id": format!("c{i}") }))
        .collect();
    let config = json!({
        "_format_version": "3.0",
        "services": [{
            "name": "orders",
            "url": origin.url("http"),
            "routes": [{ "name": "r1", "paths": ["/orders"] }]
        }],
        "consumers": consumers,
    });
    post(&cp, "/config", config).await;

    let mut a = Gateway::start(data_plane(port, &cert)).await;
    let b = Gateway::start(data_plane(port, &cert)).await;
    a.until_proxied("/orders", 200, Duration::from_secs(5)).await;
    b.until_proxied("/orders", 200, Duration::from_secs(5)).await;
    let (id_a, id_b) = (node_id(&a).await, node_id(&b).await);
    let planes = until_in_sync(&cp, 2).await;
    let full = bytes_sent(&planes, &id_a);
    // Deflated, the whole configuration of 300 consumers is about 10 KB.
    assert!(full > 5_000, "the first sync is the whole configuration: {full} bytes");

    // A route created on the control plane is proxied by both within 1 s.
    let written = Instant::now();
    route(&cp, "r2", "/v2").await;
    a.until_proxied("/v2", 200, Duration::from_secs(1)).await;
    b.until_proxied("/v2", 200, Duration::from_secs(1)).await;
    let took = written.elapsed();
    eprintln!("a route on the control plane was proxied by both data planes after {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    let planes = until_in_sync(&cp, 2).await;
    let delta = bytes_sent(&planes, &id_b) - full;
    assert!(
        delta < 2_000 && delta * 5 < full,
        "one route was sent as a delta of {delta} bytes (the whole configuration: {full})"
    );
    let listed: Vec<&str> = planes.iter().filter_map(|p| p["id"].as_str()).collect();
    assert!(
        listed.contains(&id_a.as_str()) && listed.contains(&id_b.as_str()),
        "{planes:?}"
    );
    for plane in &planes {
        assert_eq!(plane["ip"], "127.0.0.1");
        assert!(plane["last_seen"].as_i64().unwrap_or(0) > 0 && plane["ttl"].as_i64().unwrap_or(0) > 0);
        assert!(!plane["hostname"].as_str().unwrap_or("").is_empty());
    }
    let status = cp.admin_get("/clustering/status").await.json();
    assert!(status.get(&id_a).is_some() && status.get(&id_b).is_some(), "{status}");

    // Data planes: reads from their cache, writes refused with the reason.
    assert_eq!(a.admin_get("/routes/r2").await.status, 200);
    let refused = a
        .admin(
            "POST",
            "/services",
            &[("content-type", "application/json")],
            r#"{"name":"local","url":"http://127.0.0.1:1"}"#,
        )
        .await;
    assert_eq!(refused.status, 405, "{}", refused.text());
    assert!(refused.json()["message"].as_str().unwrap_or("").contains("data plane"));
    assert_eq!(a.admin("DELETE", "/routes/r2", &[], "").await.status, 405);
    assert_eq!(
        a.admin_get("/clustering/data-planes").await.status,
        400,
        "only a control plane lists data planes"
    );
    let link = a.admin_get("/status").await.json();
    assert_eq!(link["clustering"]["connected"], true, "{link}");
    assert_eq!(link["clustering"]["control_plane"], format!("127.0.0.1:{port}"));

    // A data plane with another certificate gets nothing.
    let stranger = LeafCert::self_signed(&["kong_clustering"]);
    let c = Gateway::start(data_plane(port, &files.cert("stranger", &stranger))).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        c.proxy(get("/orders")).await.status,
        404,
        "the stranger got a configuration"
    );
    assert_eq!(
        c.admin_get("/status/ready").await.status,
        503,
        "a data plane without a configuration is not ready"
    );
    assert_eq!(a.admin_get("/status/ready").await.status, 200);
    let link = c.admin_get("/status").await.json();
    assert_eq!(link["clustering"]["connected"], false, "{link}");
    assert!(link["clustering"]["last_error"].is_string(), "{link}");
    assert_eq!(data_planes(&cp).await.len(), 2, "the stranger is not listed");

    // The control plane goes away: both keep serving; a data plane
    // restarted meanwhile serves its cache from the start.
    cp.kill9();
    assert_eq!(b.proxy(get("/v2")).await.status, 200);
    a.restart().await;
    assert_eq!(a.proxy(get("/v2")).await.status, 200, "the cache after a restart");
    assert_eq!(a.proxy(get("/orders")).await.status, 200);
    assert_eq!(a.admin_get("/status/ready").await.status, 200, "ready on its cache");
    let link = a.admin_get("/status").await.json();
    assert_eq!(link["clustering"]["connected"], false, "{link}");

    // Back: both reconnect on their own, and catch up by a delta.
    cp.restart().await;
    let planes = until_in_sync(&cp, 2).await;
    let before = bytes_sent(&planes, &id_a);
    route(&cp, "r3", "/v3").await;
    a.until_proxied("/v3", 200, Duration::from_secs(1)).await;
    b.until_proxied("/v3", 200, Duration::from_secs(1)).await;
    let planes = until_in_sync(&cp, 2).await;
    let caught_up = bytes_sent(&planes, &id_a) - before;
    assert!(
        caught_up < 2_000 && caught_up * 5 < full,
        "after the restart, a delta of {caught_up} bytes (the whole configuration: {full})"
    );

    // Deletes travel too.
    assert_eq!(cp.admin("DELETE", "/routes/r1", &[], "").await.status, 204);
    a.until_proxied("/orders", 404, Duration::from_secs(1)).await;
    b.until_proxied("/orders", 404, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pki_mtls_and_a_data_plane_behind_the_change_log_gets_everything() {
    let files = Files::new();
    let ca = TestCa::new("Strait cluster CA");
    let ca_file = files.write("ca.crt", &ca.cert_pem());
    let trust = |settings: Vec<(&'static str, String)>| {
        let mut settings = settings;
        settings.push(("cluster_mtls", "pki".into()));
        settings.push(("cluster_ca_cert", ca_file.clone()));
        settings.push(("cluster_server_name", "cp.cluster.test".into()));
        settings
    };
    let port = free_port();
    let mut cp_settings = trust(files.cert("cp", &ca.issue(&["cp.cluster.test"])));
    cp_settings.push(("config_change_log_size", "3".into()));
    let cp = Gateway::start(control_plane(port, &cp_settings)).await;
    let origin = Upstream::start(UpstreamKind::Http1).await;
    post(&cp, "/services", json!({ "name": "orders", "url": origin.url("http") })).await;
    route(&cp, "r0", "/r0").await;

    let mut a = Gateway::start(data_plane(port, &trust(files.cert("dp-a", &ca.issue(&["dp-a"]))))).await;
    a.until_proxied("/r0", 200, Duration::from_secs(5)).await;

    // Signed by another CA: refused.
    let other = TestCa::new("Another CA");
    let stranger = Gateway::start(data_plane(port, &trust(files.cert("dp-x", &other.issue(&["dp-x"]))))).await;
    // A data plane that trusts the CA but expects another name for the
    // control plane refuses it.
    let mut misnamed = trust(files.cert("dp-y", &ca.issue(&["dp-y"])));
    misnamed.retain(|(key, _)| *key != "cluster_server_name");
    misnamed.push(("cluster_server_name", "elsewhere.test".into()));
    let misnamed = Gateway::start(data_plane(port, &misnamed)).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for node in [&stranger, &misnamed] {
        assert_eq!(node.proxy(get("/r0")).await.status, 404, "{}", node.log_tail());
    }
    assert_eq!(data_planes(&cp).await.len(), 1);

    // Down while six versions pass (the control plane keeps three): back,
    // it gets the whole configuration.
    a.kill9();
    for n in 1..=6 {
        route(&cp, &format!("r{n}"), &format!("/r{n}")).await;
    }
    assert_eq!(cp.admin("DELETE", "/routes/r0", &[], "").await.status, 204);
    a.restart().await;
    for n in 1..=6 {
        a.until_proxied(&format!("/r{n}"), 200, Duration::from_secs(5)).await;
    }
    a.until_proxied("/r0", 404, Duration::from_secs(1)).await;
    until_in_sync(&cp, 1).await;
    assert!(
        a.log().contains("configuration from the control plane applied (whole)"),
        "{}",
        a.log_tail()
    );
}

/// The 10k/10k set (10,000 routes, 10,000 consumers with key-auth
/// credentials) posted to the control plane reaches both data planes while
/// clients keep requesting on them; not one request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_config_push_reaches_data_planes_with_no_failed_request() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use strait_e2e::Conn;

    let files = Files::new();
    let cert = files.cert("cluster", &LeafCert::self_signed(&["kong_clustering"]));
    let port = free_port();
    // The control plane on the embedded store in both passes of the suite:
    // the property here is the data planes' (the PostgreSQL control plane's
    // writes are the other tests'), and a debug build takes longer than the
    // harness's request timeout to write the set to PostgreSQL.
    let cp = Gateway::start(control_plane(port, &cert).setting("database", "embedded")).await;
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let small = json!({
        "_format_version": "3.0",
        "services": [{ "name": "live", "url": origin.url("http"), "routes": [{ "name": "live", "paths": ["/live"] }] }],
    });
    post(&cp, "/config", small.clone()).await;
    let dps = [
        Gateway::start(data_plane(port, &cert)).await,
        Gateway::start(data_plane(port, &cert)).await,
    ];
    for dp in &dps {
        dp.until_proxied("/live", 200, Duration::from_secs(5)).await;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut clients = Vec::new();
    for dp in &dps {
        for _ in 0..2 {
            let (addr, stop, ok, failures) = (dp.proxy_addr(), stop.clone(), ok.clone(), failures.clone());
            clients.push(tokio::spawn(async move {
                let mut conn = Conn::h1(addr).await.expect("connect");
                while !stop.load(Ordering::SeqCst) {
                    // Paced, so that on two cores the control plane (a
                    // debug build) still gets the CPU to take the push.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    match conn.send(get("/live/echo")).await {
                        Ok(reply) if reply.status == 200 => {
                            ok.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(reply) => failures.lock().unwrap().push(format!("{addr}: {}", reply.status)),
                        Err(error) => {
                            failures.lock().unwrap().push(format!("{addr}: {error:#}"));
                            conn = Conn::h1(addr).await.expect("reconnect");
                        }
                    }
                }
            }));
        }
    }

    let mut big = small;
    let routes: Vec<Value> = std::iter::once(json!({ "name": "live", "paths": ["/live"] }))
        .chain((0..10_000).map(|i| json!({ "name": format!("r{i}"), "paths": [format!("/r{i}")] })))
        .collect();
    big["services"][0]["routes"] = Value::Array(routes);
    big["consumers"] = (0..10_000)
        .map(|i| json!({ "username": format!("user-{i}"), "keyauth_credentials": [{ "key": format!("key-{i}") }] }))
        .collect();
    let pushed = Instant::now();
    // The property here is the data planes'; the push gets the time a
    // debug build needs on a slow machine.
    post_within(&cp, "/config", big, Duration::from_secs(120)).await;
    for dp in &dps {
        dp.until_proxied("/r9999/echo", 200, Duration::from_secs(30)).await;
    }
    let took = pushed.elapsed();
    // Keep the clients on a little past the swap.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.await.expect("client");
    }
    let failures = failures.lock().unwrap().clone();
    let ok = ok.load(Ordering::SeqCst);
    eprintln!("the 10k/10k set reached both data planes in {took:?}; {ok} requests meanwhile");
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(ok > 100, "the clients kept requesting: {ok}");
    for dp in &dps {
        assert_eq!(dp.admin_get("/consumers/user-9999").await.status, 200);
    }
}
