//! Admin API error cases with Kong's bodies and codes: schema violations (2), primary key (3),
//! foreign key (4), unique (5), not found, invalid offset (7) and size (9), unresolved foreign
//! keys (13), malformed JSON, unsupported content types (415), 405 with `Allow`, OPTIONS,
//! plugins Strait cannot run, and `admin_token`.

use serde_json::json;
use strait_e2e::admin_api::{data, expect, expect_error, send_json};
use strait_e2e::{Gateway, GatewayOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_unique_and_primary_key_violations() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let invalid = send_json(
        &gw,
        "POST",
        "/routes",
        &json!({"protocols": ["foo", "http"], "methods": ["GET"]}),
    )
    .await;
    let body = expect_error(&invalid, 400, 2, "schema violation");
    assert_eq!(
        body["message"],
        "schema violation (protocols.1: expected one of: grpc, grpcs, http, https, tcp, tls, tls_passthrough, udp, ws, wss)"
    );
    assert!(body["fields"]["protocols"].is_array(), "{body}");
    let empty = send_json(&gw, "POST", "/routes", &json!({})).await;
    let body = expect_error(&empty, 400, 2, "schema violation");
    assert!(
        body["fields"]["@entity"][0]
            .as_str()
            .unwrap()
            .starts_with("must set one of"),
        "{body}"
    );
    let many = send_json(&gw, "POST", "/services", &json!({"port": "x", "retries": -1})).await;
    let body = expect_error(&many, 400, 2, "schema violation");
    assert!(
        body["message"].as_str().unwrap().starts_with("3 schema violations ("),
        "{body}"
    );

    let service = expect(
        &send_json(&gw, "POST", "/services", &json!({"name": "s", "host": "h"})).await,
        201,
        "s",
    );
    let duplicate = send_json(&gw, "POST", "/services", &json!({"name": "s", "host": "h"})).await;
    let body = expect_error(&duplicate, 409, 5, "unique constraint violation");
    assert_eq!(body["message"], "UNIQUE violation detected on '{name=\"s\"}'");
    assert_eq!(body["fields"], json!({"name": "s"}));
    let same_id = send_json(&gw, "POST", "/services", &json!({"id": service["id"], "host": "h"})).await;
    let body = expect_error(&same_id, 409, 3, "primary key violation");
    assert_eq!(body["fields"], json!({"id": service["id"]}));
    let other = expect(
        &send_json(&gw, "POST", "/services", &json!({"name": "t", "host": "h"})).await,
        201,
        "t",
    );
    let rename = send_json(
        &gw,
        "PATCH",
        &format!("/services/{}", other["id"].as_str().unwrap()),
        &json!({"name": "s"}),
    )
    .await;
    expect_error(&rename, 409, 5, "unique constraint violation");
    expect(
        &send_json(&gw, "PATCH", "/services/nope", &json!({"retries": 1})).await,
        404,
        "PATCH missing",
    );
    assert_eq!(data(&gw.admin_get("/services").await.json()).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_and_content_types() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let broken = gw
        .admin(
            "POST",
            "/services",
            &[("content-type", "application/json")],
            "{\"name\": ",
        )
        .await;
    assert_eq!(
        expect(&broken, 400, "bad JSON"),
        json!({"message": "Cannot parse JSON body"})
    );
    let text = gw
        .admin("POST", "/services", &[("content-type", "text/plain")], "name=x")
        .await;
    assert_eq!(text.status, 415, "{}", text.text());
    let xml = gw
        .admin("PUT", "/services/x", &[("content-type", "application/xml")], "<x/>")
        .await;
    assert_eq!(xml.status, 415);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_allow_and_options() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let patch = gw.admin("PATCH", "/services", &[], "").await;
    assert_eq!(
        expect(&patch, 405, "PATCH collection"),
        json!({"message": "Method not allowed"})
    );
    assert_eq!(patch.header("allow").as_deref(), Some("GET, HEAD, OPTIONS, POST"));
    let post = gw.admin("POST", "/services/x", &[], "").await;
    assert_eq!(post.status, 405);
    assert_eq!(
        post.header("allow").as_deref(),
        Some("DELETE, GET, HEAD, OPTIONS, PATCH, PUT")
    );
    let options = gw.admin("OPTIONS", "/consumers/c/key-auth", &[], "").await;
    assert_eq!(options.status, 204);
    assert_eq!(options.header("allow").as_deref(), Some("GET, HEAD, OPTIONS, POST"));
    let validate = gw.admin("GET", "/schemas/routes/validate", &[], "").await;
    assert_eq!(validate.header("allow").as_deref(), Some("OPTIONS, POST"));
    expect(&gw.admin_get("/nothing/here").await, 404, "unknown path");
    let head = gw.admin("HEAD", "/services", &[], "").await;
    assert_eq!((head.status.as_u16(), head.body.len()), (200, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_argument_errors() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let body = expect_error(&gw.admin_get("/services?offset=%21%21").await, 400, 7, "invalid offset");
    assert_eq!(body["message"], "'!!' is not a valid offset: bad base64 encoding");
    let body = expect_error(&gw.admin_get("/services?size=0").await, 400, 9, "invalid size");
    assert_eq!(body["message"], "size must be an integer between 1 and 1000");
    expect_error(&gw.admin_get("/routes?size=1001").await, 400, 9, "invalid size");
    expect_error(&gw.admin_get("/routes?size=abc").await, 400, 9, "invalid size");
    let mixed = gw.admin_get("/services?tags=a,b/c").await;
    let body = expect_error(&mixed, 400, 11, "invalid options");
    assert_eq!(body["options"]["tags"], "invalid filter syntax");
    let custom = gw.admin_get("/consumers?custom_id=").await;
    assert_eq!(
        expect(&custom, 400, "empty custom_id")["message"],
        "custom_id must be an unempty string"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_strait_cannot_run_are_refused_whole() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    // Valid by Kong's schema, refused by this build (a provider not built).
    let unbuilt = json!({"route_type": "llm/v1/chat", "auth": {"gcp_use_service_account": true},
        "model": {"provider": "gemini", "name": "gemini-1.5-pro"}});
    let refused = send_json(&gw, "POST", "/plugins", &json!({"name": "ai-proxy", "config": unbuilt})).await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert!(refused.text().contains("gcp_use_service_account"), "{}", refused.text());
    let unknown = send_json(&gw, "POST", "/plugins", &json!({"name": "no-such-plugin"})).await;
    expect_error(&unknown, 400, 2, "schema violation");
    let bad_config = send_json(
        &gw,
        "POST",
        "/plugins",
        &json!({"name": "request-termination", "config": {"message": "m", "body": "b"}}),
    )
    .await;
    let body = expect_error(&bad_config, 400, 2, "schema violation");
    assert_eq!(
        body["fields"]["config"],
        "message cannot be used with content_type or body"
    );
    let disabled = send_json(
        &gw,
        "POST",
        "/plugins",
        &json!({"name": "ai-proxy", "config": unbuilt, "enabled": false}),
    )
    .await;
    expect(&disabled, 201, "a disabled plugin is stored");
    assert_eq!(data(&gw.admin_get("/plugins").await.json()).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_token_guards_every_endpoint() {
    let gw = Gateway::start(GatewayOptions::new().setting("admin_token", "s3cret")).await;
    let anonymous = send_json(&gw, "POST", "/services", &json!({"name": "s", "host": "h"})).await;
    assert_eq!(anonymous.status, 401);
    let wrong = gw
        .admin("GET", "/services", &[("authorization", "Bearer nope")], "")
        .await;
    assert_eq!(wrong.status, 401);
    let headers = [("authorization", "Bearer s3cret"), ("content-type", "application/json")];
    let created = gw
        .admin("POST", "/services", &headers, r#"{"name":"s","host":"h"}"#)
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    assert_eq!(data(&gw.admin("GET", "/services", &headers, "").await.json()).len(), 1);
}
