//! Admin API writes are live when they answer: a 2xx means the proxy already serves the change
//! (no polling), `/config` still replaces everything, and concurrent writers neither lose nor
//! duplicate entities nor see a 5xx.

use std::collections::BTreeSet;

use serde_json::json;
use strait_e2e::admin_api::{data, expect, send_json};
use strait_e2e::{get, Gateway, GatewayOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2xx_means_the_proxy_serves_the_change() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    expect(
        &send_json(
            &gw,
            "POST",
            "/services",
            &json!({"name": "s", "host": "127.0.0.1", "port": 9}),
        )
        .await,
        201,
        "s",
    );
    expect(
        &send_json(
            &gw,
            "POST",
            "/services/s/routes",
            &json!({"name": "r", "paths": ["/live"]}),
        )
        .await,
        201,
        "r",
    );
    let plugin = json!({"name": "request-termination", "config": {"status_code": 200, "message": "v1"}});
    let plugin = expect(
        &send_json(&gw, "POST", "/routes/r/plugins", &plugin).await,
        201,
        "plugin",
    );
    assert_eq!(gw.proxy(get("/live")).await.message().as_deref(), Some("v1"));

    let id = plugin["id"].as_str().unwrap();
    let update = json!({"config": {"message": "v2"}});
    expect(
        &send_json(&gw, "PATCH", &format!("/plugins/{id}"), &update).await,
        200,
        "PATCH",
    );
    assert_eq!(gw.proxy(get("/live")).await.message().as_deref(), Some("v2"));

    let moved = send_json(&gw, "PATCH", "/routes/r", &json!({"paths": ["/moved"]})).await;
    expect(&moved, 200, "move route");
    assert_eq!(gw.proxy(get("/live")).await.status, 404);
    assert_eq!(gw.proxy(get("/moved")).await.message().as_deref(), Some("v2"));

    expect(&gw.admin("DELETE", "/routes/r", &[], "").await, 204, "delete route");
    assert_eq!(gw.proxy(get("/moved")).await.status, 404);

    // /config still replaces everything at once; entity writes continue from it.
    let config = json!({"_format_version": "3.0", "services": [{"name": "only", "url": "http://127.0.0.1:9",
        "routes": [{"name": "cfg", "paths": ["/cfg"], "plugins": [{"name": "request-termination",
        "config": {"status_code": 200, "message": "from config"}}]}]}]});
    let (status, body) = gw.post_config(&config.to_string()).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(data(&gw.admin_get("/services").await.json()).len(), 1);
    assert_eq!(gw.proxy(get("/cfg")).await.message().as_deref(), Some("from config"));
    let added = send_json(
        &gw,
        "POST",
        "/services/only/routes",
        &json!({"name": "after", "paths": ["/after"]}),
    )
    .await;
    expect(&added, 201, "route after /config");
    assert_eq!(data(&gw.admin_get("/routes").await.json()).len(), 2);
}

async fn writer(gw: &Gateway, prefix: &str, count: usize) -> BTreeSet<String> {
    let mut kept = BTreeSet::new();
    for i in 0..count {
        let name = format!("{prefix}-{i}");
        let body = json!({"name": name, "host": "127.0.0.1"});
        let created = send_json(gw, "POST", "/services", &body).await;
        assert_eq!(created.status, 201, "{name}: {}", created.text());
        let route = json!({"name": format!("{name}-r"), "paths": [format!("/{name}")]});
        let route = send_json(gw, "POST", &format!("/services/{name}/routes"), &route).await;
        assert_eq!(route.status, 201, "{name} route: {}", route.text());
        if i % 2 == 0 {
            let deleted = gw.admin("DELETE", &format!("/routes/{name}-r"), &[], "").await;
            assert_eq!(deleted.status, 204, "{name}: {}", deleted.text());
            let deleted = gw.admin("DELETE", &format!("/services/{name}"), &[], "").await;
            assert_eq!(deleted.status, 204, "{name}: {}", deleted.text());
        } else {
            kept.insert(name);
        }
    }
    kept
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_lose_and_duplicate_nothing() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let (left, right) = tokio::join!(writer(&gw, "left", 40), writer(&gw, "right", 40));
    let expected: BTreeSet<String> = left.union(&right).cloned().collect();
    let mut listed = Vec::new();
    let mut path = "/services?size=7".to_string();
    loop {
        let body = expect(&gw.admin_get(&path).await, 200, &path);
        listed.extend(data(&body).iter().map(|s| s["name"].as_str().unwrap().to_string()));
        match body["next"].as_str() {
            Some(next) => path = next.to_string(),
            None => break,
        }
    }
    let unique: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(unique.len(), listed.len(), "duplicates in {listed:?}");
    assert_eq!(unique, expected);
    assert_eq!(
        data(&gw.admin_get("/routes?size=1000").await.json()).len(),
        expected.len()
    );
    for name in expected.iter().take(5) {
        let reply = gw.proxy(get(&format!("/{name}"))).await;
        assert_ne!(reply.status.as_u16(), 404, "route {name} is live: {}", reply.text());
    }
}
