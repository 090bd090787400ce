//! session end to end: basic-auth logs a consumer in, the cookie alone keeps
//! it logged in, logout by query and by body, idle expiry, `storage = kong`
//! in the runtime store (embedded, and shared by two nodes on PostgreSQL),
//! and the cookie checked against a reference implementation of
//! lua-resty-session 4's format (tests/stand-ins/session_cookie.py, the
//! `cryptography` package).

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use strait_e2e::gateway::{Gateway, GatewayOptions};
use strait_e2e::plugins::{echo_headers, echo_service, gateway_with_echo, UPSTREAM};
use strait_e2e::postgres::PgServer;
use strait_e2e::redis::{RedisOptions, RedisServer};
use strait_e2e::upstream::{Upstream, UpstreamKind};
use strait_e2e::{get, request, Reply};

const ALICE: &str = "3a0b4a6e-0d7c-4cc5-9bb6-7b7f1c2a0001";
const ALICE_CREDENTIAL: &str = "3a0b4a6e-0d7c-4cc5-9bb6-7b7f1c2a0002";
const SECRET: &str = "correct-horse-battery-staple";
/// `alice:wonderland`.
const BASIC: &str = "Basic YWxpY2U6d29uZGVybGFuZA==";

fn python() -> PathBuf {
    std::env::var_os("STRAIT_SESSION_PYTHON").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/venv/bin/python"),
        PathBuf::from,
    )
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// Run the reference implementation: `seal` or `open`.
fn reference(command: &str, text: &str) -> Option<String> {
    reference_at(command, text, now())
}

/// [`reference`] with the session created at `now` (seconds).
fn reference_at(command: &str, text: &str, now: u64) -> Option<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("stand-ins/session_cookie.py");
    let out = std::process::Command::new(python())
        .arg(&script)
        .args([command, SECRET, text, &now.to_string()])
        .output()
        .unwrap_or_else(|e| panic!("{} ({e}): scripts/test.sh installs cryptography", python().display()));
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn consumers() -> Value {
    json!([
        { "id": ALICE, "username": "alice", "basicauth_credentials": [
            { "id": ALICE_CREDENTIAL, "username": "alice", "password": "wonderland" }] },
        { "username": "anonymous" }
    ])
}

/// A route on `path` with basic-auth (anonymous allowed) behind session `config`.
fn route(name: &str, path: &str, session: Value) -> Value {
    let mut config = json!({ "secret": SECRET, "cookie_secure": false });
    if let (Some(config), Some(extra)) = (config.as_object_mut(), session.as_object()) {
        config.extend(extra.clone());
    }
    json!({ "name": name, "paths": [path], "plugins": [
        { "name": "session", "config": config },
        { "name": "basic-auth", "config": { "anonymous": "anonymous" } }
    ]})
}

/// Every `Set-Cookie` value of a reply.
fn set_cookies(reply: &Reply) -> Vec<String> {
    reply
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect()
}

/// `name=value` of the reply's cookie `name`.
fn cookie_pair(reply: &Reply, name: &str) -> String {
    set_cookies(reply)
        .into_iter()
        .find(|c| c.starts_with(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} cookie in {:?}", reply.headers))
        .split(';')
        .next()
        .expect("pair")
        .to_string()
}

fn who(reply: &Reply) -> Value {
    echo_headers(reply)["x-consumer-username"].clone()
}

async fn with_cookie(gw: &Gateway, method: &str, path: &str, cookie: &str) -> Reply {
    gw.proxy(request(method, path, &[("cookie", cookie)], "")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_is_kept_by_the_cookie_until_logout_or_idle_expiry() {
    let routes = json!([
        route(
            "main",
            "/app",
            json!({ "response_headers": ["id", "subject"], "request_headers": ["subject"] })
        ),
        route(
            "short",
            "/short",
            json!({ "cookie_name": "short", "idling_timeout": 1 })
        ),
        route(
            "body",
            "/body",
            json!({ "cookie_name": "body", "read_body_for_logout": true })
        )
    ]);
    let (gw, _upstream) = gateway_with_echo(&echo_service(routes, consumers())).await;

    // No credentials: anonymous, no session.
    let anonymous = gw.proxy(get("/app")).await;
    assert_eq!(anonymous.status, 200);
    assert_eq!(who(&anonymous), "anonymous");
    assert!(set_cookies(&anonymous).is_empty());

    // basic-auth logs in: the session is saved.
    let login = gw.proxy(request("GET", "/app", &[("authorization", BASIC)], "")).await;
    assert_eq!(login.status, 200, "{}", login.text());
    assert_eq!(who(&login), "alice");
    let line = set_cookies(&login).join("\n");
    assert!(line.ends_with("; Path=/; SameSite=Strict; HttpOnly"), "{line}");
    assert_eq!(login.header("session-subject").as_deref(), Some("alice"));
    let session = cookie_pair(&login, "session");
    let value = session.trim_start_matches("session=");
    let session_id = login.header("session-id").expect("Session-Id");
    let header = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(&value[..110])
        .expect("base64url header");
    assert_eq!(
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&header[3..35]),
        session_id,
        "Session-Id is the header's session id"
    );

    // The reference implementation opens what the gateway wrote.
    let entries: Value =
        serde_json::from_str(&reference("open", value).expect("the reference opens the cookie")).expect("entries");
    assert_eq!(entries, json!([[[ALICE, ALICE_CREDENTIAL], "default", "alice"]]));

    // The cookie alone authenticates, as the session's credential.
    let again = with_cookie(&gw, "GET", "/app", &session).await;
    assert_eq!(who(&again), "alice");
    let upstream = echo_headers(&again);
    assert_eq!(upstream["x-credential-identifier"], ALICE_CREDENTIAL);
    assert_eq!(upstream["session-subject"], "alice");
    assert!(upstream.get("x-anonymous-consumer").is_none_or(Value::is_null));
    assert!(set_cookies(&again).is_empty(), "nothing to renew yet");

    // A cookie sealed by the reference authenticates too; one under another
    // secret, or tampered with, does not.
    let sealed = reference(
        "seal",
        &json!([[[ALICE, ALICE_CREDENTIAL], "default", "alice"]]).to_string(),
    )
    .expect("the reference seals");
    assert_eq!(
        who(&with_cookie(&gw, "GET", "/app", &format!("session={sealed}")).await),
        "alice"
    );
    let mut tampered = sealed.into_bytes();
    tampered[60] = if tampered[60] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).expect("ascii");
    assert_eq!(
        who(&with_cookie(&gw, "GET", "/app", &format!("session={tampered}")).await),
        "anonymous"
    );

    // Logout by query (POST and DELETE by default): 200, the cookie cleared.
    let logout = with_cookie(&gw, "DELETE", "/app?session_logout=true", &session).await;
    assert_eq!(logout.status, 200);
    assert!(logout.body.is_empty());
    let cleared = set_cookies(&logout).join("\n");
    assert!(
        cleared.starts_with("session=; Path=/; SameSite=Strict; HttpOnly; Expires=Thu, 01 Jan 1970"),
        "{cleared}"
    );
    // GET is not a logout method by default.
    assert_eq!(
        who(&with_cookie(&gw, "GET", "/app?session_logout=true", &session).await),
        "alice"
    );

    // Logout by body, when read_body_for_logout.
    let login = gw.proxy(request("GET", "/body", &[("authorization", BASIC)], "")).await;
    let body_cookie = cookie_pair(&login, "body");
    let headers = [
        ("cookie", body_cookie.as_str()),
        ("content-type", "application/x-www-form-urlencoded"),
    ];
    let not_logout = gw.proxy(request("POST", "/body", &headers, "other=1")).await;
    assert_eq!(who(&not_logout), "alice");
    let logout = gw.proxy(request("POST", "/body", &headers, "session_logout=1")).await;
    assert_eq!(logout.status, 200);
    assert!(set_cookies(&logout)[0].starts_with("body=;"));

    // Idle expiry: idling_timeout 1 s.
    let login = gw
        .proxy(request("GET", "/short", &[("authorization", BASIC)], ""))
        .await;
    let short = cookie_pair(&login, "short");
    assert_eq!(who(&with_cookie(&gw, "GET", "/short", &short).await), "alice");
    tokio::time::sleep(Duration::from_millis(2_600)).await;
    assert_eq!(who(&with_cookie(&gw, "GET", "/short", &short).await), "anonymous");

    // A deleted consumer's session no longer authenticates.
    let missing = reference(
        "seal",
        &json!([[
            ["6f1f0b36-0000-4000-8000-000000000000", ALICE_CREDENTIAL],
            "default",
            "ghost"
        ]])
        .to_string(),
    )
    .expect("seals");
    assert_eq!(
        who(&with_cookie(&gw, "GET", "/app", &format!("session={missing}")).await),
        "anonymous"
    );

    // Config errors name the field.
    let refused = gw
        .admin(
            "POST",
            "/plugins",
            &[("content-type", "application/json")],
            json!({ "name": "session", "config": { "storage": "redis", "cookie_same_site": "Sometimes" } }).to_string(),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    let fields = &refused.json()["fields"]["config"];
    assert_eq!(fields["storage"], "expected one of: cookie, kong");
    assert_eq!(
        fields["cookie_same_site"],
        "expected one of: Strict, Lax, None, Default"
    );
}

/// Logs in through `node` on `/app` and returns the `session` cookie pair.
async fn login(node: &Gateway) -> String {
    let reply = node
        .proxy(request("GET", "/app", &[("authorization", BASIC)], ""))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(who(&reply), "alice");
    cookie_pair(&reply, "session")
}

fn kong_storage_config(upstream: &Upstream) -> Value {
    let routes = json!([route(
        "main",
        "/app",
        json!({ "storage": "kong", "response_headers": ["id"] })
    )]);
    let text = echo_service(routes, consumers())
        .to_string()
        .replace(UPSTREAM, &upstream.url("http"));
    serde_json::from_str(&text).expect("config")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kong_storage_keeps_sessions_in_the_runtime_store_and_logout_revokes_them() {
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&kong_storage_config(&upstream)).await;

    let session = login(&gw).await;
    let value = session.trim_start_matches("session=");
    assert_eq!(value.len(), 110, "with storage = kong the cookie holds the header only");
    // The row is written after the response.
    let mut rows = Vec::new();
    for _ in 0..50 {
        rows = gw.admin_get("/sessions").await.json()["data"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !rows.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(rows.len(), 1, "{rows:?}");
    let session_id = rows[0]["session_id"].as_str().expect("session_id").to_string();
    assert!(rows[0]["expires"].as_i64().expect("expires") > rows[0]["created_at"].as_i64().expect("created_at"));
    let by_id = gw
        .admin_get(&format!("/sessions/{}", rows[0]["id"].as_str().expect("id")))
        .await;
    assert_eq!(by_id.json()["session_id"], session_id.as_str());
    assert_eq!(gw.admin_get(&format!("/sessions/{session_id}")).await.status, 200);

    assert_eq!(who(&with_cookie(&gw, "GET", "/app", &session).await), "alice");
    // Logout removes the row: the same cookie no longer opens a session.
    let logout = with_cookie(&gw, "POST", "/app?session_logout", &session).await;
    assert_eq!(logout.status, 200);
    assert_eq!(gw.admin_get(&format!("/sessions/{session_id}")).await.status, 404);
    assert_eq!(who(&with_cookie(&gw, "GET", "/app", &session).await), "anonymous");

    // An operator can revoke a session through the Admin API.
    let session = login(&gw).await;
    let mut revoked = false;
    for _ in 0..50 {
        let rows = gw.admin_get("/sessions").await.json()["data"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if let Some(row) = rows.first() {
            let reply = gw
                .admin(
                    "DELETE",
                    &format!("/sessions/{}", row["id"].as_str().expect("id")),
                    &[],
                    "",
                )
                .await;
            assert_eq!(reply.status, 204);
            revoked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(revoked);
    assert_eq!(who(&with_cookie(&gw, "GET", "/app", &session).await), "anonymous");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_saved_through_one_postgres_node_opens_on_the_other() {
    let server = PgServer::start();
    server.bootstrap();
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let first = Gateway::start(server.node_options()).await;
    let second = Gateway::start(server.node_options()).await;
    let reply = first.apply(&kong_storage_config(&upstream)).await;
    assert!(reply.status.is_success(), "{}", reply.text());

    let session = login(&first).await;
    // The second node sees the configuration and, once the row commits, the session.
    let mut seen = Value::Null;
    for _ in 0..100 {
        let reply = with_cookie(&second, "GET", "/app", &session).await;
        if reply.status == 200 {
            seen = who(&reply);
            if seen == "alice" {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen, "alice");
    assert_eq!(
        second.admin_get("/sessions").await.json()["data"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    // Logout on the second node revokes it on the first.
    assert_eq!(
        with_cookie(&second, "DELETE", "/app?session_logout=1", &session)
            .await
            .status,
        200
    );
    assert_eq!(who(&with_cookie(&first, "GET", "/app", &session).await), "anonymous");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_kept_in_redis_are_shared_and_expire_there() {
    let redis = RedisServer::start(RedisOptions::default());
    let port = redis.port().to_string();
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let options = || {
        GatewayOptions::new()
            .setting("oauth2_token_store", "redis")
            .setting("oauth2_redis_host", "127.0.0.1")
            .setting("oauth2_redis_port", &port)
    };
    let first = Gateway::start(options()).await;
    let second = Gateway::start(options()).await;
    for node in [&first, &second] {
        let reply = node.apply(&kong_storage_config(&upstream)).await;
        assert!(reply.status.is_success(), "{}", reply.text());
    }
    let session = login(&first).await;
    let mut keys = Vec::new();
    for _ in 0..50 {
        keys = redis.keys("strait:kv:sessions:s:*");
        if !keys.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(keys.len(), 1, "{keys:?}");
    // Redis expires the row with the session's rolling timeout (3600 s).
    let ttl: i64 = redis
        .command(&["TTL", &keys[0]])
        .trim()
        .trim_start_matches(':')
        .parse()
        .expect("ttl");
    assert!((3500..=3600).contains(&ttl), "{ttl}");
    assert_eq!(who(&with_cookie(&second, "GET", "/app", &session).await), "alice");
    let listed = second.admin_get("/sessions").await.json();
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(
        with_cookie(&second, "POST", "/app?session_logout", &session)
            .await
            .status,
        200
    );
    assert!(redis.keys("strait:kv:sessions:s:*").is_empty());
    assert_eq!(who(&with_cookie(&first, "GET", "/app", &session).await), "anonymous");
}

/// Sessions on Cassandra (`database = cassandra`: the runtime store
/// follows): a login on one node opens on the other, is listed there, and
/// a logout there revokes it on the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_kept_in_cassandra_are_shared() {
    let server = strait_e2e::cassandra::CassandraServer::start();
    server.bootstrap();
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let first = Gateway::start(server.node_options()).await;
    let second = Gateway::start(server.node_options()).await;
    let reply = first.apply(&kong_storage_config(&upstream)).await;
    assert!(reply.status.is_success(), "{}", reply.text());
    second.until_proxied("/app", 200, Duration::from_secs(5)).await;
    let session = login(&first).await;
    let mut listed = Value::Null;
    for _ in 0..50 {
        listed = second.admin_get("/sessions").await.json();
        if listed["data"].as_array().is_some_and(|rows| !rows.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(who(&with_cookie(&second, "GET", "/app", &session).await), "alice");
    assert_eq!(
        with_cookie(&second, "POST", "/app?session_logout", &session)
            .await
            .status,
        200
    );
    assert_eq!(who(&with_cookie(&first, "GET", "/app", &session).await), "anonymous");
    let listed = first.admin_get("/sessions").await.json();
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(0), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_renewed_touched_and_remembered() {
    let routes = json!([
        route(
            "main",
            "/app",
            json!({ "response_headers": ["id", "rolling-timeout", "idling-timeout"] })
        ),
        route(
            "roll",
            "/roll",
            json!({ "idling_timeout": 0, "response_headers": ["id", "rolling-timeout"] })
        ),
        route(
            "kept",
            "/kept",
            json!({ "cookie_name": "kept", "remember": true, "remember_cookie_name": "stay" })
        )
    ]);
    let (gw, _upstream) = gateway_with_echo(&echo_service(routes, consumers())).await;
    let entries = json!([[[ALICE, ALICE_CREDENTIAL], "default", "alice"]]).to_string();
    let sid_of = |value: &str| {
        let header = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&value[..110])
            .expect("header");
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&header[3..35])
    };

    // Past 3/4 of the rolling timeout (3600 s; no idling timeout here):
    // renewed, a new session id, the creation time kept (the rolling offset
    // now counts from it).
    let old = reference_at("seal", &entries, now() - 3_000).expect("seals");
    let renewed = with_cookie(&gw, "GET", "/roll", &format!("session={old}")).await;
    assert_eq!(who(&renewed), "alice");
    let new_cookie = cookie_pair(&renewed, "session");
    let new_value = new_cookie.trim_start_matches("session=");
    assert_ne!(sid_of(new_value), sid_of(&old), "a renewal draws a new session id");
    assert_eq!(
        renewed.header("session-id").as_deref(),
        Some(sid_of(new_value).as_str())
    );
    let rolling: i64 = renewed
        .header("session-rolling-timeout")
        .expect("header")
        .parse()
        .expect("number");
    assert!(rolling > 3_500, "{rolling}");
    let header = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(&new_value[..110])
        .expect("header");
    let created = header[35..40].iter().rev().fold(0u64, |n, b| (n << 8) | u64::from(*b));
    let offset = header[40..44].iter().rev().fold(0u64, |n, b| (n << 8) | u64::from(*b));
    assert!(
        now() - created >= 2_999 && offset >= 2_999,
        "created {created}, offset {offset}"
    );

    // Idle past the touch threshold (a minute) but before renewal: touched,
    // the same session id, the idling timeout back to 900.
    let idle = reference_at("seal", &entries, now() - 120).expect("seals");
    let touched = with_cookie(&gw, "GET", "/app", &format!("session={idle}")).await;
    assert_eq!(who(&touched), "alice");
    let touched_cookie = cookie_pair(&touched, "session");
    assert_eq!(sid_of(touched_cookie.trim_start_matches("session=")), sid_of(&idle));
    assert_ne!(
        touched_cookie.trim_start_matches("session="),
        idle,
        "the idling offset moved"
    );
    let idling: i64 = touched
        .header("session-idling-timeout")
        .expect("header")
        .parse()
        .expect("number");
    assert!(idling >= 899, "{idling}");
    // Past the idling timeout: no session.
    let stale = reference_at("seal", &entries, now() - 1_000).expect("seals");
    assert_eq!(
        who(&with_cookie(&gw, "GET", "/app", &format!("session={stale}")).await),
        "anonymous"
    );

    // remember: a persistent cookie beside the session cookie reopens a
    // session once the browser dropped the session cookie.
    let login = gw.proxy(request("GET", "/kept", &[("authorization", BASIC)], "")).await;
    let lines = set_cookies(&login);
    let stay = lines
        .iter()
        .find(|l| l.starts_with("stay="))
        .expect("a remember cookie");
    assert!(
        stay.contains("; Max-Age=604800") && stay.contains("; Expires="),
        "{stay}"
    );
    assert!(lines.iter().any(|l| l.starts_with("kept=")), "{lines:?}");
    let stay = cookie_pair(&login, "stay");
    let back = with_cookie(&gw, "GET", "/kept", &stay).await;
    assert_eq!(who(&back), "alice");
    let reissued = set_cookies(&back);
    assert!(reissued.iter().any(|l| l.starts_with("kept=")), "{reissued:?}");
    assert!(reissued.iter().any(|l| l.starts_with("stay=")), "{reissued:?}");
    // The persistent cookie is not a session cookie: it does not open as one.
    let as_session = stay.replacen("stay=", "kept=", 1);
    assert_eq!(who(&with_cookie(&gw, "GET", "/kept", &as_session).await), "anonymous");
}
