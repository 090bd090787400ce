//! azure-functions end to end: the request the function receives (method,
//! path, query, headers but `Host`, body, the injected keys) and its answer
//! relayed in place of the upstream's; Kong's 500 when it cannot be called.

use serde_json::json;
use strait_e2e::plugins::{echo_service, gateway_with_echo};
use strait_e2e::request;
use strait_e2e::upstream::Upstream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_functions_calls_the_function_and_answers_with_it() {
    // The function app: an echo server on 127.0.0.1:80 (`https: false` fixes
    // the port at 80), named `<appname>.<hostdomain>` = `127.0.0.1`.
    let function = Upstream::start_at("127.0.0.1:80".parse().expect("addr")).await;
    let routes = json!([
        { "name": "fn", "paths": ["/fn"], "plugins": [{ "name": "azure-functions", "config": {
            "appname": "127.0.0", "hostdomain": "1", "https": false, "routeprefix": "/api/",
            "functionname": "echo/hello", "apikey": "function-key", "clientid": "client-7" } }] },
        { "name": "gone", "paths": ["/gone"], "plugins": [{ "name": "azure-functions", "config": {
            "appname": "127.0.0", "hostdomain": "2", "https": false, "functionname": "hello", "timeout": 2000 } }] }
    ]);
    let (gw, upstream) = gateway_with_echo(&echo_service(routes, json!([]))).await;
    let reply = gw
        .proxy(request(
            "POST",
            "/fn/ignored?name=ada&tags=a&tags=b",
            &[("content-type", "text/plain"), ("x-trace", "t-1")],
            "hello function",
        ))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = reply.json();
    assert_eq!(seen["method"], "POST");
    assert_eq!(seen["path"], "/api/echo/hello?name=ada&tags=a&tags=b");
    assert_eq!(seen["body"], "hello function");
    let headers = &seen["headers"];
    assert_eq!(headers["x-functions-key"], "function-key");
    assert_eq!(headers["x-functions-clientid"], "client-7");
    assert_eq!(headers["x-trace"], "t-1");
    assert_eq!(
        headers["host"], "127.0.0.1",
        "Strait's Host for the function, not the client's"
    );
    assert_eq!(upstream.hits(), 0, "the service's upstream is not called");

    // The function's status and headers come back.
    let missing = gw.proxy(request("GET", "/fn?x=1", &[], "")).await;
    assert_eq!(missing.status, 200);
    assert_eq!(missing.header("content-type").as_deref(), Some("application/json"));

    // Nothing listens: Kong's 500.
    let gone = gw.proxy(request("GET", "/gone", &[], "")).await;
    assert_eq!(gone.status, 500);
    assert_eq!(gone.json(), json!({ "message": "An unexpected error occurred" }));
    drop(function);
}
