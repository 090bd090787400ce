//! Admin API basics: `GET /` fields and Server header, `/status`, `/status/ready` on both the
//! admin and status listeners, and the entity lists.

use serde_json::{json, Value};
use strait_e2e::declarative::{answering, config, route, service};
use strait_e2e::{get, send_h1, Gateway, GatewayOptions, TestCa};

fn is_hex32(value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|s| s.len() == 32 && s.chars().all(|c| c.is_ascii_hexdigit()))
}

fn is_semver_like(value: &Value) -> bool {
    let Some(text) = value.as_str() else { return false };
    let parts: Vec<&str> = text.split(['.', '-']).collect();
    parts.len() >= 3 && parts[..3].iter().all(|p| p.parse::<u32>().is_ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_describes_the_node() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let reply = gw.admin_get("/").await;
    assert_eq!(reply.status, 200);
    let root = reply.json();
    assert!(
        is_semver_like(&root["version"]),
        "Kong admin API version: {}",
        root["version"]
    );
    assert!(
        is_semver_like(&root["strait_version"]),
        "strait_version: {}",
        root["strait_version"]
    );
    assert!(root["hostname"].as_str().is_some_and(|h| !h.is_empty()));
    assert!(
        root["node_id"].as_str().is_some_and(|id| id.len() == 36),
        "node_id: {}",
        root["node_id"]
    );
    assert!(root["tagline"].is_string());
    assert!(root["configuration"].is_object());
    let plugins = &root["plugins"];
    // Kong 3.x: each plugin's version and priority.
    let termination = &plugins["available_on_server"]["request-termination"];
    assert_eq!(termination["priority"], 2, "request-termination available: {plugins}");
    assert!(termination["version"].is_string(), "{plugins}");
    assert_eq!(plugins["available_on_server"]["key-auth"]["priority"], 1250);
    assert!(plugins["enabled_in_cluster"].is_array());
    let version = root["strait_version"].as_str().unwrap();
    assert_eq!(reply.header("server"), Some(format!("strait/{version}")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_hash_and_version() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let cfg = config(vec![service("s", "http://127.0.0.1:9", vec![route("r", &["/r"])])]);
    gw.apply(&cfg).await;
    let first = gw.admin_get("/status").await;
    assert_eq!(first.status, 200);
    let first = first.json();
    assert!(first["server"].is_object(), "{first}");
    assert!(
        first["server"]
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.contains("connections")),
        "{first}"
    );
    assert!(is_hex32(&first["configuration_hash"]), "{first}");
    let first_version = first["config_version"].as_u64().expect("config_version");

    let changed = config(vec![service("s", "http://127.0.0.1:9", vec![route("r2", &["/r2"])])]);
    gw.apply(&changed).await;
    let second = gw.admin_get("/status").await.json();
    assert!(second["config_version"].as_u64().expect("config_version") > first_version);
    assert_ne!(second["configuration_hash"], first["configuration_hash"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_on_admin_and_status_listeners() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![])).await;
    for addr in [gw.admin_addr(), gw.status_addr()] {
        let reply = send_h1(addr, get("/status/ready")).await.expect("GET /status/ready");
        assert_eq!(reply.status, 200, "{addr}: {}", reply.text());
        assert_eq!(reply.json()["message"], "ready");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_with_declarative_config_at_start() {
    let yaml = "_format_version: \"3.0\"\nservices:\n  - name: s\n    url: http://127.0.0.1:9\n";
    let gw = Gateway::start(GatewayOptions::new().declarative(yaml)).await;
    let reply = send_h1(gw.status_addr(), get("/status/ready"))
        .await
        .expect("GET /status/ready");
    assert_eq!(reply.status, 200, "{}", reply.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entity_lists() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let ca = TestCa::new("e2e ca");
    let leaf = ca.issue(&["list.test"]);
    let mut cfg = config(vec![service(
        "svc",
        "http://pool",
        vec![route("r1", &["/one"]), answering(route("r2", &["/two"]), "two")],
    )]);
    cfg["upstreams"] =
        json!([{ "name": "pool", "targets": [{ "target": "127.0.0.1:9" }, { "target": "127.0.0.1:10" }] }]);
    cfg["consumers"] = json!([{ "username": "alice", "keyauth_credentials": [{ "key": "alice-secret" }] }]);
    cfg["certificates"] = json!([{ "cert": leaf.cert_pem, "key": leaf.key_pem, "snis": [{ "name": "list.test" }] }]);
    cfg["ca_certificates"] = json!([{ "cert": ca.cert_pem() }]);
    let (status, body) = gw.post_config(&cfg.to_string()).await;
    assert_eq!(status, 201, "{body}");

    let expected = [
        ("/services", 1),
        ("/routes", 2),
        ("/upstreams", 1),
        ("/targets", 2),
        ("/consumers", 1),
        ("/key-auths", 1),
        ("/plugins", 1),
        ("/certificates", 1),
        ("/snis", 1),
        ("/ca_certificates", 1),
    ];
    for (path, count) in expected {
        let reply = gw.admin_get(path).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        let list = reply.json();
        assert_eq!(list["data"].as_array().map(Vec::len), Some(count), "{path}: {list}");
        assert!(list["next"].is_null(), "{path}: {list}");
    }
    let routes = gw.admin_get("/routes").await.json();
    let mut names: Vec<&str> = routes["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    names.sort();
    assert_eq!(names, ["r1", "r2"]);
    let snis = gw.admin_get("/snis").await.json();
    assert_eq!(snis["data"][0]["name"], "list.test");
    let consumers = gw.admin_get("/consumers").await.json();
    assert_eq!(consumers["data"][0]["username"], "alice");
}
