//! Kong's `filter_chains` on a real node with Wasm off (the default): every
//! filter-chain endpoint answers Kong's 400, the entity is still described
//! (`/schemas/filter_chains`, `/endpoints`, `/openapi.json`), and a chain
//! in a declarative file is refused with Kong's entity error, through
//! `POST /config`, `/schemas/filter_chains/validate` and `strait config
//! validate` alike. Wasm-on behaviour is tested with the Wasm host.

use serde_json::{json, Value};
use strait_e2e::admin_api::{data, expect, expect_error, send_json};
use strait_e2e::{Gateway, GatewayOptions, TempDir};

const WASM_OFF: &str = "this endpoint is only available when wasm is enabled";
const WASM_DISABLED: &str = "wasm support is not enabled";

fn chain() -> Value {
    json!({ "name": "c", "filters": [{ "name": "response_transformer", "config": "{}" }] })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wasm_off_every_filter_chain_endpoint_answers_400() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let service = expect(
        &send_json(
            &gw,
            "POST",
            "/services",
            &json!({ "name": "s", "url": "http://127.0.0.1:9" }),
        )
        .await,
        201,
        "POST /services",
    );
    let route = expect(
        &send_json(
            &gw,
            "POST",
            "/routes",
            &json!({ "name": "r", "paths": ["/"], "service": { "id": service["id"] } }),
        )
        .await,
        201,
        "POST /routes",
    );
    let some_id = "6b5e5e5e-1111-4222-8333-444455556666";
    let (r, s) = (route["id"].as_str().unwrap(), service["id"].as_str().unwrap());
    let mut calls: Vec<(&str, String)> = vec![
        ("GET", "/filter-chains".into()),
        ("POST", "/filter-chains".into()),
        ("GET", "/filter-chains/c".into()),
        ("PUT", "/filter-chains/c".into()),
        ("PATCH", "/filter-chains/c".into()),
        ("DELETE", "/filter-chains/c".into()),
        ("GET", "/filter-chains/c/route".into()),
        ("GET", "/filter-chains/c/service".into()),
    ];
    for parent in [format!("/routes/{r}"), format!("/services/{s}"), "/routes/r".into()] {
        calls.push(("GET", format!("{parent}/filter-chains")));
        calls.push(("POST", format!("{parent}/filter-chains")));
        for method in ["GET", "PUT", "PATCH", "DELETE"] {
            calls.push((method, format!("{parent}/filter-chains/{some_id}")));
        }
    }
    for listing in ["all", "enabled", "disabled"] {
        calls.push(("GET", format!("/routes/{r}/filters/{listing}")));
        // Kong answers before looking the route up.
        calls.push(("GET", format!("/routes/no-such-route/filters/{listing}")));
    }
    for (method, path) in &calls {
        let reply = send_json(&gw, method, path, &chain()).await;
        let body = expect(&reply, 400, &format!("{method} {path}"));
        assert_eq!(body, json!({ "message": WASM_OFF }), "{method} {path}");
    }

    // The rest of the API is unchanged: the route and service are there,
    // and deleting them needs no chain to go first.
    assert_eq!(data(&gw.admin_get("/routes").await.json()).len(), 1);
    let reply = gw.admin("DELETE", "/routes/r", &[], "").await;
    assert_eq!(reply.status.as_u16(), 204, "{}", reply.text());
    let reply = gw.admin("DELETE", "/services/s", &[], "").await;
    assert_eq!(reply.status.as_u16(), 204, "{}", reply.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wasm_off_the_entity_is_described_and_refused_by_validation() {
    let gw = Gateway::start(GatewayOptions::new()).await;

    let schema = expect(
        &gw.admin_get("/schemas/filter_chains").await,
        200,
        "GET /schemas/filter_chains",
    );
    let fields = schema["fields"].as_array().expect("fields");
    let field = |name: &str| fields.iter().find_map(|f| f.get(name).cloned()).unwrap_or(Value::Null);
    assert_eq!(
        field("route"),
        json!({ "type": "foreign", "reference": "routes", "unique": true })
    );
    assert_eq!(field("enabled")["default"], json!(true));
    assert_eq!(field("filters")["len_min"], json!(1));
    let elements = &field("filters")["elements"]["fields"];
    assert_eq!(elements[2]["config"]["type"], "json", "{elements}");
    assert_eq!(
        schema["entity_checks"][1],
        json!({ "at_least_one_of": ["service", "route"] })
    );
    // No filter is installed: Kong's 404 for any filter's schema.
    let reply = gw.admin_get("/schemas/filters/response_transformer").await;
    assert_eq!(
        expect(&reply, 404, "GET /schemas/filters/..."),
        json!({ "message": "Filter 'response_transformer' not found" })
    );

    let endpoints = expect(&gw.admin_get("/endpoints").await, 200, "GET /endpoints");
    for path in [
        "/filter-chains",
        "/filter-chains/{filter_chains}/route",
        "/routes/{routes}/filter-chains/{filter_chains}",
        "/services/{services}/filter-chains",
        "/routes/{routes}/filters/enabled",
        "/schemas/filters/{name}",
    ] {
        assert!(
            endpoints["data"].as_array().unwrap().iter().any(|p| p == path),
            "{path} in /endpoints"
        );
    }
    let openapi = expect(&gw.admin_get("/openapi.json").await, 200, "GET /openapi.json");
    assert!(openapi["paths"]["/filter-chains/{filter_chains}"]["patch"].is_object());

    // Validation refuses any chain with Kong's entity error.
    let mut body = chain();
    body["route"] = json!({ "id": "6b5e5e5e-1111-4222-8333-444455556666" });
    let reply = send_json(&gw, "POST", "/schemas/filter_chains/validate", &body).await;
    let error = expect_error(&reply, 400, 2, "schema violation");
    assert_eq!(error["fields"]["@entity"], json!([WASM_DISABLED]), "{error}");
    assert_eq!(
        error["fields"]["filters"],
        json!([{ "name": "no such filter" }]),
        "{error}"
    );
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("filters.1.name: no such filter"),
        "{error}"
    );
}

/// Kong's `#wasm declarative config (wasm = off)` case: a chain nested
/// under a service.
fn declarative() -> Value {
    json!({
        "_format_version": "3.0",
        "services": [{
            "name": "test",
            "url": "http://wasm.test/",
            "routes": [{ "name": "test", "hosts": ["wasm.test"] }],
            "filter_chains": [{ "name": "test", "filters": [{ "name": "i_do_not_exist" }] }],
        }],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wasm_off_a_declarative_chain_is_refused_everywhere() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let reply = gw
        .post_config_as(
            "/config?flatten_errors=1",
            "application/json",
            declarative().to_string().into_bytes(),
        )
        .await;
    let body = expect_error(&reply, 400, 14, "invalid declarative configuration");
    let flattened = body["flattened_errors"].as_array().expect("flattened errors");
    assert_eq!(flattened.len(), 1, "{body}");
    assert_eq!(flattened[0]["entity_type"], "filter_chain");
    assert_eq!(flattened[0]["entity_name"], "test");
    assert_eq!(
        flattened[0]["errors"],
        json!([
            { "field": "filters.1.name", "type": "field", "message": "no such filter" },
            { "type": "entity", "message": WASM_DISABLED },
        ])
    );
    assert_eq!(
        body["fields"]["services"][0]["filter_chains"][0]["@entity"],
        json!([WASM_DISABLED]),
        "{body}"
    );
    // Nothing was loaded.
    assert!(data(&gw.admin_get("/services").await.json()).is_empty());

    let dir = TempDir::new();
    std::fs::write(dir.path().join("kong.json"), declarative().to_string()).unwrap();
    let validated = strait_e2e::run_strait(&["config", "validate", "kong.json"], dir.path(), &[]).await;
    assert_eq!(validated.code, Some(1), "{}", validated.all());
    assert!(validated.stderr.contains(WASM_DISABLED), "{}", validated.all());
}
