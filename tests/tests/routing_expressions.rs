//! Expression routes end to end: loaded through `POST /config`, matched by the proxy by host,
//! path, header, query and method in priority order, mixed with traditional routes in one
//! config, proxied upstream with `strip_path`; an invalid expression is a 400 naming the field
//! and the column, and the running config keeps serving.

use serde_json::{json, Value};
use strait_e2e::admin_api::send_json;
use strait_e2e::declarative::{answering, config, route, service, terminating_service};
use strait_e2e::{get, get_host, request, Gateway, GatewayOptions, Upstream, UpstreamKind};

fn expression(name: &str, expression: &str, priority: i64) -> Value {
    json!({ "name": name, "expression": expression, "priority": priority })
}

async fn answer(gw: &Gateway, req: http::Request<http_body_util::Full<bytes::Bytes>>) -> (u16, Option<String>) {
    let reply = gw.proxy(req).await;
    (reply.status.as_u16(), reply.message())
}

fn ok(message: &str) -> (u16, Option<String>) {
    (200, Some(message.to_string()))
}

/// Expression routes exist only under Kong's `expressions` router flavor.
fn expressions_flavor() -> GatewayOptions {
    GatewayOptions::new().setting("router_flavor", "expressions")
}

/// Under Kong's default flavor (`traditional_compatible`) a route with an `expression` is
/// refused, as Kong refuses it, by every write path; `GET /` reports the flavor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_flavor_refuses_expression_routes_on_every_write_path() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let root: Value = serde_json::from_str(&gw.admin_get("/").await.text()).expect("json");
    assert_eq!(root["configuration"]["router_flavor"], "traditional_compatible");
    let document = config(vec![terminating_service(
        "s",
        vec![answering(expression("e", r#"http.path == "/e""#, 1), "e")],
    )]);
    let (status, text) = gw.post_config(&document.to_string()).await;
    assert_eq!(status, 400, "{text}");
    let body: Value = serde_json::from_str(&text).expect("json");
    let routes = &body["fields"]["services"][0]["routes"][0];
    assert!(
        routes["expression"]
            .as_str()
            .is_some_and(|m| m.contains("router_flavor = expressions")),
        "{text}"
    );
    assert!(routes["priority"].is_string(), "{text}");
    let service = send_json(
        &gw,
        "POST",
        "/services",
        &json!({ "name": "plain", "url": "http://127.0.0.1:9" }),
    )
    .await;
    assert_eq!(service.status, 201, "{}", service.text());
    let route = json!({ "expression": r#"http.path == "/e""#, "service": { "name": "plain" } });
    for path in ["/routes", "/schemas/routes/validate"] {
        let reply = send_json(&gw, "POST", path, &route).await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.text());
        let body: Value = serde_json::from_str(&reply.text()).expect("json");
        assert_eq!(body["name"], "schema violation", "{path}");
        assert!(body["fields"]["expression"].is_string(), "{path}: {}", reply.text());
    }
    let listed: Value = serde_json::from_str(&gw.admin_get("/routes").await.text()).expect("json");
    assert_eq!(listed["data"], json!([]), "nothing was stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expression_routes_match_fields_in_priority_order() {
    let gw = Gateway::start(expressions_flavor()).await;
    gw.apply(&config(vec![terminating_service(
        "expr",
        vec![
            answering(expression("fallback", r#"http.path ^= "/e""#, 1), "fallback"),
            answering(
                expression("host", r#"http.host == "api.test" && http.path ^= "/e""#, 10),
                "host",
            ),
            answering(
                expression("header", r#"http.path ^= "/e" && http.headers.x_tenant == "acme""#, 20),
                "header",
            ),
            answering(
                expression("query", r#"http.path ^= "/e" && http.queries.v == "2""#, 30),
                "query",
            ),
            answering(
                expression("method", r#"http.path ^= "/e" && http.method == "POST""#, 40),
                "method",
            ),
            answering(
                expression(
                    "regex",
                    r#"(http.path ~ "^/users/\\d+$") && !(http.host == "blocked.test")"#,
                    5,
                ),
                "regex",
            ),
        ],
    )]))
    .await;
    assert_eq!(answer(&gw, get("/e/x")).await, ok("fallback"));
    assert_eq!(answer(&gw, get_host("/e/x", "api.test")).await, ok("host"));
    let tenant = request("GET", "/e/x", &[("host", "api.test"), ("x-tenant", "acme")], "");
    assert_eq!(answer(&gw, tenant).await, ok("header"), "priority 20 beats 10");
    assert_eq!(answer(&gw, get("/e/x?a=1&v=2")).await, ok("query"));
    let post = request("POST", "/e/x?v=2", &[("x-tenant", "acme")], "");
    assert_eq!(answer(&gw, post).await, ok("method"), "priority 40 beats all");
    assert_eq!(answer(&gw, get("/users/42")).await, ok("regex"));
    assert_eq!(answer(&gw, get_host("/users/42", "blocked.test")).await.0, 404);
    assert_eq!(answer(&gw, get("/users/x")).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn styles_mix_in_one_config_and_expression_routes_strip_paths() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(expressions_flavor()).await;
    let mut expr = expression("expr", r#"http.path ^= "/expr" && http.method == "GET""#, 3);
    expr["strip_path"] = json!(true);
    gw.apply(&config(vec![
        service("up", &up.url("http"), vec![expr]),
        terminating_service("trad", vec![answering(route("trad", &["/trad"]), "traditional")]),
    ]))
    .await;
    let reply = gw.proxy(get("/expr/echo?q=1")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["path"], "/echo?q=1");
    assert_eq!(answer(&gw, get("/trad/x")).await, ok("traditional"));
    assert_eq!(answer(&gw, request("DELETE", "/expr/echo", &[], "")).await.0, 404);
    assert_eq!(up.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_expression_is_rejected_with_its_path_and_the_old_config_serves() {
    let gw = Gateway::start(expressions_flavor()).await;
    let good = config(vec![terminating_service(
        "good",
        vec![answering(expression("live", r#"http.path == "/live""#, 1), "live")],
    )]);
    gw.apply(&good).await;
    let bad = config(vec![terminating_service(
        "bad",
        vec![
            answering(expression("fine", r#"http.path == "/fine""#, 1), "fine"),
            answering(
                expression(
                    "broken",
                    r#"http.path == "/a" && http.host == "b" || http.method == "GET""#,
                    1,
                ),
                "broken",
            ),
        ],
    )]);
    let reply = gw
        .post_config_as(
            "/config?flatten_errors=1",
            "application/json",
            bad.to_string().into_bytes(),
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    let body = reply.text();
    assert!(body.contains("expression"), "{body}");
    assert!(body.contains("at column 39"), "{body}");
    assert!(body.contains("cannot be mixed without parentheses"), "{body}");
    let (status, text) = gw.post_config(&bad.to_string()).await;
    assert_eq!(status, 400);
    let fields: Value = serde_json::from_str(&text).expect("json body");
    let message = &fields["fields"]["services"][0]["routes"][1]["expression"];
    assert!(
        message
            .as_str()
            .is_some_and(|m| m.starts_with("invalid expression: at column 39:")),
        "{text}"
    );
    assert_eq!(answer(&gw, get("/live")).await, ok("live"), "old config still serves");
    assert_eq!(answer(&gw, get("/fine")).await.0, 404);
}

/// Admin API writes go through the incremental path: each one derives the router from the
/// previous one (insert / replace / remove), and a 2xx means the proxy already serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_api_route_writes_update_expression_routes_incrementally() {
    use strait_e2e::admin_api::{expect, send_json};
    let gw = Gateway::start(expressions_flavor()).await;
    let service = json!({"name": "s", "host": "127.0.0.1", "port": 9});
    expect(&send_json(&gw, "POST", "/services", &service).await, 201, "service");
    let route = json!({"name": "r", "expression": r#"http.path ^= "/one""#, "priority": 5});
    expect(
        &send_json(&gw, "POST", "/services/s/routes", &route).await,
        201,
        "route",
    );
    let plugin = json!({"name": "request-termination", "config": {"status_code": 200, "message": "r"}});
    expect(
        &send_json(&gw, "POST", "/routes/r/plugins", &plugin).await,
        201,
        "plugin",
    );
    assert_eq!(answer(&gw, get("/one/x")).await, ok("r"));

    let moved = json!({"expression": r#"http.path ^= "/two" && http.queries.k == "v""#});
    expect(&send_json(&gw, "PATCH", "/routes/r", &moved).await, 200, "replace");
    assert_eq!(answer(&gw, get("/one/x")).await.0, 404);
    assert_eq!(answer(&gw, get("/two/x?k=v")).await, ok("r"));

    let invalid = send_json(&gw, "PATCH", "/routes/r", &json!({"expression": "http.path ^= 1"})).await;
    assert_eq!(invalid.status, 400, "{}", invalid.text());
    let body = invalid.json();
    let message = body["fields"]["expression"].as_str().unwrap_or_default().to_string();
    assert!(message.starts_with("invalid expression: at column 14:"), "{body}");
    assert_eq!(
        answer(&gw, get("/two/x?k=v")).await,
        ok("r"),
        "rejected write changes nothing"
    );

    expect(&gw.admin("DELETE", "/routes/r", &[], "").await, 204, "delete");
    assert_eq!(answer(&gw, get("/two/x?k=v")).await.0, 404);
}
