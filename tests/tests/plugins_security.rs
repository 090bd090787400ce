//! basic-auth, ip-restriction, cors, bot-detection and
//! request-size-limiting end to end against a real upstream.

use base64::Engine;
use serde_json::json;
use strait_e2e::plugins::{echo_service, gateway_with_echo};
use strait_e2e::{get, request};

fn basic(user: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_checks_hashed_passwords() {
    let consumers = json!([
        { "username": "carol", "basicauth_credentials": [{ "username": "carol-login", "password": "s3cret:with:colons" }] }
    ]);
    let routes = json!([
        { "name": "b", "paths": ["/b"], "plugins": [{ "name": "basic-auth", "config": { "hide_credentials": true } }] },
        { "name": "realm", "paths": ["/realm"], "plugins": [{ "name": "basic-auth", "config": { "realm": "vault" } }] }
    ]);
    let (gw, _upstream) = gateway_with_echo(&echo_service(routes, consumers)).await;
    let ok = gw
        .proxy(request(
            "GET",
            "/b",
            &[("authorization", &basic("carol-login", "s3cret:with:colons"))],
            "",
        ))
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    let headers = &ok.json()["headers"];
    assert_eq!(headers["x-consumer-username"], "carol");
    assert_eq!(headers["x-credential-identifier"], "carol-login");
    assert!(headers.get("authorization").is_none(), "hidden");
    let proxy_auth = gw
        .proxy(request(
            "GET",
            "/b",
            &[("proxy-authorization", &basic("carol-login", "s3cret:with:colons"))],
            "",
        ))
        .await;
    assert_eq!(proxy_auth.status, 200);
    for header in [
        basic("carol-login", "wrong"),
        basic("nobody", "x"),
        "Basic !!!".into(),
        "Bearer abc".into(),
    ] {
        let reply = gw.proxy(request("GET", "/b", &[("authorization", &header)], "")).await;
        assert_eq!(reply.status, 401, "{header}");
        assert_eq!(reply.message().as_deref(), Some("Unauthorized"));
        assert_eq!(
            reply.header("www-authenticate").as_deref(),
            Some("Basic realm=\"service\"")
        );
    }
    let realm = gw.proxy(get("/realm")).await;
    assert_eq!(realm.status, 401);
    assert_eq!(
        realm.header("www-authenticate").as_deref(),
        Some("Basic realm=\"vault\"")
    );
    // The stored password is Kong's salted hash, never the password.
    let listed = gw.admin_get("/basic-auths").await.json();
    let stored = listed["data"][0]["password"].as_str().expect("password").to_string();
    assert_eq!(stored.len(), 40);
    assert!(!stored.contains("s3cret"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_restriction_denies_then_allows() {
    let routes = json!([
        { "name": "deny", "paths": ["/deny"], "plugins": [{ "name": "ip-restriction", "config": { "deny": ["127.0.0.0/8"] } }] },
        { "name": "custom", "paths": ["/custom"], "plugins": [{ "name": "ip-restriction", "config": { "deny": ["127.0.0.1"], "status": 451, "message": "go away" } }] },
        { "name": "allow", "paths": ["/allow"], "plugins": [{ "name": "ip-restriction", "config": { "allow": ["127.0.0.1/32", "::1"] } }] },
        { "name": "other", "paths": ["/other"], "plugins": [{ "name": "ip-restriction", "config": { "allow": ["10.0.0.0/8"] } }] }
    ]);
    let (gw, _upstream) = gateway_with_echo(&echo_service(routes, json!([]))).await;
    let denied = gw.proxy(get("/deny")).await;
    assert_eq!(denied.status, 403);
    assert_eq!(denied.message().as_deref(), Some("IP address not allowed: 127.0.0.1"));
    let custom = gw.proxy(get("/custom")).await;
    assert_eq!(custom.status, 451);
    assert_eq!(custom.message().as_deref(), Some("go away"));
    assert_eq!(gw.proxy(get("/allow")).await.status, 200);
    assert_eq!(gw.proxy(get("/other")).await.status, 403);
    // A bad CIDR is refused at config time with the field path.
    let refused = gw
        .admin(
            "POST",
            "/plugins",
            &[("content-type", "application/json")],
            json!({ "name": "ip-restriction", "config": { "allow": ["10.0.0.0/99"] } }).to_string(),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert!(
        refused.json()["fields"]["config"]["allow"].is_array(),
        "{}",
        refused.text()
    );
    let neither = gw
        .admin(
            "POST",
            "/plugins",
            &[("content-type", "application/json")],
            json!({ "name": "ip-restriction", "config": {} }).to_string(),
        )
        .await;
    assert_eq!(neither.status, 400, "{}", neither.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_answers_preflights_and_decorates_responses() {
    let routes = json!([
        { "name": "listed", "paths": ["/listed"], "plugins": [{ "name": "cors", "config": {
            "origins": ["https://app.example", "(.*)\\.trusted\\.example"],
            "credentials": true, "exposed_headers": ["x-total"], "max_age": 600, "headers": ["x-token", "content-type"]
        } }] },
        { "name": "star", "paths": ["/star"], "plugins": [{ "name": "cors" }] },
        { "name": "onward", "paths": ["/onward"], "plugins": [{ "name": "cors", "config": { "preflight_continue": true } }] }
    ]);
    let (gw, upstream) = gateway_with_echo(&echo_service(routes, json!([]))).await;
    let preflight = gw
        .proxy(request(
            "OPTIONS",
            "/listed",
            &[
                ("origin", "https://app.example"),
                ("access-control-request-method", "POST"),
            ],
            "",
        ))
        .await;
    assert_eq!(preflight.status, 200);
    assert_eq!(
        preflight.header("access-control-allow-origin").as_deref(),
        Some("https://app.example")
    );
    assert_eq!(
        preflight.header("access-control-allow-credentials").as_deref(),
        Some("true")
    );
    assert_eq!(
        preflight.header("access-control-allow-headers").as_deref(),
        Some("x-token,content-type")
    );
    assert_eq!(
        preflight.header("access-control-allow-methods").as_deref(),
        Some("GET,HEAD,PUT,PATCH,POST,DELETE,OPTIONS,TRACE,CONNECT")
    );
    assert_eq!(preflight.header("access-control-max-age").as_deref(), Some("600"));
    assert_eq!(preflight.header("vary").as_deref(), Some("Origin"));
    assert_eq!(upstream.hits(), 0, "the preflight never reached the upstream");

    let by_regex = gw
        .proxy(request(
            "GET",
            "/listed",
            &[("origin", "https://api.trusted.example")],
            "",
        ))
        .await;
    assert_eq!(by_regex.status, 200);
    assert_eq!(
        by_regex.header("access-control-allow-origin").as_deref(),
        Some("https://api.trusted.example")
    );
    assert_eq!(
        by_regex.header("access-control-expose-headers").as_deref(),
        Some("x-total")
    );
    let stranger = gw
        .proxy(request("GET", "/listed", &[("origin", "https://evil.example")], ""))
        .await;
    assert_eq!(stranger.status, 200);
    assert!(stranger.header("access-control-allow-origin").is_none());

    let star = gw
        .proxy(request("GET", "/star", &[("origin", "https://x.example")], ""))
        .await;
    assert_eq!(star.header("access-control-allow-origin").as_deref(), Some("*"));
    let onward = gw
        .proxy(request(
            "OPTIONS",
            "/onward",
            &[
                ("origin", "https://x.example"),
                ("access-control-request-method", "GET"),
            ],
            "",
        ))
        .await;
    assert_eq!(
        onward.json()["method"],
        "OPTIONS",
        "preflight_continue proxies the preflight"
    );
    assert!(onward.header("access-control-allow-origin").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bot_detection_and_request_size_limiting() {
    let routes = json!([
        { "name": "bots", "paths": ["/bots"], "plugins": [{ "name": "bot-detection", "config": { "allow": ["^friendly-crawler"], "deny": ["^bad-agent"] } }] },
        { "name": "size", "paths": ["/size"], "plugins": [{ "name": "request-size-limiting", "config": { "allowed_payload_size": 10, "size_unit": "bytes" } }] },
        { "name": "strict", "paths": ["/strict"], "plugins": [{ "name": "request-size-limiting", "config": { "require_content_length": true } }] }
    ]);
    let (gw, upstream) = gateway_with_echo(&echo_service(routes, json!([]))).await;
    let ua = |agent: &'static str| request("GET", "/bots", &[("user-agent", agent)], "");
    assert_eq!(gw.proxy(ua("Mozilla/5.0 Firefox/120.0")).await.status, 200);
    let bot = gw.proxy(ua("Googlebot/2.1 (+http://www.google.com/bot.html)")).await;
    assert_eq!(bot.status, 403);
    assert_eq!(bot.message().as_deref(), Some("Forbidden"));
    assert_eq!(gw.proxy(ua("bad-agent/1.0")).await.status, 403);
    assert_eq!(gw.proxy(ua("friendly-crawler/1.0")).await.status, 200);
    let two = gw
        .proxy(request("GET", "/bots", &[("user-agent", "a"), ("user-agent", "b")], ""))
        .await;
    assert_eq!(two.status, 400);
    assert_eq!(two.message().as_deref(), Some("Only one User-Agent header allowed"));

    let small = gw.proxy(request("POST", "/size", &[], "0123456789")).await;
    assert_eq!(small.status, 200);
    let hits = upstream.hits();
    let large = gw.proxy(request("POST", "/size", &[], "0123456789A")).await;
    assert_eq!(large.status, 413);
    assert_eq!(large.message().as_deref(), Some("Request size limit exceeded"));
    assert_eq!(upstream.hits(), hits, "refused before the upstream");
    // A chunked body (no Content-Length) is measured as it is read.
    let chunked = strait_e2e::send_h1_raw(
        gw.proxy_addr(),
        b"POST /size HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n6\r\n012345\r\n6\r\n678901\r\n0\r\n\r\n",
    )
    .await;
    assert!(chunked.starts_with("HTTP/1.1 413"), "{chunked}");
    let chunked_small = strait_e2e::send_h1_raw(
        gw.proxy_addr(),
        b"POST /size HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    )
    .await;
    assert!(chunked_small.starts_with("HTTP/1.1 200"), "{chunked_small}");
    assert!(
        chunked_small.contains("\\\"body\\\":\\\"abc\\\"") || chunked_small.contains("\"body\":\"abc\""),
        "{chunked_small}"
    );
    let no_length = gw.proxy(get("/strict")).await;
    assert_eq!(no_length.status, 411);
    assert_eq!(
        no_length.message().as_deref(),
        Some("A valid Content-Length header is required")
    );
}
