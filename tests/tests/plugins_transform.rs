//! request-transformer, response-transformer, correlation-id and
//! request-termination (echo, trigger) end to end against a real upstream.

use serde_json::{json, Value};
use strait_e2e::plugins::{echo_service, gateway_with_echo};
use strait_e2e::{get, request};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_transformer_rewrites_headers_query_body_method_and_path() {
    let routes = json!([
        { "name": "t", "paths": ["~/t/(?<tenant>[a-z]+)$"], "strip_path": false, "plugins": [{ "name": "request-transformer", "config": {
            "remove": { "headers": ["x-drop"], "querystring": ["secret"], "body": ["password"] },
            "rename": { "headers": ["x-old:x-new"], "querystring": ["q:query"], "body": ["user:username"] },
            "replace": { "headers": ["x-replace:replaced"], "querystring": ["page:1"], "body": ["role:viewer"], "uri": "/tenants/$(uri_captures.tenant)" },
            "add": { "headers": ["x-added:$(headers.x-source or 'none')", "x-keep:not-used"], "querystring": ["added:yes"], "body": ["source:gateway"] },
            "append": { "headers": ["x-multi:two"], "querystring": ["tag:b"], "body": ["tags:z"] }
        } }] },
        { "name": "m", "paths": ["/m"], "plugins": [{ "name": "request-transformer", "config": { "http_method": "GET" } }] },
        { "name": "h", "paths": ["/h"], "plugins": [{ "name": "request-transformer", "config": { "replace": { "headers": ["host:rewritten.example"] } } }] }
    ]);
    let (gw, _upstream) = gateway_with_echo(&echo_service(routes, json!([]))).await;
    let reply = gw
        .proxy(request(
            "POST",
            "/t/acme?secret=1&q=x&page=7&tag=a",
            &[
                ("content-type", "application/json"),
                ("x-drop", "1"),
                ("x-old", "moved"),
                ("x-replace", "before"),
                ("x-keep", "mine"),
                ("x-multi", "one"),
                ("x-source", "client"),
            ],
            r#"{"password":"p","user":"u","role":"admin","tags":"y"}"#,
        ))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let echo = reply.json();
    assert_eq!(echo["path"], "/tenants/acme?query=x&page=1&tag=a&added=yes&tag=b");
    let headers = &echo["headers"];
    assert!(headers.get("x-drop").is_none());
    assert!(headers.get("x-old").is_none());
    assert_eq!(headers["x-new"], "moved");
    assert_eq!(headers["x-replace"], "replaced");
    assert_eq!(headers["x-keep"], "mine", "add never overwrites");
    assert_eq!(headers["x-added"], "client");
    assert_eq!(headers["x-multi"], "one, two");
    let body: Value = serde_json::from_str(echo["body"].as_str().expect("body")).expect("json body");
    assert_eq!(
        body,
        json!({ "username": "u", "role": "viewer", "tags": ["y", "z"], "source": "gateway" })
    );

    let form = gw
        .proxy(request(
            "POST",
            "/t/beta",
            &[("content-type", "application/x-www-form-urlencoded")],
            "password=p&user=u&x=1",
        ))
        .await;
    assert_eq!(form.status, 200, "{}", form.text());
    assert_eq!(form.json()["body"], "username=u&x=1&source=gateway&tags=z");

    let not_json = gw
        .proxy(request(
            "POST",
            "/t/acme",
            &[("content-type", "application/json")],
            "{not json",
        ))
        .await;
    assert_eq!(not_json.status, 400);
    assert_eq!(
        not_json.message().as_deref(),
        Some("request body is not a valid JSON object")
    );

    let method = gw
        .proxy(request(
            "POST",
            "/m?a=1",
            &[("content-type", "application/x-www-form-urlencoded")],
            "b=2",
        ))
        .await;
    assert_eq!(method.json()["method"], "GET");
    assert_eq!(method.json()["path"], "/?a=1&b=2", "the form moved into the query");

    let host = gw.proxy(get("/h")).await;
    assert_eq!(host.json()["headers"]["host"], "rewritten.example");

    // Lua templates Strait cannot evaluate are refused at config time.
    let refused = gw
        .admin(
            "POST",
            "/plugins",
            &[("content-type", "application/json")],
            json!({ "name": "request-transformer", "config": { "add": { "headers": ["x:$(os.exit())"] } } })
                .to_string(),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_transformer_correlation_id_and_termination() {
    let routes = json!([
        { "name": "r", "paths": ["/r"], "plugins": [
            { "name": "response-transformer", "config": {
                "remove": { "headers": ["content-type"], "json": ["headers"] },
                "rename": { "json": ["method:verb"] },
                "add": { "headers": ["content-type:application/json", "x-added:1"], "json": ["count:3", "ok:true"], "json_types": ["number", "boolean"] },
                "append": { "headers": ["x-added:2"] }
            } },
            { "name": "correlation-id", "config": { "echo_downstream": true, "generator": "uuid" } }
        ] },
        { "name": "plain", "paths": ["/plain"], "plugins": [
            { "name": "response-transformer", "config": { "add": { "json": ["x:y"] } } }
        ] },
        { "name": "echo", "paths": ["/echo"], "plugins": [
            { "name": "request-termination", "config": { "status_code": 202, "echo": true } }
        ] },
        { "name": "trigger", "paths": ["/trigger"], "plugins": [
            { "name": "request-termination", "config": { "status_code": 418, "message": "maintenance", "trigger": "x-maintenance" } }
        ] }
    ]);
    let (gw, _upstream) = gateway_with_echo(&echo_service(routes, json!([]))).await;
    let reply = gw.proxy(get("/r")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["verb"], "GET");
    assert_eq!(body["count"], 3);
    assert_eq!(body["ok"], true);
    assert!(body.get("headers").is_none());
    let added: Vec<_> = reply
        .headers
        .get_all("x-added")
        .iter()
        .map(|v| v.to_str().unwrap_or(""))
        .collect();
    assert_eq!(added, ["1", "2"]);
    let id = reply.header("kong-request-id").expect("echoed correlation id");
    assert_eq!(id.len(), 36);
    let kept = gw
        .proxy(request("GET", "/r", &[("kong-request-id", "mine-1")], ""))
        .await;
    assert_eq!(kept.header("kong-request-id").as_deref(), Some("mine-1"));

    // A body that is not JSON is left alone.
    let big = gw.proxy(get("/plain/big?bytes=100")).await;
    assert_eq!(big.status, 200);
    assert_eq!(big.body.len(), 100);

    let echo = gw
        .proxy(request(
            "POST",
            "/echo?a=1",
            &[("content-type", "application/json"), ("x-h", "v")],
            r#"{"k":"v"}"#,
        ))
        .await;
    assert_eq!(echo.status, 202);
    let echoed = echo.json();
    assert_eq!(echoed["request"]["method"], "POST");
    assert_eq!(echoed["request"]["query"]["a"], "1");
    assert_eq!(echoed["request"]["headers"]["x-h"], "v");
    assert_eq!(echoed["request"]["body"]["k"], "v");
    assert_eq!(echoed["matched_route"]["name"], "echo");

    assert_eq!(gw.proxy(get("/trigger")).await.status, 200, "no trigger: proxied");
    let triggered = gw
        .proxy(request("GET", "/trigger", &[("x-maintenance", "1")], ""))
        .await;
    assert_eq!(triggered.status, 418);
    assert_eq!(triggered.message().as_deref(), Some("maintenance"));
    assert_eq!(gw.proxy(get("/trigger?x-maintenance")).await.status, 418);
}
