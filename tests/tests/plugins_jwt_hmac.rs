//! The signed-request plugins end to end, with a real upstream: jwt (HMAC,
//! RSA and ECDSA tokens from header, query and cookie, every documented
//! error with Kong's status, body and `WWW-Authenticate`, registered
//! claims, maximum_expiration, anonymous) and hmac-auth (algorithms,
//! `@request-target` and `request-line`, clock skew on Date and X-Date,
//! enforce_headers, hide_credentials, the body digest, anonymous).

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, RsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING, RSA_PKCS1_SHA256};
use serde_json::{json, Value};
use strait_e2e::plugins::{echo_headers, gateway_with_echo};
use strait_e2e::{get, request, Reply};

const RSA_PRIVATE_KEY: &str = include_str!("keys/jwt_rsa_private.pem");
const RSA_PUBLIC_KEY: &str = include_str!("keys/jwt_rsa_public.pem");

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn signing_input(alg: &str, claims: &Value) -> String {
    let header = json!({ "typ": "JWT", "alg": alg });
    format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    )
}

fn hs256(secret: &str, claims: Value) -> String {
    let input = signing_input("HS256", &claims);
    let tag = ring::hmac::sign(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes()),
        input.as_bytes(),
    );
    format!("{input}.{}", b64(tag.as_ref()))
}

fn rs256(claims: Value) -> String {
    let key = rustls_pemfile::private_key(&mut RSA_PRIVATE_KEY.as_bytes())
        .expect("pem")
        .expect("a key");
    let pair = RsaKeyPair::from_pkcs8(key.secret_der()).expect("rsa key");
    let input = signing_input("RS256", &claims);
    let mut signature = vec![0; pair.public().modulus_len()];
    pair.sign(
        &RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        input.as_bytes(),
        &mut signature,
    )
    .expect("sign");
    format!("{input}.{}", b64(&signature))
}

/// A P-256 key: the public PEM for the credential, and a signer.
struct EcKey {
    public_pem: String,
    pair: EcdsaKeyPair,
}

impl EcKey {
    fn generate() -> EcKey {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("ec key");
        let pair = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            &key.serialize_der(),
            &SystemRandom::new(),
        )
        .expect("pkcs8");
        EcKey {
            public_pem: key.public_key_pem(),
            pair,
        }
    }

    fn es256(&self, claims: Value) -> String {
        let input = signing_input("ES256", &claims);
        let signature = self.pair.sign(&SystemRandom::new(), input.as_bytes()).expect("sign");
        format!("{input}.{}", b64(signature.as_ref()))
    }
}

fn bearer(path: &str, token: &str) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    request("GET", path, &[("authorization", &format!("Bearer {token}"))], "")
}

/// Asserts a 401 with Kong's `{"message"}` and `WWW-Authenticate`.
fn assert_refused(reply: &Reply, message: &str, www_authenticate: &str) {
    assert_eq!(reply.status, 401, "{message}: {}", reply.text());
    assert_eq!(reply.json(), json!({ "message": message }));
    assert_eq!(
        reply.header("www-authenticate").as_deref(),
        Some(www_authenticate),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_verifies_tokens_and_answers_like_kong() {
    let ec = EcKey::generate();
    let config = json!({
        "_format_version": "3.0",
        "consumers": [
            {
                "username": "alice", "custom_id": "a-1",
                "jwt_secrets": [
                    { "key": "alice-hs", "secret": "alice-secret" },
                    { "key": "alice-rs", "algorithm": "RS256", "rsa_public_key": RSA_PUBLIC_KEY },
                    { "key": "alice-es", "algorithm": "ES256", "rsa_public_key": ec.public_pem }
                ]
            },
            { "username": "anon" }
        ],
        "services": [{
            "name": "echo", "url": "UPSTREAM",
            "routes": [
                { "name": "plain", "paths": ["/jwt"], "plugins": [{ "name": "jwt" }] },
                { "name": "claims", "paths": ["/claims"], "plugins": [{ "name": "jwt", "config": {
                    "claims_to_verify": ["exp", "nbf"], "maximum_expiration": 3600,
                    "cookie_names": ["token"], "realm": "strait"
                } }] },
                { "name": "anonymous", "paths": ["/anonymous"], "plugins": [{
                    "name": "jwt", "config": { "anonymous": "anon" }
                }] }
            ]
        }]
    });
    let (gw, _upstream) = gateway_with_echo(&config).await;
    let plain_error = "Bearer error=\"invalid_token\"";

    let missing = gw.proxy(get("/jwt")).await;
    assert_refused(&missing, "Unauthorized", "Bearer");

    // One token per algorithm family, each naming its credential by `iss`.
    let tokens = [
        ("alice-hs", hs256("alice-secret", json!({ "iss": "alice-hs" }))),
        ("alice-rs", rs256(json!({ "iss": "alice-rs" }))),
        ("alice-es", ec.es256(json!({ "iss": "alice-es" }))),
    ];
    for (key, token) in &tokens {
        let ok = gw.proxy(bearer("/jwt", token)).await;
        assert_eq!(ok.status, 200, "{key}: {}", ok.text());
        let headers = echo_headers(&ok);
        assert_eq!(headers["x-consumer-username"], "alice");
        assert_eq!(headers["x-consumer-custom-id"], "a-1");
        assert_eq!(headers["x-credential-identifier"], *key);
        assert!(headers.get("x-anonymous-consumer").is_none());
        assert_eq!(
            headers["authorization"],
            format!("Bearer {token}"),
            "jwt never hides the token"
        );
    }
    let by_query = gw.proxy(get(&format!("/jwt?jwt={}", tokens[0].1))).await;
    assert_eq!(by_query.status, 200);
    assert_eq!(echo_headers(&by_query)["x-credential-identifier"], "alice-hs");

    let forged = hs256("not-the-secret", json!({ "iss": "alice-hs" }));
    assert_refused(
        &gw.proxy(bearer("/jwt", &forged)).await,
        "Invalid signature",
        plain_error,
    );
    let swapped = hs256("alice-secret", json!({ "iss": "alice-rs" }));
    assert_refused(
        &gw.proxy(bearer("/jwt", &swapped)).await,
        "Invalid algorithm",
        plain_error,
    );
    let other_ec = EcKey::generate().es256(json!({ "iss": "alice-es" }));
    assert_refused(
        &gw.proxy(bearer("/jwt", &other_ec)).await,
        "Invalid signature",
        plain_error,
    );
    let unknown = hs256("x", json!({ "iss": "nobody" }));
    assert_refused(
        &gw.proxy(bearer("/jwt", &unknown)).await,
        "No credentials found for given 'iss'",
        plain_error,
    );
    let no_iss = hs256("x", json!({ "sub": "alice" }));
    assert_refused(
        &gw.proxy(bearer("/jwt", &no_iss)).await,
        "No mandatory 'iss' in claims",
        plain_error,
    );
    for garbage in ["x".repeat(7_000), "a.b.c".to_string(), "e30.e30".to_string()] {
        let reply = gw.proxy(bearer("/jwt", &garbage)).await;
        assert_refused(&reply, "Bad token; invalid JSON", plain_error);
    }
    let none_alg = format!("{}.{}.", b64(br#"{"alg":"none"}"#), b64(br#"{"iss":"alice-hs"}"#));
    assert_refused(
        &gw.proxy(bearer("/jwt", &none_alg)).await,
        "Bad token; invalid alg",
        plain_error,
    );
    let two = gw
        .proxy(bearer(&format!("/jwt?jwt={}", tokens[1].1), &tokens[0].1))
        .await;
    assert_refused(&two, "Multiple tokens provided", plain_error);
    assert_refused(&gw.proxy(get("/jwt?jwt")).await, "Unrecognizable token", plain_error);

    // Registered claims answer with Kong's error object, not a message.
    let realm_error = "Bearer realm=\"strait\", error=\"invalid_token\"";
    let now = now();
    let fresh = hs256(
        "alice-secret",
        json!({ "iss": "alice-hs", "exp": now + 60, "nbf": now - 60 }),
    );
    let by_cookie = request("GET", "/claims", &[("cookie", &format!("other=1; token={fresh}"))], "");
    assert_eq!(gw.proxy(by_cookie).await.status, 200);
    let cases = [
        (
            json!({ "exp": now - 10, "nbf": now - 60 }),
            json!({ "exp": "token expired" }),
        ),
        (
            json!({ "exp": now + 60, "nbf": now + 60 }),
            json!({ "nbf": "token not valid yet" }),
        ),
        (json!({ "nbf": now - 60 }), json!({ "exp": "must be a number" })),
        (
            json!({ "exp": now + 7200, "nbf": now - 60 }),
            json!({ "exp": "exceeds maximum allowed expiration" }),
        ),
    ];
    for (mut claims, body) in cases {
        claims["iss"] = json!("alice-hs");
        let reply = gw.proxy(bearer("/claims", &hs256("alice-secret", claims))).await;
        assert_eq!(reply.status, 401, "{body}");
        assert_eq!(reply.json(), body);
        assert_eq!(reply.header("www-authenticate").as_deref(), Some(realm_error));
    }
    assert_refused(
        &gw.proxy(get("/claims")).await,
        "Unauthorized",
        "Bearer realm=\"strait\"",
    );

    let anonymous = gw.proxy(bearer("/anonymous", "garbage")).await;
    assert_eq!(anonymous.status, 200);
    let headers = echo_headers(&anonymous);
    assert_eq!(headers["x-consumer-username"], "anon");
    assert_eq!(headers["x-anonymous-consumer"], "true");
    assert!(headers.get("x-credential-identifier").is_none());
    let known = gw.proxy(bearer("/anonymous", &tokens[0].1)).await;
    assert_eq!(echo_headers(&known)["x-consumer-username"], "alice");
}

/// `Date` as HTTP writes it, `offset` seconds from now.
fn http_date(offset: i64) -> String {
    let at = now() + offset;
    let (days, seconds) = (at.div_euclid(86_400), at.rem_euclid(86_400));
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][days.rem_euclid(7) as usize];
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{weekday}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        months[(month - 1) as usize],
        seconds / 3600,
        seconds % 3600 / 60,
        seconds % 60
    )
}

/// `hmac username="bob", ...` signing `lines` with `algorithm`.
fn hmac_authorization(algorithm: &str, headers: &str, lines: &str) -> String {
    let ring_algorithm = match algorithm {
        "hmac-sha1" => ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
        "hmac-sha256" => ring::hmac::HMAC_SHA256,
        "hmac-sha384" => ring::hmac::HMAC_SHA384,
        _ => ring::hmac::HMAC_SHA512,
    };
    let key = ring::hmac::Key::new(ring_algorithm, b"bob-secret");
    let signature = STANDARD.encode(ring::hmac::sign(&key, lines.as_bytes()).as_ref());
    format!(r#"hmac username="bob", algorithm="{algorithm}", headers="{headers}", signature="{signature}""#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hmac_auth_verifies_signatures_like_kong() {
    let config = json!({
        "_format_version": "3.0",
        "consumers": [
            { "username": "bob", "hmacauth_credentials": [{ "username": "bob", "secret": "bob-secret" }] },
            { "username": "anon" }
        ],
        "services": [{
            "name": "echo", "url": "UPSTREAM",
            "routes": [
                { "name": "plain", "paths": ["/hmac"], "plugins": [{ "name": "hmac-auth" }] },
                { "name": "strict", "paths": ["/strict"], "plugins": [{ "name": "hmac-auth", "config": {
                    "hide_credentials": true, "clock_skew": 60, "enforce_headers": ["date", "@request-target"],
                    "algorithms": ["hmac-sha256", "hmac-sha512"], "realm": "strait"
                } }] },
                { "name": "body", "paths": ["/body"], "plugins": [{ "name": "hmac-auth", "config": {
                    "validate_request_body": true
                } }] },
                { "name": "anonymous", "paths": ["/anonymous"], "plugins": [{
                    "name": "hmac-auth", "config": { "anonymous": "anon" }
                }] }
            ]
        }]
    });
    let (gw, _upstream) = gateway_with_echo(&config).await;
    let date = http_date(0);

    assert_refused(&gw.proxy(get("/hmac")).await, "Unauthorized", "hmac");

    for algorithm in ["hmac-sha1", "hmac-sha256", "hmac-sha384", "hmac-sha512"] {
        let lines = format!("date: {date}\n@request-target: get /hmac?a=1\nGET /hmac?a=1 HTTP/1.1");
        let value = hmac_authorization(algorithm, "date @request-target request-line", &lines);
        let reply = gw
            .proxy(request(
                "GET",
                "/hmac?a=1",
                &[("date", &date), ("authorization", &value)],
                "",
            ))
            .await;
        assert_eq!(reply.status, 200, "{algorithm}: {}", reply.text());
        let headers = echo_headers(&reply);
        assert_eq!(headers["x-consumer-username"], "bob");
        assert_eq!(headers["x-credential-identifier"], "bob");
        assert_eq!(headers["authorization"], value, "kept unless hide_credentials");
    }

    let date_required =
        "HMAC signature cannot be verified, a valid date or x-date header is required for HMAC Authentication";
    let no_date = hmac_authorization("hmac-sha256", "date", "date:");
    let reply = gw
        .proxy(request("GET", "/hmac", &[("authorization", &no_date)], ""))
        .await;
    assert_refused(&reply, date_required, "hmac");
    let wrong = hmac_authorization("hmac-sha256", "date", "date: yesterday");
    let reply = gw
        .proxy(request(
            "GET",
            "/hmac",
            &[("date", &date), ("authorization", &wrong)],
            "",
        ))
        .await;
    assert_refused(&reply, "HMAC signature does not match", "hmac");
    let not_hmac = gw
        .proxy(request(
            "GET",
            "/hmac",
            &[("date", &date), ("authorization", "Basic Ym9i")],
            "",
        ))
        .await;
    assert_refused(&not_hmac, "HMAC signature cannot be verified", "hmac");

    // strict: old dates, enforced headers, allowed algorithms, hidden credentials.
    let strict_lines = |date: &str| format!("x-date: {date}\ndate: {date}\n@request-target: post /strict");
    let signed =
        |algorithm: &str, date: &str, headers: &str| hmac_authorization(algorithm, headers, &strict_lines(date));
    let strict = |value: String, date: String| {
        request(
            "POST",
            "/strict",
            &[("x-date", &date), ("date", &date), ("proxy-authorization", &value)],
            "",
        )
    };
    let headers = "x-date date @request-target";
    let ok = gw
        .proxy(strict(signed("hmac-sha512", &date, headers), date.clone()))
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert!(echo_headers(&ok).get("proxy-authorization").is_none(), "hidden");
    let old = http_date(-120);
    let reply = gw.proxy(strict(signed("hmac-sha512", &old, headers), old)).await;
    assert_refused(&reply, date_required, "hmac realm=\"strait\"");
    let sha1 = gw
        .proxy(strict(signed("hmac-sha1", &date, headers), date.clone()))
        .await;
    assert_refused(&sha1, "HMAC signature cannot be verified", "hmac realm=\"strait\"");
    let lines = format!("x-date: {date}\ndate: {date}");
    let unenforced = hmac_authorization("hmac-sha256", "x-date date", &lines);
    let reply = gw.proxy(strict(unenforced, date.clone())).await;
    assert_refused(&reply, "HMAC signature cannot be verified", "hmac realm=\"strait\"");

    // The body must match its digest, and a body needs one.
    let body = r#"{"amount":10}"#;
    let digest = format!(
        "SHA-256={}",
        STANDARD.encode(ring::digest::digest(&ring::digest::SHA256, body.as_bytes()))
    );
    let value = hmac_authorization("hmac-sha256", "date digest", &format!("date: {date}\ndigest: {digest}"));
    let post = |sent: &str, digest: Option<&str>| {
        let mut headers = vec![("date", date.as_str()), ("authorization", value.as_str())];
        if let Some(digest) = digest {
            headers.push(("digest", digest));
        }
        request("POST", "/body", &headers, sent.to_string())
    };
    let ok = gw.proxy(post(body, Some(&digest))).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.json()["body"], body, "the buffered body goes upstream");
    let tampered = gw.proxy(post(r#"{"amount":9999}"#, Some(&digest))).await;
    assert_refused(&tampered, "HMAC signature does not match", "hmac");
    let undigested = hmac_authorization("hmac-sha256", "date", &format!("date: {date}"));
    let reply = gw
        .proxy(request(
            "POST",
            "/body",
            &[("date", &date), ("authorization", &undigested)],
            body,
        ))
        .await;
    assert_refused(&reply, "HMAC signature does not match", "hmac");

    let anonymous = gw.proxy(get("/anonymous")).await;
    assert_eq!(anonymous.status, 200);
    assert_eq!(echo_headers(&anonymous)["x-consumer-username"], "anon");
    assert_eq!(echo_headers(&anonymous)["x-anonymous-consumer"], "true");
}
