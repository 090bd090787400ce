//! The oauth2 plugin end to end, with a real upstream and the real token
//! stores: every grant (authorization code with and without PKCE, implicit,
//! client credentials, password, refresh token) and their error answers,
//! the bearer token on proxied requests with Kong's upstream headers,
//! Kong's migration API (`/oauth2_tokens`) with expiry, update and
//! revocation, tokens surviving a restart, and two nodes sharing one token
//! store (Redis; PostgreSQL).

use std::time::Duration;

use serde_json::{json, Value};
use strait_e2e::plugins::{echo_headers, gateway_with_echo, UPSTREAM};
use strait_e2e::redis::{RedisOptions, RedisServer};
use strait_e2e::upstream::{Upstream, UpstreamKind};
use strait_e2e::{eventually, request, Gateway, GatewayOptions, Reply};

const SERVICE_ID: &str = "5c8a2a1e-3f0c-4d8e-9a43-0d7a7a6d0a01";
const CREDENTIAL_ID: &str = "5c8a2a1e-3f0c-4d8e-9a43-0d7a7a6d0a02";
const PUBLIC_ID: &str = "5c8a2a1e-3f0c-4d8e-9a43-0d7a7a6d0a03";
const PROVISION_KEY: &str = "provision-123";
const REDIRECT: &str = "https://app.example/cb";

fn config(plugin: Value) -> Value {
    json!({
        "_format_version": "3.0",
        "consumers": [{
            "username": "bob",
            "custom_id": "bob-1",
            "oauth2_credentials": [
                {
                    "id": CREDENTIAL_ID,
                    "name": "app",
                    "client_id": "client-1",
                    "client_secret": "secret-1",
                    "redirect_uris": [REDIRECT, "https://app.example/other"],
                },
                {
                    "id": PUBLIC_ID,
                    "name": "mobile",
                    "client_id": "public-1",
                    "client_type": "public",
                    "redirect_uris": [REDIRECT],
                }
            ]
        }],
        "services": [{
            "id": SERVICE_ID,
            "name": "echo",
            "url": UPSTREAM,
            "routes": [{ "name": "api", "paths": ["/api"] }],
            "plugins": [{ "name": "oauth2", "config": plugin }]
        }]
    })
}

fn plugin_config(extra: Value) -> Value {
    let mut config = json!({
        "scopes": ["email", "profile"],
        "provision_key": PROVISION_KEY,
        "accept_http_if_already_terminated": true,
    });
    for (k, v) in extra.as_object().expect("object") {
        config[k] = v.clone();
    }
    config
}

/// `POST path` with a form body, as if behind a TLS terminator.
async fn post_form(gw: &Gateway, path: &str, form: &[(&str, &str)], headers: &[(&str, &str)]) -> Reply {
    let body: Vec<String> = form
        .iter()
        .map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v)))
        .collect();
    let mut all = vec![
        ("content-type", "application/x-www-form-urlencoded"),
        ("x-forwarded-proto", "https"),
    ];
    all.extend_from_slice(headers);
    gw.proxy(request("POST", path, &all, body.join("&"))).await
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

async fn bearer(gw: &Gateway, token: &str) -> Reply {
    let auth = format!("Bearer {token}");
    gw.proxy(request("GET", "/api/resource", &[("authorization", &auth)], ""))
        .await
}

fn assert_error(reply: &Reply, status: u16, error: &str, description: &str) {
    assert_eq!(reply.status.as_u16(), status, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["error"], error, "{body}");
    assert_eq!(body["error_description"], description, "{body}");
}

/// The query (or fragment) parameters of a redirect.
fn redirect_params(reply: &Reply, in_fragment: bool) -> Vec<(String, String)> {
    let uri = reply.json()["redirect_uri"].as_str().expect("redirect_uri").to_string();
    assert!(uri.starts_with(REDIRECT), "{uri}");
    let part = if in_fragment {
        uri.split_once('#').map(|(_, f)| f.to_string()).unwrap_or_default()
    } else {
        let query = uri.split_once('?').map(|(_, q)| q).unwrap_or_default();
        query.split('#').next().unwrap_or_default().to_string()
    };
    part.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let decoded = percent_decode(v);
            (k.to_string(), decoded)
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&text[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn client_credentials_password_and_refresh_grants() {
    let plugin = plugin_config(json!({ "enable_client_credentials": true, "enable_password_grant": true }));
    let (gw, _upstream) = gateway_with_echo(&config(plugin)).await;
    let token_path = "/api/oauth2/token";

    // The endpoints want HTTPS (or a terminator's word for it) and POST.
    let plain = gw
        .proxy(request(
            "POST",
            token_path,
            &[("content-type", "application/x-www-form-urlencoded")],
            "grant_type=client_credentials&client_id=client-1&client_secret=secret-1",
        ))
        .await;
    assert_error(&plain, 400, "access_denied", "You must use HTTPS");
    let get = gw
        .proxy(request("GET", token_path, &[("x-forwarded-proto", "https")], ""))
        .await;
    assert_error(
        &get,
        405,
        "invalid_method",
        "The HTTP method GET is invalid for the token endpoint",
    );
    assert!(get
        .header("www-authenticate")
        .is_some_and(|v| v.contains("invalid_method")));

    let unsupported = post_form(
        &gw,
        token_path,
        &[
            ("grant_type", "magic"),
            ("client_id", "client-1"),
            ("client_secret", "secret-1"),
        ],
        &[],
    )
    .await;
    assert_error(&unsupported, 400, "unsupported_grant_type", "Invalid grant_type");

    let wrong_secret = post_form(
        &gw,
        token_path,
        &[
            ("grant_type", "client_credentials"),
            ("client_id", "client-1"),
            ("client_secret", "nope"),
        ],
        &[],
    )
    .await;
    assert_error(&wrong_secret, 400, "invalid_client", "Invalid client authentication");
    let basic = format!("Basic {}", base64_encode("client-1:nope"));
    let wrong_basic = post_form(
        &gw,
        token_path,
        &[("grant_type", "client_credentials")],
        &[("authorization", &basic)],
    )
    .await;
    assert_error(&wrong_basic, 401, "invalid_client", "Invalid client authentication");
    assert_eq!(
        wrong_basic.header("www-authenticate").as_deref(),
        Some("Basic realm=\"OAuth2.0\"")
    );

    let bad_scope = post_form(
        &gw,
        token_path,
        &[
            ("grant_type", "client_credentials"),
            ("client_id", "client-1"),
            ("client_secret", "secret-1"),
            ("scope", "email admin"),
        ],
        &[],
    )
    .await;
    assert_error(&bad_scope, 400, "invalid_scope", "\"admin\" is an invalid scope");

    // client_credentials, the secret in a Basic header: no refresh token.
    let basic = format!("Basic {}", base64_encode("client-1:secret-1"));
    let issued = post_form(
        &gw,
        token_path,
        &[
            ("grant_type", "client_credentials"),
            ("scope", "email"),
            ("state", "s1"),
        ],
        &[("authorization", &basic)],
    )
    .await;
    assert_eq!(issued.status, 200, "{}", issued.text());
    assert_eq!(issued.header("cache-control").as_deref(), Some("no-store"));
    assert_eq!(issued.header("pragma").as_deref(), Some("no-cache"));
    let body = issued.json();
    assert_eq!(body["token_type"], "bearer");
    assert_eq!(body["expires_in"], 7200);
    assert_eq!(body["state"], "s1");
    assert!(body.get("refresh_token").is_none(), "{body}");
    let access = body["access_token"].as_str().expect("access_token").to_string();
    assert_eq!(access.len(), 32);

    let ok = bearer(&gw, &access).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    let headers = echo_headers(&ok);
    assert_eq!(headers["x-consumer-username"], "bob");
    assert_eq!(headers["x-consumer-custom-id"], "bob-1");
    assert_eq!(headers["x-credential-identifier"], "client-1");
    assert_eq!(headers["x-authenticated-scope"], "email");
    assert!(headers.get("x-authenticated-userid").is_none(), "{headers}");
    // The token in the query works too.
    let query = gw
        .proxy(request("GET", &format!("/api/x?access_token={access}"), &[], ""))
        .await;
    assert_eq!(query.status, 200, "{}", query.text());

    let missing = gw.proxy(request("GET", "/api/resource", &[], "")).await;
    assert_error(&missing, 401, "invalid_request", "The access token is missing");
    assert_eq!(missing.header("www-authenticate").as_deref(), Some("Bearer"));
    let unknown = bearer(&gw, "not-a-token").await;
    assert_error(
        &unknown,
        401,
        "invalid_token",
        "The access token is invalid or has expired",
    );
    assert!(unknown
        .header("www-authenticate")
        .is_some_and(|v| v.starts_with("Bearer error=\"invalid_token\"")));

    // password: provision_key and authenticated_userid are required.
    let no_key = post_form(
        &gw,
        token_path,
        &[
            ("grant_type", "password"),
            ("client_id", "client-1"),
            ("client_secret", "secret-1"),
            ("authenticated_userid", "u-7"),
        ],
        &[],
    )
    .await;
    assert_error(&no_key, 400, "invalid_provision_key", "Invalid provision_key");
    let no_user = post_form(
        &gw,
        token_path,
        &[
            ("grant_type", "password"),
            ("client_id", "client-1"),
            ("client_secret", "secret-1"),
            ("provision_key", PROVISION_KEY),
        ],
        &[],
    )
    .await;
    assert_error(
        &no_user,
        400,
        "invalid_authenticated_userid",
        "Missing authenticated_userid parameter",
    );
    let issued = post_form(
        &gw,
        token_path,
        &[
            ("grant_type", "password"),
            ("client_id", "client-1"),
            ("client_secret", "secret-1"),
            ("provision_key", PROVISION_KEY),
            ("authenticated_userid", "u-7"),
            ("scope", "email profile"),
        ],
        &[],
    )
    .await;
    assert_eq!(issued.status, 200, "{}", issued.text());
    let access = issued.json()["access_token"].as_str().expect("access").to_string();
    let refresh = issued.json()["refresh_token"].as_str().expect("refresh").to_string();
    let ok = bearer(&gw, &access).await;
    assert_eq!(echo_headers(&ok)["x-authenticated-userid"], "u-7");
    assert_eq!(echo_headers(&ok)["x-authenticated-scope"], "email profile");

    // refresh_token: a new pair; the old token is gone, its refresh token too.
    let refreshed = post_form(
        &gw,
        token_path,
        &[
            ("grant_type", "refresh_token"),
            ("client_id", "client-1"),
            ("client_secret", "secret-1"),
            ("refresh_token", &refresh),
        ],
        &[],
    )
    .await;
    assert_eq!(refreshed.status, 200, "{}", refreshed.text());
    let new_access = refreshed.json()["access_token"].as_str().expect("access").to_string();
    assert_ne!(new_access, access);
    assert_ne!(refreshed.json()["refresh_token"].as_str(), Some(refresh.as_str()));
    assert_eq!(bearer(&gw, &new_access).await.status, 200);
    assert_eq!(
        echo_headers(&bearer(&gw, &new_access).await)["x-authenticated-userid"],
        "u-7"
    );
    assert_eq!(bearer(&gw, &access).await.status, 401);
    let again = post_form(
        &gw,
        token_path,
        &[
            ("grant_type", "refresh_token"),
            ("client_id", "client-1"),
            ("client_secret", "secret-1"),
            ("refresh_token", &refresh),
        ],
        &[],
    )
    .await;
    assert_error(&again, 400, "invalid_request", "Invalid refresh_token");
}

fn base64_encode(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test]
async fn authorization_code_with_pkce_and_implicit_grants() {
    let plugin = plugin_config(json!({ "enable_authorization_code": true, "enable_implicit_grant": true }));
    let (gw, _upstream) = gateway_with_echo(&config(plugin)).await;
    let authorize = "/api/oauth2/authorize";
    let token_path = "/api/oauth2/token";

    let bad_key = post_form(
        &gw,
        authorize,
        &[
            ("response_type", "code"),
            ("client_id", "client-1"),
            ("provision_key", "wrong"),
            ("authenticated_userid", "u-1"),
        ],
        &[],
    )
    .await;
    assert_error(&bad_key, 400, "invalid_provision_key", "Invalid provision_key");
    let bad_client = post_form(
        &gw,
        authorize,
        &[
            ("response_type", "code"),
            ("client_id", "nobody"),
            ("provision_key", PROVISION_KEY),
            ("authenticated_userid", "u-1"),
        ],
        &[],
    )
    .await;
    assert_error(&bad_client, 400, "invalid_client", "Invalid client authentication");

    // A redirect_uri the application does not have: the error goes to its first one.
    let bad_redirect = post_form(
        &gw,
        authorize,
        &[
            ("response_type", "code"),
            ("client_id", "client-1"),
            ("provision_key", PROVISION_KEY),
            ("authenticated_userid", "u-1"),
            ("redirect_uri", "https://evil.example/"),
        ],
        &[],
    )
    .await;
    assert_eq!(bad_redirect.status, 400, "{}", bad_redirect.text());
    let params = redirect_params(&bad_redirect, false);
    assert_eq!(param(&params, "error"), Some("invalid_request"));
    let bad_type = post_form(
        &gw,
        authorize,
        &[
            ("response_type", "nope"),
            ("client_id", "client-1"),
            ("provision_key", PROVISION_KEY),
            ("authenticated_userid", "u-1"),
        ],
        &[],
    )
    .await;
    assert_eq!(
        param(&redirect_params(&bad_type, false), "error"),
        Some("unsupported_response_type")
    );

    // Confidential client, no PKCE (pkce = lax).
    let granted = post_form(
        &gw,
        authorize,
        &[
            ("response_type", "code"),
            ("client_id", "client-1"),
            ("provision_key", PROVISION_KEY),
            ("authenticated_userid", "u-1"),
            ("scope", "email"),
            ("state", "xyz"),
        ],
        &[],
    )
    .await;
    assert_eq!(granted.status, 200, "{}", granted.text());
    let params = redirect_params(&granted, false);
    assert_eq!(param(&params, "state"), Some("xyz"));
    let code = param(&params, "code").expect("code").to_string();
    let wrong_client = post_form(
        &gw,
        token_path,
        &[
            ("grant_type", "authorization_code"),
            ("client_id", "public-1"),
            ("code", &code),
        ],
        &[],
    )
    .await;
    assert_error(&wrong_client, 400, "invalid_request", "Invalid code");
    // (The failed exchange used the code up: Strait takes a code once.)
    let granted = post_form(
        &gw,
        authorize,
        &[
            ("response_type", "code"),
            ("client_id", "client-1"),
            ("provision_key", PROVISION_KEY),
            ("authenticated_userid", "u-1"),
            ("scope", "email"),
        ],
        &[],
    )
    .await;
    let code = param(&redirect_params(&granted, false), "code")
        .expect("code")
        .to_string();
    let exchanged = post_form(
        &gw,
        token_path,
        &[
            ("grant_type", "authorization_code"),
            ("client_id", "client-1"),
            ("client_secret", "secret-1"),
            ("code", &code),
        ],
        &[],
    )
    .await;
    assert_eq!(exchanged.status, 200, "{}", exchanged.text());
    let access = exchanged.json()["access_token"].as_str().expect("access").to_string();
    assert!(exchanged.json()["refresh_token"].is_string());
    let ok = bearer(&gw, &access).await;
    assert_eq!(echo_headers(&ok)["x-authenticated-userid"], "u-1");
    assert_eq!(echo_headers(&ok)["x-authenticated-scope"], "email");
    let reused = post_form(
        &gw,
        token_path,
        &[
            ("grant_type", "authorization_code"),
            ("client_id", "client-1"),
            ("client_secret", "secret-1"),
            ("code", &code),
        ],
        &[],
    )
    .await;
    assert_error(&reused, 400, "invalid_request", "Invalid code");

    // Public client: PKCE is required, and a secret is refused.
    let no_challenge = post_form(
        &gw,
        authorize,
        &[
            ("response_type", "code"),
            ("client_id", "public-1"),
            ("provision_key", PROVISION_KEY),
            ("authenticated_userid", "u-2"),
        ],
        &[],
    )
    .await;
    let params = redirect_params(&no_challenge, false);
    assert_eq!(
        param(&params, "error_description"),
        Some("code_challenge is required for public clients")
    );
    let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
    let challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
    let mut codes = Vec::new();
    for _ in 0..3 {
        let granted = post_form(
            &gw,
            authorize,
            &[
                ("response_type", "code"),
                ("client_id", "public-1"),
                ("provision_key", PROVISION_KEY),
                ("authenticated_userid", "u-2"),
                ("code_challenge", challenge),
                ("code_challenge_method", "S256"),
            ],
            &[],
        )
        .await;
        assert_eq!(granted.status, 200, "{}", granted.text());
        codes.push(
            param(&redirect_params(&granted, false), "code")
                .expect("code")
                .to_string(),
        );
    }
    let no_verifier = post_form(
        &gw,
        token_path,
        &[
            ("grant_type", "authorization_code"),
            ("client_id", "public-1"),
            ("code", &codes[0]),
        ],
        &[],
    )
    .await;
    assert_error(
        &no_verifier,
        400,
        "invalid_request",
        "code_verifier is required for PKCE authorization requests",
    );
    let wrong_verifier = post_form(
        &gw,
        token_path,
        &[
            ("grant_type", "authorization_code"),
            ("client_id", "public-1"),
            ("code", &codes[1]),
            ("code_verifier", &"x".repeat(50)),
        ],
        &[],
    )
    .await;
    assert_error(&wrong_verifier, 400, "invalid_grant", "Invalid code");
    let with_secret = post_form(
        &gw,
        token_path,
        &[
            ("grant_type", "authorization_code"),
            ("client_id", "public-1"),
            ("client_secret", "s"),
            ("code", &codes[2]),
            ("code_verifier", verifier),
        ],
        &[],
    )
    .await;
    assert_error(
        &with_secret,
        400,
        "invalid_request",
        "client_secret is disallowed for public clients",
    );
    let granted = post_form(
        &gw,
        authorize,
        &[
            ("response_type", "code"),
            ("client_id", "public-1"),
            ("provision_key", PROVISION_KEY),
            ("authenticated_userid", "u-2"),
            ("code_challenge", challenge),
            ("code_challenge_method", "S256"),
        ],
        &[],
    )
    .await;
    let code = param(&redirect_params(&granted, false), "code")
        .expect("code")
        .to_string();
    let exchanged = post_form(
        &gw,
        token_path,
        &[
            ("grant_type", "authorization_code"),
            ("client_id", "public-1"),
            ("code", &code),
            ("code_verifier", verifier),
        ],
        &[],
    )
    .await;
    assert_eq!(exchanged.status, 200, "{}", exchanged.text());
    let access = exchanged.json()["access_token"].as_str().expect("access").to_string();
    assert_eq!(bearer(&gw, &access).await.status, 200);

    // Implicit: the token in the redirect's fragment, no refresh token.
    let implicit = post_form(
        &gw,
        authorize,
        &[
            ("response_type", "token"),
            ("client_id", "client-1"),
            ("provision_key", PROVISION_KEY),
            ("authenticated_userid", "u-3"),
            ("state", "st"),
        ],
        &[],
    )
    .await;
    assert_eq!(implicit.status, 200, "{}", implicit.text());
    let params = redirect_params(&implicit, true);
    assert_eq!(param(&params, "token_type"), Some("bearer"));
    assert_eq!(param(&params, "state"), Some("st"));
    assert!(param(&params, "refresh_token").is_none());
    let access = param(&params, "access_token").expect("access_token").to_string();
    assert_eq!(
        echo_headers(&bearer(&gw, &access).await)["x-authenticated-userid"],
        "u-3"
    );
}

fn migrated(access: Option<&str>, expires_in: i64) -> Value {
    let mut body = json!({
        "credential": { "id": CREDENTIAL_ID },
        "service": { "id": SERVICE_ID },
        "expires_in": expires_in,
        "scope": "email",
        "authenticated_userid": "migrated-user",
    });
    if let Some(access) = access {
        body["access_token"] = json!(access);
    }
    body
}

async fn post_token(gw: &Gateway, body: &Value) -> Reply {
    gw.admin(
        "POST",
        "/oauth2_tokens",
        &[("content-type", "application/json")],
        body.to_string(),
    )
    .await
}

#[tokio::test]
async fn migrated_tokens_expire_update_revoke_and_survive_restarts() {
    let plugin = plugin_config(json!({ "enable_client_credentials": true }));
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let mut gw = Gateway::start(GatewayOptions::new()).await;
    let text = config(plugin).to_string().replace(UPSTREAM, &upstream.url("http"));
    gw.apply(&serde_json::from_str(&text).expect("config")).await;

    // Validation: Kong's error bodies.
    let missing = gw
        .admin(
            "POST",
            "/oauth2_tokens",
            &[("content-type", "application/json")],
            json!({ "credential": { "id": CREDENTIAL_ID } }).to_string(),
        )
        .await;
    assert_eq!(missing.status, 400, "{}", missing.text());
    assert_eq!(missing.json()["fields"]["expires_in"], "required field missing");
    let unknown = post_token(&gw, &json!({ "credential": { "id": SERVICE_ID }, "expires_in": 5 })).await;
    assert_eq!(unknown.status, 400, "{}", unknown.text());
    assert_eq!(unknown.json()["name"], "foreign key violation");

    // A token minted elsewhere, saved, then used.
    let saved = post_token(&gw, &migrated(Some("external-token-1"), 0)).await;
    assert_eq!(saved.status, 201, "{}", saved.text());
    assert_eq!(saved.json()["access_token"], "external-token-1");
    let id = saved.json()["id"].as_str().expect("id").to_string();
    let ok = bearer(&gw, "external-token-1").await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(echo_headers(&ok)["x-authenticated-userid"], "migrated-user");
    let duplicate = post_token(&gw, &migrated(Some("external-token-1"), 0)).await;
    assert_eq!(duplicate.status, 409, "{}", duplicate.text());

    // Read by id and by access token; listed; updated.
    assert_eq!(
        gw.admin_get(&format!("/oauth2_tokens/{id}")).await.json()["access_token"],
        "external-token-1"
    );
    assert_eq!(
        gw.admin_get("/oauth2_tokens/external-token-1").await.json()["id"],
        id.as_str()
    );
    let listed = gw.admin_get("/oauth2_tokens").await;
    assert!(listed.json()["data"]
        .as_array()
        .expect("data")
        .iter()
        .any(|t| t["id"] == id.as_str()));
    let patched = gw
        .admin(
            "PATCH",
            &format!("/oauth2_tokens/{id}"),
            &[("content-type", "application/json")],
            json!({ "scope": "profile" }).to_string(),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.text());
    assert_eq!(
        echo_headers(&bearer(&gw, "external-token-1").await)["x-authenticated-scope"],
        "profile"
    );

    // Durable: the token store is on disk.
    gw.restart().await;
    assert_eq!(bearer(&gw, "external-token-1").await.status, 200);

    // Revocation by DELETE.
    let deleted = gw.admin("DELETE", &format!("/oauth2_tokens/{id}"), &[], "").await;
    assert_eq!(deleted.status, 204);
    assert_eq!(bearer(&gw, "external-token-1").await.status, 401);
    assert_eq!(gw.admin_get(&format!("/oauth2_tokens/{id}")).await.status, 404);

    // expires_in: 1 works, then stops working.
    let short = post_token(&gw, &migrated(None, 1)).await;
    assert_eq!(short.status, 201, "{}", short.text());
    let access = short.json()["access_token"]
        .as_str()
        .expect("generated access_token")
        .to_string();
    assert_eq!(access.len(), 32);
    assert_eq!(bearer(&gw, &access).await.status, 200);
    eventually(Duration::from_secs(4), "the 1 s token to expire", || async {
        let status = bearer(&gw, &access).await.status;
        match status.as_u16() {
            401 => Ok(()),
            other => Err(anyhow::anyhow!("still {other}")),
        }
    })
    .await;
}

#[tokio::test]
async fn two_nodes_share_tokens_through_redis() {
    let redis = RedisServer::start(RedisOptions::default());
    let port = redis.port().to_string();
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let plugin = plugin_config(json!({ "enable_client_credentials": true }));
    let text = config(plugin).to_string().replace(UPSTREAM, &upstream.url("http"));
    let config: Value = serde_json::from_str(&text).expect("config");
    let options = || {
        GatewayOptions::new()
            .setting("oauth2_token_store", "redis")
            .setting("oauth2_redis_host", "127.0.0.1")
            .setting("oauth2_redis_port", &port)
    };
    let a = Gateway::start(options()).await;
    let b = Gateway::start(options()).await;
    a.apply(&config).await;
    b.apply(&config).await;

    nodes_share_tokens(&a, &b, "shared-token").await;
}

/// A token saved through `a`'s Admin API authenticates on `b`, one `b`
/// issues works on `a`, and one revoked on `b` is refused on `a` at once.
async fn nodes_share_tokens(a: &Gateway, b: &Gateway, token: &str) {
    let saved = post_token(a, &migrated(Some(token), 0)).await;
    assert_eq!(saved.status, 201, "{}", saved.text());
    let id = saved.json()["id"].as_str().expect("id").to_string();
    let on_b = bearer(b, token).await;
    assert_eq!(on_b.status, 200, "{}", on_b.text());
    assert_eq!(echo_headers(&on_b)["x-authenticated-userid"], "migrated-user");

    // A token issued by B's endpoint works on A.
    let issued = post_form(
        b,
        "/api/oauth2/token",
        &[
            ("grant_type", "client_credentials"),
            ("client_id", "client-1"),
            ("client_secret", "secret-1"),
        ],
        &[],
    )
    .await;
    assert_eq!(issued.status, 200, "{}", issued.text());
    let access = issued.json()["access_token"].as_str().expect("access").to_string();
    assert_eq!(bearer(a, &access).await.status, 200);

    // Revoked on B, refused on A.
    assert_eq!(
        b.admin("DELETE", &format!("/oauth2_tokens/{id}"), &[], "").await.status,
        204
    );
    assert_eq!(bearer(a, token).await.status, 401);
}

/// PostgreSQL as the shared token store, for a node on that database
/// (tokens follow `database = postgres` unless told otherwise) and a DB-less
/// node that only keeps its tokens there. Tokens are runtime data: saving
/// one moves no configuration version; rows are keyed by the token's hash;
/// an expired row leaves the table through the purge.
#[tokio::test]
async fn two_nodes_share_tokens_through_postgres() {
    use strait_e2e::postgres::{PgServer, DATABASE, USER};
    let server = PgServer::start();
    server.bootstrap();
    let port = server.port().to_string();
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let plugin = plugin_config(json!({ "enable_client_credentials": true }));
    let text = config(plugin).to_string().replace(UPSTREAM, &upstream.url("http"));
    let config: Value = serde_json::from_str(&text).expect("config");
    let pg = |options: GatewayOptions| {
        options
            .setting("pg_host", "127.0.0.1")
            .setting("pg_port", &port)
            .setting("pg_user", USER)
            .setting("pg_database", DATABASE)
    };
    let a = Gateway::start(pg(GatewayOptions::new().setting("database", "postgres"))).await;
    let b = Gateway::start(pg(GatewayOptions::new()
        .setting("database", "embedded")
        .setting("oauth2_token_store", "postgres")))
    .await;
    a.apply(&config).await;
    b.apply(&config).await;
    let version = || server.psql("SELECT version FROM config_meta WHERE key = 'config'");
    let before = version();

    nodes_share_tokens(&b, &a, "pg-shared-token").await;
    let kept = post_token(&a, &migrated(Some("pg-kept"), 0)).await;
    assert_eq!(kept.status, 201, "{}", kept.text());
    assert_eq!(bearer(&b, "pg-kept").await.status, 200);
    assert_eq!(version(), before, "a token save moved the configuration's version");
    let by_hash = |token: &str| {
        server.psql(&format!(
            "SELECT count(*) FROM oauth2_tokens WHERE access_hash = sha256('{token}'::bytea)"
        ))
    };
    assert_eq!(by_hash("pg-kept").trim(), "1");

    // Expiry: refused after its second on both nodes, and gone from the
    // table within the purge period.
    let short = post_token(&b, &migrated(Some("pg-short"), 1)).await;
    assert_eq!(short.status, 201, "{}", short.text());
    assert_eq!(by_hash("pg-short").trim(), "1");
    eventually(Duration::from_secs(6), "the 1 s token to leave the table", || async {
        match (bearer(&a, "pg-short").await.status.as_u16(), by_hash("pg-short").trim()) {
            (401, "0") => Ok(()),
            (status, rows) => Err(anyhow::anyhow!("{status}, {rows} row(s)")),
        }
    })
    .await;
    assert_eq!(bearer(&a, "pg-kept").await.status, 200);
}

/// Cassandra as the shared token store: tokens follow `database =
/// cassandra`, the configuration written once reaches the other node, and
/// a token expires on both nodes with its row's TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_tokens_through_cassandra() {
    let server = strait_e2e::cassandra::CassandraServer::start();
    server.bootstrap();
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let plugin = plugin_config(json!({ "enable_client_credentials": true }));
    let text = config(plugin).to_string().replace(UPSTREAM, &upstream.url("http"));
    let config: Value = serde_json::from_str(&text).expect("config");
    let a = Gateway::start(server.node_options()).await;
    let b = Gateway::start(server.node_options()).await;
    a.apply(&config).await;
    b.until_proxied("/api/resource", 401, Duration::from_secs(5)).await;

    nodes_share_tokens(&a, &b, "cassandra-shared-token").await;
    let short = post_token(&b, &migrated(Some("cassandra-short"), 1)).await;
    assert_eq!(short.status, 201, "{}", short.text());
    assert_eq!(bearer(&a, "cassandra-short").await.status, 200);
    eventually(Duration::from_secs(6), "the 1 s token to expire", || async {
        match bearer(&a, "cassandra-short").await.status.as_u16() {
            401 => Ok(()),
            other => Err(anyhow::anyhow!("still {other}")),
        }
    })
    .await;
}
