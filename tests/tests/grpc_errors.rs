//! What a gRPC client gets when Strait or a plugin answers instead of the upstream: a
//! trailers-only gRPC status (HTTP 200, `grpc-status`, `grpc-message`), never a JSON body;
//! the upstream's own answers pass untouched.

use serde_json::{json, Value};
use strait_e2e::declarative::config;
use strait_e2e::{refusing_addr, request, Conn, Gateway, GatewayOptions, Reply, Upstream, UpstreamKind};

fn grpc_service(name: &str, url: &str, path: &str, extra: Value) -> Value {
    let mut svc = json!({ "name": name, "url": url, "retries": 0, "read_timeout": 300,
        "routes": [{ "name": name, "paths": [path], "protocols": ["grpc", "grpcs"], "strip_path": false }] });
    for (key, value) in extra.as_object().expect("object") {
        svc[key] = value.clone();
    }
    svc
}

async fn call(conn: &mut Conn, path: &str) -> Reply {
    let headers = [("content-type", "application/grpc"), ("te", "trailers")];
    conn.send(request("POST", path, &headers, "\0\0\0\0\0"))
        .await
        .expect("grpc call")
}

fn status_of(reply: &Reply) -> (u16, Option<String>, Option<String>) {
    (
        reply.status.as_u16(),
        reply.header("grpc-status"),
        reply.header("grpc-message"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_errors_reach_grpc_clients_as_grpc_statuses() {
    let up = Upstream::start(UpstreamKind::H2c).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let mut keyed = grpc_service("keyed", &up.url("grpc"), "/keyed.Service", json!({}));
    keyed["routes"][0]["plugins"] = json!([{ "name": "key-auth" }]);
    let mut limited = grpc_service("limited", &up.url("grpc"), "/limited.Service", json!({}));
    limited["routes"][0]["plugins"] = json!([{ "name": "rate-limiting", "config": { "minute": 1 } }]);
    let mut cfg = config(vec![]);
    cfg["services"] = json!([
        grpc_service(
            "down",
            &format!("grpc://{}", refusing_addr()),
            "/down.Service",
            json!({})
        ),
        grpc_service("slow", &up.url("grpc"), "/hang", json!({})),
        grpc_service("fine", &up.url("grpc"), "/status", json!({})),
        // Waits a minute for headers unless the call's grpc-timeout says less.
        json!({ "name": "patient", "url": up.url("grpc"), "read_timeout": 60_000,
            "routes": [{ "name": "patient", "paths": ["/hang"], "headers": { "x-patient": ["yes"] },
                "protocols": ["grpc"], "strip_path": false }] }),
        keyed,
        limited,
    ]);
    gw.apply(&cfg).await;
    let mut conn = Conn::h2c(gw.proxy_addr()).await.expect("h2c connect");
    let some = |s: &str| Some(s.to_string());
    let expected = [
        ("/nowhere.Service/Call", "5", "no Route matched with those values"),
        (
            "/down.Service/Call",
            "14",
            "An invalid response was received from the upstream server",
        ),
        ("/hang", "4", "The upstream server is timing out"),
        ("/keyed.Service/Call", "16", "No API key found in request"),
    ];
    for (path, status, message) in expected {
        let reply = call(&mut conn, path).await;
        assert_eq!(status_of(&reply), (200, some(status), some(message)), "{path}");
        assert_eq!(reply.header("content-type").as_deref(), Some("application/grpc"));
        assert!(reply.body.is_empty(), "{path}: trailers-only, no body");
        assert!(reply.header("x-kong-request-id").is_some());
    }
    assert_eq!(call(&mut conn, "/limited.Service/Call").await.status, 200);
    let limited = call(&mut conn, "/limited.Service/Call").await;
    assert_eq!(status_of(&limited), (200, some("8"), some("API rate limit exceeded")));

    // grpc-timeout is the call's deadline.
    let started = std::time::Instant::now();
    let headers = [
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("grpc-timeout", "300m"),
        ("x-patient", "yes"),
    ];
    let late = conn
        .send(request("POST", "/hang", &headers, "\0\0\0\0\0"))
        .await
        .expect("grpc call");
    assert_eq!(status_of(&late).1, some("4"), "{:?}", status_of(&late));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // The upstream's own answer, even an error, is not rewritten.
    let passed = call(&mut conn, "/status/503").await;
    assert_eq!(passed.status, 503);
    assert_eq!(passed.header("grpc-status"), None);

    // A client that does not speak gRPC still gets Kong's JSON.
    let plain = gw.proxy(strait_e2e::get("/nowhere")).await;
    assert_eq!(plain.status, 404);
    assert_eq!(plain.json()["message"], "no Route matched with those values");
}
