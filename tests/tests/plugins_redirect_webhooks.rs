//! redirect and standard-webhooks end to end: the answers Kong 3.9 gives,
//! and what reaches the upstream when a signed webhook passes.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde_json::json;
use strait_e2e::plugins::{echo_headers, echo_service, gateway_with_echo};
use strait_e2e::{get, request};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirect_answers_with_the_location_and_keeps_the_path_when_asked() {
    let routes = json!([
        { "name": "moved", "paths": ["/moved"], "plugins": [{ "name": "redirect", "config": {
            "location": "https://new.example/landing?from=old#top" } }] },
        { "name": "kept", "paths": ["/kept"], "strip_path": false, "plugins": [{ "name": "redirect", "config": {
            "status_code": 308, "location": "https://new.example:8443/ignored?x=1#top", "keep_incoming_path": true } }] },
        { "name": "open", "paths": ["/open"] }
    ]);
    let (gw, _upstream) = gateway_with_echo(&echo_service(routes, json!([]))).await;

    let moved = gw.proxy(get("/moved/deeper?q=1")).await;
    assert_eq!(moved.status, 301);
    assert_eq!(
        moved.header("location").as_deref(),
        Some("https://new.example/landing?from=old#top")
    );
    assert_eq!(moved.text(), "redirecting");
    assert!(moved.header("content-type").is_none(), "a string body has no type");

    let kept = gw.proxy(get("/kept/a/b?q=1&r")).await;
    assert_eq!(kept.status, 308);
    assert_eq!(
        kept.header("location").as_deref(),
        Some("https://new.example:8443/kept/a/b?q=1&r#top")
    );
    let no_query = gw.proxy(get("/kept")).await;
    assert_eq!(
        no_query.header("location").as_deref(),
        Some("https://new.example:8443/kept#top")
    );

    // Routes without the plugin still proxy.
    assert_eq!(gw.proxy(get("/open")).await.status, 200);

    // A location that is not a URL is refused with the field's path.
    let refused = gw
        .admin(
            "POST",
            "/plugins",
            &[("content-type", "application/json")],
            json!({ "name": "redirect", "config": { "location": "new.example/landing" } }).to_string(),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(refused.json()["fields"]["config"]["location"], "missing host in url");
    let no_location = gw
        .admin(
            "POST",
            "/plugins",
            &[("content-type", "application/json")],
            json!({ "name": "redirect", "config": { "status_code": 302 } }).to_string(),
        )
        .await;
    assert_eq!(no_location.status, 400, "{}", no_location.text());
    assert_eq!(
        no_location.json()["fields"]["config"]["location"],
        "required field missing"
    );
}

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The spec's `v1,` signature of `id.timestamp.body` under the raw secret.
fn sign(id: &str, timestamp: &str, body: &str) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SECRET.as_bytes());
    let tag = ring::hmac::sign(&key, format!("{id}.{timestamp}.{body}").as_bytes());
    format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(tag.as_ref()))
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_webhooks_lets_only_signed_recent_webhooks_through() {
    let routes = json!([
        { "name": "hooks", "paths": ["/hooks"], "plugins": [{ "name": "standard-webhooks", "config": {
            "secret_v1": SECRET, "tolerance_second": 60 } }] }
    ]);
    let (gw, _upstream) = gateway_with_echo(&echo_service(routes, json!([]))).await;
    let body = r#"{"type":"invoice.paid","id":42}"#;
    let ts = now().to_string();
    let good = sign("msg_1", &ts, body);
    let send = |headers: Vec<(&'static str, String)>, body: &'static str| {
        let gw = &gw;
        async move {
            let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            gw.proxy(request("POST", "/hooks", &headers, body)).await
        }
    };
    let headers = |id: &str, ts: &str, signature: &str| {
        vec![
            ("content-type", "application/json".to_string()),
            ("webhook-id", id.to_string()),
            ("webhook-timestamp", ts.to_string()),
            ("webhook-signature", signature.to_string()),
        ]
    };

    let passed = send(headers("msg_1", &ts, &good), body).await;
    assert_eq!(passed.status, 200, "{}", passed.text());
    assert_eq!(echo_headers(&passed)["webhook-id"], "msg_1");
    assert_eq!(passed.json()["body"], body);

    // Each failure is Kong's 400.
    let old_ts = (now() - 120).to_string();
    let cases = [
        (
            "another body",
            headers("msg_1", &ts, &good),
            r#"{"type":"invoice.paid","id":43}"#,
        ),
        ("another id", headers("msg_2", &ts, &good), body),
        (
            "too old",
            headers("msg_1", &old_ts, &sign("msg_1", &old_ts, body)),
            body,
        ),
        (
            "not a number",
            headers("msg_1", "soon", &sign("msg_1", "0", body)),
            body,
        ),
        ("no signature", headers("msg_1", &ts, &good)[..3].to_vec(), body),
        (
            "several signatures",
            headers("msg_1", &ts, &format!("{good} v1,AAAA")),
            body,
        ),
        ("no body", headers("msg_1", &ts, &sign("msg_1", &ts, "")), ""),
    ];
    for (case, headers, body) in cases {
        let refused = send(headers, body).await;
        assert_eq!(refused.status, 400, "{case}: {}", refused.text());
        assert_eq!(refused.json(), json!({ "message": "Bad request" }), "{case}");
    }

    // A timestamp ahead of the clock passes, as in Kong.
    let ahead = (now() + 600).to_string();
    let future = send(headers("msg_3", &ahead, &sign("msg_3", &ahead, body)), body).await;
    assert_eq!(future.status, 200, "{}", future.text());

    // The plugin cannot be scoped to a consumer, and the tolerance is checked.
    let refused = gw
        .admin(
            "POST",
            "/plugins",
            &[("content-type", "application/json")],
            json!({ "name": "standard-webhooks", "config": { "secret_v1": "s", "tolerance_second": -5 } }).to_string(),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(
        refused.json()["fields"]["config"]["tolerance_second"],
        "value must be greater than -1"
    );
}
