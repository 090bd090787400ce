use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self as ring_signature, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair};
use serde_json::{json, Map, Value};

use super::signature::test_keys::{
    ec_public_pem, ed25519_public_pem, pem_der, RSA_PRIVATE_PKCS8, RSA_PUBLIC_PKCS1, RSA_PUBLIC_SPKI,
};
use super::token::{bearer_token, decode};
use super::{AuthenticatedJwtToken, Jwt};
use crate::auth::test_support::{Outcome, TestDirectory, TestRequest};

fn plugin(config: Value) -> Jwt {
    let Value::Object(map) = config else { panic!("object") };
    Jwt::from_config(&map).expect("config")
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// `header.claims` for `alg` and the given claims.
fn signing_input(alg: &str, claims: &Value) -> String {
    let header = json!({ "typ": "JWT", "alg": alg });
    format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    )
}

fn with_signature(input: &str, signature: &[u8]) -> String {
    format!("{input}.{}", b64(signature))
}

fn hs_token(alg: &str, secret: &[u8], claims: &Value) -> String {
    let algorithm = match alg {
        "HS256" => ring::hmac::HMAC_SHA256,
        "HS384" => ring::hmac::HMAC_SHA384,
        _ => ring::hmac::HMAC_SHA512,
    };
    let input = signing_input(alg, claims);
    let tag = ring::hmac::sign(&ring::hmac::Key::new(algorithm, secret), input.as_bytes());
    with_signature(&input, tag.as_ref())
}

fn rsa_token(alg: &str, claims: &Value) -> String {
    let pair = RsaKeyPair::from_pkcs8(&pem_der(RSA_PRIVATE_PKCS8)).expect("rsa key");
    let encoding: &'static dyn ring_signature::RsaEncoding = match alg {
        "RS256" => &ring_signature::RSA_PKCS1_SHA256,
        "RS384" => &ring_signature::RSA_PKCS1_SHA384,
        "RS512" => &ring_signature::RSA_PKCS1_SHA512,
        "PS256" => &ring_signature::RSA_PSS_SHA256,
        "PS384" => &ring_signature::RSA_PSS_SHA384,
        _ => &ring_signature::RSA_PSS_SHA512,
    };
    let input = signing_input(alg, claims);
    let mut signature = vec![0; pair.public().modulus_len()];
    pair.sign(encoding, &SystemRandom::new(), input.as_bytes(), &mut signature)
        .expect("sign");
    with_signature(&input, &signature)
}

/// A token signed with a fresh EC key, and that key's public PEM.
fn ec_token(alg: &str, claims: &Value) -> (String, String) {
    let rng = SystemRandom::new();
    let (signing, p384) = match alg {
        "ES256" => (&ring_signature::ECDSA_P256_SHA256_FIXED_SIGNING, false),
        _ => (&ring_signature::ECDSA_P384_SHA384_FIXED_SIGNING, true),
    };
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(signing, &rng).expect("generate");
    let pair = EcdsaKeyPair::from_pkcs8(signing, pkcs8.as_ref(), &rng).expect("pair");
    let input = signing_input(alg, claims);
    let signature = pair.sign(&rng, input.as_bytes()).expect("sign");
    (
        with_signature(&input, signature.as_ref()),
        ec_public_pem(pair.public_key().as_ref(), p384),
    )
}

fn ed25519_token(claims: &Value) -> (String, String) {
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("generate");
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("pair");
    let input = signing_input("EdDSA", claims);
    let signature = pair.sign(input.as_bytes());
    (
        with_signature(&input, signature.as_ref()),
        ed25519_public_pem(pair.public_key().as_ref()),
    )
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

/// A directory with consumer `alice` owning an HS256 secret under key `alice-key`.
fn directory() -> TestDirectory {
    let mut directory = TestDirectory::default();
    let alice = directory.consumer("alice");
    directory.consumer("anon");
    directory.jwt_secret(alice, "alice-key", "HS256", "alice-secret", None);
    directory
}

fn bearer(token: &str) -> TestRequest {
    TestRequest::new("GET", "/").header("authorization", &format!("Bearer {token}"))
}

fn run(plugin: &Jwt, directory: &TestDirectory, mut request: TestRequest) -> Outcome {
    request.run(plugin, directory)
}

fn hs256(claims: Value) -> String {
    hs_token("HS256", b"alice-secret", &claims)
}

#[test]
fn finds_the_token_in_query_cookie_and_header() {
    let jwt = plugin(json!({ "cookie_names": ["session"] }));
    let directory = directory();
    let token = hs256(json!({ "iss": "alice-key" }));
    let by_query = run(&jwt, &directory, TestRequest::new("GET", &format!("/?jwt={token}")));
    assert_eq!(by_query.status(), 200, "{:?}", by_query.flow);
    let by_cookie = TestRequest::new("GET", "/").header("cookie", &format!("a=1; Session = {token}"));
    assert_eq!(run(&jwt, &directory, by_cookie).status(), 200);
    let outcome = run(&jwt, &directory, bearer(&token));
    assert_eq!(outcome.status(), 200);
    assert_eq!(outcome.consumer.as_deref(), Some("alice"));
    let credential = outcome.credential.expect("credential");
    assert_eq!(
        (credential.identifier_str(), credential.plugin),
        ("alice-key", "jwt")
    );
    assert_eq!(
        outcome.shared.get::<AuthenticatedJwtToken>(),
        Some(&AuthenticatedJwtToken(token.clone()))
    );
    // The same token twice is one token.
    let twice = bearer(&token).uri(&format!("/?jwt={token}"));
    assert_eq!(run(&jwt, &directory, twice).status(), 200);
}

impl TestRequest {
    fn uri(mut self, target: &str) -> TestRequest {
        self.uri = target.parse().expect("uri");
        self
    }
}

#[test]
fn token_retrieval_errors_are_kongs() {
    let jwt = plugin(json!({}));
    let directory = directory();
    let none = run(&jwt, &directory, TestRequest::new("GET", "/"));
    assert_eq!((none.status(), none.message().as_deref()), (401, Some("Unauthorized")));
    assert_eq!(none.response_header("www-authenticate").as_deref(), Some("Bearer"));
    // A raw token without `Bearer` is not looked at.
    let raw = TestRequest::new("GET", "/").header("authorization", &hs256(json!({ "iss": "alice-key" })));
    assert_eq!(run(&jwt, &directory, raw).message().as_deref(), Some("Unauthorized"));
    let empty = run(&jwt, &directory, TestRequest::new("GET", "/?jwt="));
    assert_eq!(empty.message().as_deref(), Some("Unauthorized"));
    let flag = run(&jwt, &directory, TestRequest::new("GET", "/?jwt"));
    assert_eq!(flag.message().as_deref(), Some("Unrecognizable token"));
    assert_eq!(
        flag.response_header("www-authenticate").as_deref(),
        Some("Bearer error=\"invalid_token\"")
    );
    let many = run(&jwt, &directory, bearer("a.b.c").uri("/?jwt=d.e.f"));
    assert_eq!(
        (many.status(), many.message().as_deref()),
        (401, Some("Multiple tokens provided"))
    );
    let realm = plugin(json!({ "realm": "strait" }));
    let refused = run(&realm, &directory, bearer("x"));
    assert_eq!(
        refused.response_header("www-authenticate").as_deref(),
        Some("Bearer realm=\"strait\", error=\"invalid_token\"")
    );
}

#[test]
fn bearer_matching_follows_kongs_unanchored_regex() {
    assert_eq!(bearer_token("Bearer abc"), Some("abc"));
    assert_eq!(bearer_token("bearer   abc def"), Some("abc def"));
    assert_eq!(bearer_token("Token Bearer abc"), Some("abc"));
    assert_eq!(bearer_token("BEARER abc"), None);
    assert_eq!(bearer_token("Bearer"), None);
    assert_eq!(bearer_token("Bearer "), None);
    assert_eq!(bearer_token("Bearer  "), Some(" "));
    assert_eq!(bearer_token("Bearerabc"), None);
    assert_eq!(bearer_token("earer abc"), None);
    assert_eq!(bearer_token("xBearer\tabc"), Some("abc"));
}

/// Compares with the regex itself on generated header values.
#[test]
fn bearer_matching_agrees_with_the_regex() {
    let regex = regex::Regex::new(r"(?-u:\s)*[Bb]earer(?-u:\s)+(.+)").expect("regex");
    let pieces = ["Bearer", "bearer", "earer", "B", " ", "  ", "\t", "x", "a.b", "BEARER"];
    let mut state: u64 = 7;
    let mut matched = 0;
    for _ in 0..20_000 {
        let mut value = String::new();
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        for _ in 0..(state >> 61) + 1 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            value.push_str(pieces[(state >> 33) as usize % pieces.len()]);
        }
        let expected = regex.captures(&value).map(|c| c.get(1).expect("group").as_str());
        matched += usize::from(expected.is_some());
        assert_eq!(bearer_token(&value), expected, "{value:?}");
    }
    assert!(matched > 1000, "only {matched} generated values matched");
}

#[test]
fn malformed_tokens_are_bad_tokens_never_panics() {
    let jwt = plugin(json!({}));
    let directory = directory();
    let header = b64(br#"{"alg":"HS256"}"#);
    let claims = b64(br#"{"iss":"alice-key"}"#);
    let garbage = "x".repeat(10_000);
    let cases: Vec<(String, &str)> = vec![
        ("onlyone".into(), "Bad token; invalid JSON"),
        (format!("{header}.{claims}"), "Bad token; invalid JSON"),
        (format!("{header}!.{claims}.sig"), "Bad token; invalid JSON"),
        (format!("{}.{claims}.sig", b64(b"not json")), "Bad token; invalid JSON"),
        (
            format!("{}.{claims}.sig", b64(br#"{"alg":"none"}"#)),
            "Bad token; invalid alg",
        ),
        (
            format!("{}.{claims}.sig", b64(br#"{"alg":256}"#)),
            "Bad token; invalid alg",
        ),
        (format!("{}.{claims}.sig", b64(b"1")), "Bad token; invalid alg"),
        (format!("{header}.{claims}.si.g"), "Bad token; invalid signature"),
        (format!("{header}.{claims}.a"), "Bad token; invalid signature"),
        (garbage.clone(), "Bad token; invalid JSON"),
        (format!("{garbage}.{garbage}.{garbage}"), "Bad token; invalid JSON"),
        ("..".into(), "Bad token; invalid JSON"),
    ];
    for (token, message) in cases {
        let outcome = run(&jwt, &directory, bearer(&token));
        assert_eq!(outcome.status(), 401, "{token:.60}");
        assert_eq!(outcome.message().as_deref(), Some(message), "{token:.60}");
    }
    assert!(
        decode(&format!("{header}.{claims}.")).is_ok(),
        "an empty signature decodes"
    );
}

#[test]
fn key_claim_errors() {
    let jwt = plugin(json!({}));
    let directory = directory();
    let message = |claims: Value| run(&jwt, &directory, bearer(&hs256(claims))).message();
    assert_eq!(
        message(json!({ "sub": "x" })).as_deref(),
        Some("No mandatory 'iss' in claims")
    );
    assert_eq!(
        message(json!({ "iss": "" })).as_deref(),
        Some("Invalid 'iss' in claims")
    );
    assert_eq!(
        message(json!({ "iss": "nobody" })).as_deref(),
        Some("No credentials found for given 'iss'")
    );
    assert_eq!(
        message(json!({ "iss": {"a": 1} })).as_deref(),
        Some("No credentials found for given 'iss'")
    );
    assert_eq!(message(json!([1, 2])).as_deref(), Some("No mandatory 'iss' in claims"));
    // The key claim may be in the token's header instead.
    let input = format!(
        "{}.{}",
        b64(br#"{"alg":"HS256","kid":"alice-key"}"#),
        b64(br#"{"sub":"x"}"#)
    );
    let tag = ring::hmac::sign(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"alice-secret"),
        input.as_bytes(),
    );
    let by_header = plugin(json!({ "key_claim_name": "kid" }));
    let outcome = run(&by_header, &directory, bearer(&with_signature(&input, tag.as_ref())));
    assert_eq!(outcome.status(), 200, "{:?}", outcome.body());
    let missing = run(&by_header, &directory, bearer(&hs256(json!({ "iss": "alice-key" }))));
    assert_eq!(missing.message().as_deref(), Some("No mandatory 'kid' in claims"));
}

#[test]
fn every_hmac_algorithm_and_base64_secrets() {
    let mut directory = directory();
    let bob = directory.consumer("bob");
    directory.jwt_secret(bob, "bob-384", "HS384", "bob-secret", None);
    directory.jwt_secret(bob, "bob-512", "HS512", "bob-secret", None);
    let jwt = plugin(json!({}));
    for (alg, key) in [("HS384", "bob-384"), ("HS512", "bob-512")] {
        let token = hs_token(alg, b"bob-secret", &json!({ "iss": key }));
        assert_eq!(
            run(&jwt, &directory, bearer(&token)).consumer.as_deref(),
            Some("bob"),
            "{alg}"
        );
        let forged = hs_token(alg, b"other", &json!({ "iss": key }));
        assert_eq!(
            run(&jwt, &directory, bearer(&forged)).message().as_deref(),
            Some("Invalid signature")
        );
    }
    let wrong_alg = hs_token("HS512", b"alice-secret", &json!({ "iss": "alice-key" }));
    let outcome = run(&jwt, &directory, bearer(&wrong_alg));
    assert_eq!(
        (outcome.status(), outcome.message().as_deref()),
        (401, Some("Invalid algorithm"))
    );

    // secret_is_base64: the stored secret is base64url of the signing secret.
    let raw_secret = [0xfbu8, 0xff, 0x01, 0x02];
    directory.jwt_secret(bob, "bob-b64", "HS256", &b64(&raw_secret), None);
    directory.jwt_secret(bob, "bob-std", "HS256", &STANDARD.encode(raw_secret), None);
    let base64 = plugin(json!({ "secret_is_base64": true }));
    let token = hs_token("HS256", &raw_secret, &json!({ "iss": "bob-b64" }));
    assert_eq!(run(&base64, &directory, bearer(&token)).status(), 200);
    let token = hs_token("HS256", &raw_secret, &json!({ "iss": "bob-std" }));
    let outcome = run(&base64, &directory, bearer(&token));
    assert_eq!(
        outcome.message().as_deref(),
        Some("Invalid key/secret"),
        "Kong decodes base64url only"
    );
}

#[test]
fn rsa_and_pss_tokens_verify_with_the_public_key() {
    let mut directory = directory();
    let carol = directory.consumer("carol");
    for alg in ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"] {
        directory.jwt_secret(carol, alg, alg, "unused", Some(RSA_PUBLIC_SPKI));
    }
    directory.jwt_secret(carol, "pkcs1", "RS256", "unused", Some(RSA_PUBLIC_PKCS1));
    directory.jwt_secret(carol, "nokey", "RS256", "unused", None);
    directory.jwt_secret(
        carol,
        "badkey",
        "RS256",
        "unused",
        Some("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"),
    );
    let jwt = plugin(json!({}));
    for alg in ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"] {
        let token = rsa_token(alg, &json!({ "iss": alg }));
        let outcome = run(&jwt, &directory, bearer(&token));
        assert_eq!(outcome.status(), 200, "{alg}: {:?}", outcome.body());
        assert_eq!(outcome.consumer.as_deref(), Some("carol"));
        // A changed payload keeps the signature of the old one.
        let (head, rest) = token.split_once('.').expect("dot");
        let signature = rest.split_once('.').expect("dot").1;
        let tampered = format!(
            "{head}.{}.{signature}",
            b64(json!({ "iss": alg, "admin": true }).to_string().as_bytes())
        );
        assert_eq!(
            run(&jwt, &directory, bearer(&tampered)).message().as_deref(),
            Some("Invalid signature")
        );
    }
    let token = rsa_token("RS256", &json!({ "iss": "pkcs1" }));
    assert_eq!(run(&jwt, &directory, bearer(&token)).status(), 200, "PKCS#1 public key");
    let token = rsa_token("RS256", &json!({ "iss": "nokey" }));
    assert_eq!(
        run(&jwt, &directory, bearer(&token)).message().as_deref(),
        Some("Invalid key/secret")
    );
    let token = rsa_token("RS256", &json!({ "iss": "badkey" }));
    assert_eq!(
        run(&jwt, &directory, bearer(&token)).message().as_deref(),
        Some("Invalid signature")
    );
    // An HMAC token whose secret is the public key text cannot pass as RS256.
    let confused = hs_token("HS256", RSA_PUBLIC_SPKI.as_bytes(), &json!({ "iss": "RS256" }));
    assert_eq!(
        run(&jwt, &directory, bearer(&confused)).message().as_deref(),
        Some("Invalid algorithm")
    );
}

#[test]
fn ecdsa_and_eddsa_tokens_verify_with_the_public_key() {
    let mut directory = directory();
    let dave = directory.consumer("dave");
    let jwt = plugin(json!({}));
    for alg in ["ES256", "ES384"] {
        let (token, public_pem) = ec_token(alg, &json!({ "iss": alg }));
        directory.jwt_secret(dave, alg, alg, "unused", Some(&public_pem));
        let outcome = run(&jwt, &directory, bearer(&token));
        assert_eq!(outcome.status(), 200, "{alg}: {:?}", outcome.body());
        let (other, _) = ec_token(alg, &json!({ "iss": alg }));
        assert_eq!(
            run(&jwt, &directory, bearer(&other)).message().as_deref(),
            Some("Invalid signature")
        );
        // Kong requires the raw r||s length; a short signature is refused.
        let short = format!("{}.AAAA", token.rsplit_once('.').expect("dot").0);
        assert_eq!(
            run(&jwt, &directory, bearer(&short)).message().as_deref(),
            Some("Invalid signature")
        );
    }
    let (token, public_pem) = ed25519_token(&json!({ "iss": "ed" }));
    directory.jwt_secret(dave, "ed", "EdDSA", "unused", Some(&public_pem));
    assert_eq!(run(&jwt, &directory, bearer(&token)).status(), 200);
    // An ES256 token checked against a P-384 key does not verify.
    let (token, _) = ec_token("ES256", &json!({ "iss": "mixed" }));
    let (_, p384_pem) = ec_token("ES384", &json!({}));
    directory.jwt_secret(dave, "mixed", "ES256", "unused", Some(&p384_pem));
    assert_eq!(
        run(&jwt, &directory, bearer(&token)).message().as_deref(),
        Some("Invalid signature")
    );
}

#[test]
fn registered_claims_answer_with_kongs_error_objects() {
    let directory = directory();
    let jwt = plugin(json!({ "claims_to_verify": ["exp", "nbf"] }));
    let body = |claims: Value| {
        let outcome = run(&jwt, &directory, bearer(&hs256(claims)));
        assert!(outcome.status() == 200 || outcome.status() == 401);
        if outcome.status() == 401 {
            assert_eq!(
                outcome.response_header("www-authenticate").as_deref(),
                Some("Bearer error=\"invalid_token\"")
            );
        }
        outcome.body()
    };
    let now = now();
    assert_eq!(
        body(json!({ "iss": "alice-key", "exp": now + 60, "nbf": now - 60 })),
        Value::Null
    );
    assert_eq!(
        body(json!({ "iss": "alice-key", "exp": now - 1, "nbf": now - 60 })),
        json!({ "exp": "token expired" })
    );
    assert_eq!(
        body(json!({ "iss": "alice-key", "exp": now + 60, "nbf": now + 60 })),
        json!({ "nbf": "token not valid yet" })
    );
    assert_eq!(
        body(json!({ "iss": "alice-key", "exp": "soon" })),
        json!({ "exp": "must be a number", "nbf": "must be a number" })
    );
    let unchecked = plugin(json!({}));
    let expired = hs256(json!({ "iss": "alice-key", "exp": now - 100 }));
    assert_eq!(
        run(&unchecked, &directory, bearer(&expired)).status(),
        200,
        "exp unchecked by default"
    );
}

#[test]
fn maximum_expiration_limits_the_lifetime() {
    let directory = directory();
    let jwt = plugin(json!({ "claims_to_verify": ["exp"], "maximum_expiration": 300 }));
    let now = now();
    let ok = hs256(json!({ "iss": "alice-key", "exp": now + 200 }));
    assert_eq!(run(&jwt, &directory, bearer(&ok)).status(), 200);
    let too_long = hs256(json!({ "iss": "alice-key", "exp": now + 1000 }));
    let outcome = run(&jwt, &directory, bearer(&too_long));
    assert_eq!(outcome.status(), 401);
    assert_eq!(outcome.body(), json!({ "exp": "exceeds maximum allowed expiration" }));
    // Without exp in claims_to_verify (Kong's schema allows it when the list is absent).
    let lax = plugin(json!({ "maximum_expiration": 300 }));
    let outcome = run(&lax, &directory, bearer(&hs256(json!({ "iss": "alice-key" }))));
    assert_eq!(outcome.body(), json!({ "exp": "exceeds maximum allowed expiration" }));
}

#[test]
fn anonymous_preflight_and_missing_consumer() {
    let mut directory = directory();
    let jwt = plugin(json!({ "anonymous": "anon" }));
    let outcome = run(&jwt, &directory, bearer("garbage"));
    assert_eq!(outcome.status(), 200);
    assert_eq!(outcome.consumer.as_deref(), Some("anon"));
    assert!(outcome.credential.is_none());
    let ghost = plugin(json!({ "anonymous": "ghost" }));
    let outcome = run(&ghost, &directory, TestRequest::new("GET", "/"));
    assert_eq!(outcome.status(), 500);
    assert_eq!(
        outcome.message().as_deref(),
        Some("anonymous consumer ghost is configured but doesn't exist")
    );

    let preflight = plugin(json!({ "run_on_preflight": false }));
    assert_eq!(
        run(&preflight, &directory, TestRequest::new("OPTIONS", "/")).status(),
        200
    );
    assert_eq!(run(&preflight, &directory, TestRequest::new("GET", "/")).status(), 401);
    assert_eq!(
        run(&plugin(json!({})), &directory, TestRequest::new("OPTIONS", "/")).status(),
        401
    );

    let orphan = uuid::Uuid::new_v4();
    directory.jwt_secret(orphan, "orphan", "HS256", "s", None);
    let token = hs_token("HS256", b"s", &json!({ "iss": "orphan" }));
    let outcome = run(&plugin(json!({})), &directory, bearer(&token));
    assert_eq!(outcome.status(), 401);
    assert_eq!(
        outcome.message().as_deref(),
        Some("Could not find consumer for 'iss=orphan'")
    );
    assert!(outcome.response_header("www-authenticate").is_none());
}

#[test]
fn config_defaults_and_lists() {
    let defaults = plugin(json!({}));
    assert_eq!(defaults.uri_param_names, ["jwt"]);
    assert_eq!(defaults.header_names, ["authorization"]);
    assert!(defaults.cookie_names.is_empty());
    assert_eq!(defaults.key_claim_name, "iss");
    let custom = plugin(json!({ "uri_param_names": [], "header_names": ["X_Token"] }));
    assert!(custom.uri_param_names.is_empty(), "an empty list turns the source off");
    assert_eq!(custom.header_names, ["x-token"]);
    let mut map = Map::new();
    map.insert("claims_to_verify".into(), json!(["iat"]));
    assert!(Jwt::from_config(&map).is_err());
    let directory = directory();
    let token = hs256(json!({ "iss": "alice-key" }));
    let by_custom_header = TestRequest::new("GET", "/").header("x-token", &format!("Bearer {token}"));
    assert_eq!(run(&custom, &directory, by_custom_header).status(), 200);
    assert_eq!(
        run(&custom, &directory, TestRequest::new("GET", &format!("/?jwt={token}"))).status(),
        401
    );
}
