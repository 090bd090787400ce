use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use http::Version;
use ring::hmac;
use serde_json::{json, Value};

use super::HmacAuth;
use crate::auth::test_support::{Outcome, TestDirectory, TestRequest};
use crate::phase::Plugin;

fn plugin(config: Value) -> HmacAuth {
    let Value::Object(map) = config else { panic!("object") };
    HmacAuth::from_config(&map).expect("config")
}

fn directory() -> TestDirectory {
    let mut directory = TestDirectory::default();
    let bob = directory.consumer("bob");
    directory.consumer("anon");
    directory.hmac_credential(bob, "bob", "secret");
    directory
}

fn http_date(offset_seconds: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    let at = now + offset_seconds;
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][at.div_euclid(86_400).rem_euclid(7) as usize];
    let t = strait_runtime::clock::UtcTime::of(at as u64);
    format!(
        "{weekday}, {:02} {} {} {} GMT",
        t.day,
        t.month_name(),
        t.year,
        t.clock()
    )
}

fn sign(algorithm: hmac::Algorithm, secret: &str, signing_string: &str) -> String {
    STANDARD.encode(hmac::sign(&hmac::Key::new(algorithm, secret.as_bytes()), signing_string.as_bytes()).as_ref())
}

fn authorization(username: &str, algorithm: &str, headers: &str, signature: &str) -> String {
    format!(r#"hmac username="{username}", algorithm="{algorithm}", headers="{headers}", signature="{signature}""#)
}

/// A GET signed over `date` with hmac-sha256.
fn signed_get(date: &str) -> TestRequest {
    let signature = sign(hmac::HMAC_SHA256, "secret", &format!("date: {date}"));
    TestRequest::new("GET", "/resource?x=1").header("date", date).header(
        "authorization",
        &authorization("bob", "hmac-sha256", "date", &signature),
    )
}

fn run(plugin: &HmacAuth, request: &mut TestRequest) -> Outcome {
    request.run(plugin, &directory())
}

#[test]
fn every_algorithm_verifies() {
    let hmac_auth = plugin(json!({}));
    let date = http_date(0);
    for (name, algorithm) in [
        ("hmac-sha1", hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY),
        ("hmac-sha256", hmac::HMAC_SHA256),
        ("hmac-sha384", hmac::HMAC_SHA384),
        ("hmac-sha512", hmac::HMAC_SHA512),
    ] {
        let signature = sign(algorithm, "secret", &format!("date: {date}"));
        let mut request = TestRequest::new("GET", "/")
            .header("date", &date)
            .header("authorization", &authorization("bob", name, "date", &signature));
        let outcome = run(&hmac_auth, &mut request);
        assert_eq!(outcome.status(), 200, "{name}: {:?}", outcome.body());
        assert_eq!(outcome.consumer.as_deref(), Some("bob"));
        let credential = outcome.credential.expect("credential");
        assert_eq!(
            (credential.identifier_str(), credential.plugin),
            ("bob", "hmac-auth")
        );
        assert!(request.upstream_header("authorization").is_some(), "kept unless hidden");
    }
    let only_sha512 = plugin(json!({ "algorithms": ["hmac-sha512"] }));
    let outcome = run(&only_sha512, &mut signed_get(&date));
    assert_eq!(outcome.message().as_deref(), Some("HMAC signature cannot be verified"));
}

#[test]
fn signing_string_lines_follow_kong() {
    let hmac_auth = plugin(json!({}));
    let date = http_date(0);
    let lines = format!(
        "@request-target: post /a/b?q=1&r=2\nrequest-line: GET /x HTTP/1.1\nx-missing:\nDate: {date}\nPOST /a/b?q=1&r=2 HTTP/2.0"
    );
    // A header named `request-line` wins over the computed line.
    let signature = sign(hmac::HMAC_SHA256, "secret", &lines);
    let headers = "@request-target request-line x-missing Date request-line";
    let mut request = TestRequest::new("POST", "/a/b?q=1&r=2")
        .header("date", &date)
        .header("request-line", "GET /x HTTP/1.1")
        .header(
            "authorization",
            &authorization("bob", "hmac-sha256", headers, &signature),
        );
    request.version = Version::HTTP_2;
    let outcome = run(&hmac_auth, &mut request);
    assert_eq!(
        outcome.status(),
        401,
        "a header named request-line is used as is, once per mention"
    );
    let lines = format!(
        "@request-target: post /a/b?q=1&r=2\nrequest-line: GET /x HTTP/1.1\nx-missing:\nDate: {date}\nrequest-line: GET /x HTTP/1.1"
    );
    let signature = sign(hmac::HMAC_SHA256, "secret", &lines);
    let mut request = TestRequest::new("POST", "/a/b?q=1&r=2")
        .header("date", &date)
        .header("request-line", "GET /x HTTP/1.1")
        .header(
            "authorization",
            &authorization("bob", "hmac-sha256", headers, &signature),
        );
    assert_eq!(run(&hmac_auth, &mut request).status(), 200);

    let lines = format!("date: {date}\nPOST /a/b?q=1&r=2 HTTP/2.0");
    let signature = sign(hmac::HMAC_SHA256, "secret", &lines);
    let mut request = TestRequest::new("POST", "/a/b?q=1&r=2").header("date", &date).header(
        "authorization",
        &authorization("bob", "hmac-sha256", "date request-line", &signature),
    );
    request.version = Version::HTTP_2;
    assert_eq!(
        run(&hmac_auth, &mut request).status(),
        200,
        "request-line carries the HTTP version"
    );
}

#[test]
fn errors_are_kongs() {
    let hmac_auth = plugin(json!({ "enforce_headers": ["date"] }));
    let date = http_date(0);
    let outcome = run(&hmac_auth, &mut TestRequest::new("GET", "/"));
    assert_eq!(
        (outcome.status(), outcome.message().as_deref()),
        (401, Some("Unauthorized"))
    );
    assert_eq!(outcome.response_header("www-authenticate").as_deref(), Some("hmac"));

    let mut no_date =
        TestRequest::new("GET", "/").header("authorization", &authorization("bob", "hmac-sha256", "date", "x"));
    let outcome = run(&hmac_auth, &mut no_date);
    assert_eq!(
        outcome.message().as_deref(),
        Some("HMAC signature cannot be verified, a valid date or x-date header is required for HMAC Authentication")
    );
    let cannot = |mut request: TestRequest| run(&hmac_auth, &mut request).message();
    let dated = || TestRequest::new("GET", "/").header("date", &date);
    for value in [
        "Basic Ym9iOnNlY3JldA==".to_string(),
        authorization("bob", "hmac-md5", "date", "x"),
        authorization("bob", "hmac-sha256", "x-date", "x"),
        authorization("nobody", "hmac-sha256", "date", "x"),
    ] {
        assert_eq!(
            cannot(dated().header("authorization", &value)).as_deref(),
            Some("HMAC signature cannot be verified"),
            "{value}"
        );
    }
    for signature in ["bm90IGl0", "!!!", ""] {
        let value = authorization("bob", "hmac-sha256", "date", signature);
        let expected = if signature.is_empty() {
            "HMAC signature cannot be verified"
        } else {
            "HMAC signature does not match"
        };
        assert_eq!(
            cannot(dated().header("authorization", &value)).as_deref(),
            Some(expected),
            "{signature}"
        );
    }
    let realm = plugin(json!({ "realm": "strait" }));
    let outcome = run(&realm, &mut TestRequest::new("GET", "/"));
    assert_eq!(
        outcome.response_header("www-authenticate").as_deref(),
        Some("hmac realm=\"strait\"")
    );
}

#[test]
fn clock_skew_on_date_and_x_date() {
    let hmac_auth = plugin(json!({ "clock_skew": 60 }));
    assert_eq!(run(&hmac_auth, &mut signed_get(&http_date(-50))).status(), 200);
    let outcome = run(&hmac_auth, &mut signed_get(&http_date(-120)));
    assert_eq!(outcome.status(), 401);
    assert!(outcome
        .message()
        .expect("message")
        .contains("a valid date or x-date header"));
    assert_eq!(
        run(&hmac_auth, &mut signed_get(&http_date(120))).status(),
        401,
        "future dates too"
    );
    // A recent X-Date passes even when Date is old; the signature covers what is listed.
    let mut request = signed_get(&http_date(-3600)).header("x-date", &http_date(0));
    assert_eq!(run(&hmac_auth, &mut request).status(), 200);
    let mut request = signed_get("not a date");
    assert_eq!(run(&hmac_auth, &mut request).status(), 401);
}

#[test]
fn proxy_authorization_first_and_hide_credentials() {
    let hidden = plugin(json!({ "hide_credentials": true }));
    let date = http_date(0);
    let signature = sign(hmac::HMAC_SHA256, "secret", &format!("date: {date}"));
    let value = authorization("bob", "hmac-sha256", "date", &signature);
    let mut request = TestRequest::new("GET", "/")
        .header("date", &date)
        .header("proxy-authorization", &value)
        .header("authorization", "Bearer other");
    assert_eq!(run(&hidden, &mut request).status(), 200);
    assert!(request.upstream_header("proxy-authorization").is_none());
    assert_eq!(request.upstream_header("authorization"), Some("Bearer other"));

    let mut request = TestRequest::new("GET", "/")
        .header("date", &date)
        .header("proxy-authorization", "Basic x")
        .header("authorization", &value);
    assert_eq!(run(&hidden, &mut request).status(), 200);
    assert!(request.upstream_header("authorization").is_none());
    assert_eq!(request.upstream_header("proxy-authorization"), Some("Basic x"));

    // Kong hides the header it read even when the signature then fails.
    let mut request = TestRequest::new("GET", "/")
        .header("date", &date)
        .header("authorization", &authorization("bob", "hmac-sha256", "date", "bm9w"));
    assert_eq!(run(&hidden, &mut request).status(), 401);
    assert!(request.upstream_header("authorization").is_none());
}

#[test]
fn body_digest_when_validating_the_body() {
    let hmac_auth = plugin(json!({ "validate_request_body": true }));
    assert!(hmac_auth.reads_request_body());
    assert!(!plugin(json!({})).reads_request_body());
    let date = http_date(0);
    let body = r#"{"a":1}"#;
    let digest = format!(
        "SHA-256={}",
        STANDARD.encode(ring::digest::digest(&ring::digest::SHA256, body.as_bytes()))
    );
    let signed = |digest: Option<&str>| {
        let mut lines = format!("date: {date}");
        let mut names = "date".to_string();
        if let Some(digest) = digest {
            lines.push_str(&format!("\ndigest: {digest}"));
            names.push_str(" digest");
        }
        let signature = sign(hmac::HMAC_SHA256, "secret", &lines);
        let request = TestRequest::new("POST", "/").header("date", &date).header(
            "authorization",
            &authorization("bob", "hmac-sha256", &names, &signature),
        );
        match digest {
            Some(digest) => request.header("digest", digest),
            None => request,
        }
    };
    assert_eq!(run(&hmac_auth, &mut signed(Some(&digest)).body(body)).status(), 200);
    let outcome = run(&hmac_auth, &mut signed(Some(&digest)).body("tampered"));
    assert_eq!(outcome.message().as_deref(), Some("HMAC signature does not match"));
    assert_eq!(
        run(&hmac_auth, &mut signed(None).body(body)).status(),
        401,
        "a body needs a digest"
    );
    assert_eq!(run(&hmac_auth, &mut signed(None)).status(), 200, "no body, no digest");
    assert_eq!(run(&hmac_auth, &mut signed(None).body("")).status(), 200);
    let unchecked = plugin(json!({}));
    assert_eq!(
        run(&unchecked, &mut signed(Some(&digest)).body("tampered")).status(),
        200
    );
}

#[test]
fn anonymous_falls_back() {
    let hmac_auth = plugin(json!({ "anonymous": "anon" }));
    let outcome = run(&hmac_auth, &mut TestRequest::new("GET", "/"));
    assert_eq!(outcome.status(), 200);
    assert_eq!(outcome.consumer.as_deref(), Some("anon"));
    assert!(outcome.credential.is_none());
    let outcome = run(&hmac_auth, &mut signed_get(&http_date(0)));
    assert_eq!(outcome.consumer.as_deref(), Some("bob"));
}

#[test]
fn config_is_checked() {
    let mut map = serde_json::Map::new();
    map.insert("clock_skew".into(), json!(0));
    assert!(HmacAuth::from_config(&map).is_err());
    map.insert("clock_skew".into(), json!(1.5));
    map.insert("algorithms".into(), json!(["hmac-md5"]));
    assert!(HmacAuth::from_config(&map).is_err());
    let defaults = plugin(json!({}));
    assert_eq!(defaults.algorithms.len(), 4);
    assert_eq!(defaults.clock_skew, 300.0);
}
