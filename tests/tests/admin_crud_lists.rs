//! Admin API lists and descriptions: pagination with opaque offsets and `next` links that keep
//! their filters, `tags` (AND with `,`, OR with `/`), `custom_id`, empty lists, `/tags`,
//! `/schemas/...` (with every default), validation endpoints, `/plugins/enabled`, `/endpoints`
//! and `/openapi.json`.

use std::collections::BTreeSet;

use serde_json::{json, Value};
use strait_e2e::admin_api::{data, expect, expect_error, send_json};
use strait_e2e::{Gateway, GatewayOptions};

async fn service(gw: &Gateway, name: &str, tags: &[&str]) {
    let body = json!({"name": name, "host": "h.test", "tags": tags});
    expect(&send_json(gw, "POST", "/services", &body).await, 201, name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_follow_next_links_without_gaps() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    assert_eq!(
        gw.admin_get("/services").await.json(),
        json!({"data": [], "next": null})
    );
    for i in 0..7 {
        service(
            &gw,
            &format!("s{i}"),
            if i % 2 == 0 { &["even", "all"] } else { &["odd", "all"] },
        )
        .await;
    }
    let mut seen = BTreeSet::new();
    let mut path = "/services?size=3".to_string();
    let mut pages = 0;
    loop {
        let body = expect(&gw.admin_get(&path).await, 200, &path);
        pages += 1;
        for service in data(&body) {
            assert!(
                seen.insert(service["name"].as_str().unwrap().to_string()),
                "duplicate in {body}"
            );
        }
        match body["next"].as_str() {
            Some(next) => {
                assert!(next.contains("size=3"), "next keeps size: {next}");
                assert!(body["offset"].is_string());
                path = next.to_string();
            }
            None => break,
        }
    }
    assert_eq!((pages, seen.len()), (3, 7));

    let first = expect(&gw.admin_get("/services?tags=all&size=2").await, 200, "tagged page");
    let next = first["next"].as_str().expect("more tagged services");
    assert!(next.contains("tags=all") && next.contains("size=2"), "{next}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tag_filters_and_custom_id() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    service(&gw, "a", &["x", "y"]).await;
    service(&gw, "b", &["x"]).await;
    service(&gw, "c", &["z"]).await;
    let names = |body: Value| -> Vec<String> {
        let mut names: Vec<String> = data(&body)
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names(gw.admin_get("/services?tags=x,y").await.json()), ["a"]);
    assert_eq!(names(gw.admin_get("/services?tags=y/z").await.json()), ["a", "c"]);
    assert_eq!(names(gw.admin_get("/services?tags=x").await.json()), ["a", "b"]);
    expect_error(&gw.admin_get("/services?tags=x,y/z").await, 400, 11, "invalid options");

    let consumer = json!({"username": "u", "custom_id": "c-1"});
    expect(&send_json(&gw, "POST", "/consumers", &consumer).await, 201, "consumer");
    let found = gw.admin_get("/consumers?custom_id=c-1").await.json();
    assert_eq!((data(&found).len(), found["next"].clone()), (1, Value::Null));
    assert_eq!(
        gw.admin_get("/consumers?custom_id=none").await.json(),
        json!({"data": [], "next": null})
    );

    let tags = expect(&gw.admin_get("/tags").await, 200, "/tags");
    assert_eq!(data(&tags).len(), 4, "{tags}");
    let x = expect(&gw.admin_get("/tags/x").await, 200, "/tags/x");
    assert!(
        data(&x)
            .iter()
            .all(|row| row["tag"] == "x" && row["entity_name"] == "services"),
        "{x}"
    );
    assert_eq!(data(&x).len(), 2);
    let paged = expect(&gw.admin_get("/tags?size=3").await, 200, "paged tags");
    let rest = expect(&gw.admin_get(paged["next"].as_str().unwrap()).await, 200, "next tags");
    assert_eq!(data(&paged).len() + data(&rest).len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_describe_every_default() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let services = expect(&gw.admin_get("/schemas/services").await, 200, "services schema");
    let field = |schema: &Value, name: &str| -> Value {
        schema["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|f| f.get(name).cloned())
            .unwrap_or(Value::Null)
    };
    assert_eq!(field(&services, "retries")["default"], 5);
    assert_eq!(field(&services, "protocol")["default"], "http");
    let plugin = expect(
        &gw.admin_get("/schemas/plugins/request-termination").await,
        200,
        "plugin schema",
    );
    let config = field(&plugin, "config");
    assert_eq!(field(&config, "status_code")["default"], 503);
    assert_eq!(field(&config, "echo")["default"], false);
    assert_eq!(field(&config, "message")["type"], "string");
    assert_eq!(
        field(&plugin, "protocols")["default"],
        json!(["grpc", "grpcs", "http", "https"])
    );
    expect(&gw.admin_get("/schemas/nothing").await, 404, "unknown entity");
    let unknown = gw.admin_get("/schemas/plugins/nothing").await;
    assert_eq!(
        expect(&unknown, 404, "unknown plugin")["message"],
        "No plugin named 'nothing'"
    );

    let valid = send_json(&gw, "POST", "/schemas/routes/validate", &json!({"paths": ["/a"]})).await;
    assert_eq!(
        expect(&valid, 200, "valid route")["message"],
        "schema validation successful"
    );
    let invalid = send_json(&gw, "POST", "/schemas/routes/validate", &json!({"paths": ["a"]})).await;
    expect_error(&invalid, 400, 2, "schema violation");
    let plugin = json!({"name": "request-termination", "config": {"status_code": 99}});
    expect_error(
        &send_json(&gw, "POST", "/schemas/plugins/validate", &plugin).await,
        400,
        2,
        "schema violation",
    );
    let incomplete = json!({"name": "ai-request-transformer"});
    let refused = send_json(&gw, "POST", "/schemas/plugins/validate", &incomplete).await;
    expect_error(&refused, 400, 2, "schema violation");
    assert_eq!(
        data(&gw.admin_get("/routes").await.json()).len(),
        0,
        "validation writes nothing"
    );

    let enabled = expect(&gw.admin_get("/plugins/enabled").await, 200, "enabled");
    assert!(enabled["enabled_plugins"]
        .as_array()
        .unwrap()
        .contains(&json!("request-termination")));
    for name in ["key-auth", "acl", "cors", "request-transformer"] {
        assert!(
            enabled["enabled_plugins"].as_array().unwrap().contains(&json!(name)),
            "{name}"
        );
        let schema = expect(&gw.admin_get(&format!("/schemas/plugins/{name}")).await, 200, name);
        assert!(schema["fields"].is_array(), "{name}: {schema}");
    }
    let endpoints = expect(&gw.admin_get("/endpoints").await, 200, "endpoints");
    let paths = data(&endpoints);
    for expected in [
        "/services/{services}/routes",
        "/consumers/{consumers}/key-auth",
        "/key-auths",
        "/schemas/{name}",
    ] {
        assert!(paths.contains(&json!(expected)), "{expected} missing from {endpoints}");
    }
    let openapi = expect(&gw.admin_get("/openapi.json").await, 200, "openapi");
    assert_eq!(openapi["openapi"], "3.0.3");
    assert!(openapi["paths"]["/services/{services}"]["patch"].is_object());
}
