//! Nothing is left out of a decK backup. A configuration that uses every entity Strait stores
//! (services, routes, upstreams, targets, consumers, key-auth credentials, plugins at several
//! scopes, certificates with SNIs, CA certificates, tags, a vault, a key set and keys (one whose
//! JWK is a vault reference), a consumer group with members and a group-scoped plugin, a service
//! with `tls_sans`, a `sticky-sessions` upstream) is validated by `strait config validate`,
//! loaded, exported with `GET /config` and posted back (no change), dumped with
//! `deck gateway dump`, the node is emptied with `deck gateway reset`, the dump is synced back with
//! `deck gateway sync`, and then: `deck gateway diff` reports no change, every entity list
//! equals what it was before, a second dump equals the first, and the proxy answers the same.
//! decK reads each entity's list endpoint and treats a 404 as "not supported": an entity
//! without one would vanish here.
//!
//! One value does not come back as it was, in Kong as here: a basic-auth password. Kong stores
//! only `sha1(password .. consumer id)`, decK dumps that hash, and `deck gateway sync` posts it
//! back as the password, which the Admin API hashes again (decK warns that basic-auth
//! passwords do not survive an export and import, and leaves passwords out of its diff; its
//! `--skip-hash-for-basic-auth` is refused for anything but Konnect). The test checks that the
//! restored value is exactly Kong's hash of the dumped one.

use serde_json::{json, Value};
use strait_e2e::admin_api::data;
use strait_e2e::deck::deck;
use strait_e2e::{get, get_host, Gateway, GatewayOptions, LeafCert, TempDir, TestCa, Upstream, UpstreamKind};

/// Every collection Strait stores, with the fields that identify an entry across a reset
/// (ids are kept by decK's dump only where the entity has no other key).
const COLLECTIONS: &[&str] = &[
    "services",
    "routes",
    "upstreams",
    "targets",
    "consumers",
    "key-auths",
    "basic-auths",
    "acls",
    "jwts",
    "hmac-auths",
    "plugins",
    "certificates",
    "snis",
    "ca_certificates",
    "vaults",
    "key-sets",
    "keys",
    "consumer_groups",
];

/// The usernames of the members of consumer group `group`, sorted.
async fn members(gw: &Gateway, group: &str) -> Vec<String> {
    let body = gw.admin_get(&format!("/consumer_groups/{group}")).await.json();
    let mut names: Vec<String> = body["consumers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["username"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

/// A JWK for `kid` (an RSA public key's members).
fn jwk(kid: &str) -> String {
    json!({ "kty": "RSA", "kid": kid, "n": "0vx7agoebGcQSuuPiLJXZpt", "e": "AQAB" }).to_string()
}

fn every_entity(origin: &Upstream, leaf: &LeafCert, ca_pem: &str) -> Value {
    json!({
        "_format_version": "3.0",
        "services": [
            {
                "name": "orders", "url": format!("http://127.0.0.1:{}/v1", origin.port()),
                "tags": ["team-a", "orders"], "retries": 2,
                "routes": [
                    { "name": "orders-route", "paths": ["/orders"], "methods": ["GET"], "tags": ["team-a"] },
                    {
                        "name": "closed", "paths": ["/closed"],
                        "plugins": [{ "name": "request-termination", "config": { "status_code": 410, "message": "gone" } }]
                    }
                ]
            },
            {
                "name": "balanced", "host": "pool.internal", "port": 80, "protocol": "http",
                "routes": [{ "name": "balanced-route", "hosts": ["balanced.example"], "paths": ["/"] }],
                "plugins": [{ "name": "request-termination", "enabled": false, "config": { "status_code": 503 } }]
            },
            {
                "name": "verified", "url": "https://127.0.0.1:9", "tls_verify": true,
                "ca_certificates": ["3f5c2d4e-8a61-4f1b-9c2d-7e3a1b5c9d01"],
                "tls_sans": { "dnsnames": ["backend.internal"], "uris": ["spiffe://cluster/backend"] }
            }
        ],
        "upstreams": [
            {
                "name": "pool.internal", "algorithm": "round-robin", "tags": ["pool"],
                "targets": [{ "target": format!("127.0.0.1:{}", origin.port()), "weight": 100 }]
            },
            {
                "name": "sticky.internal", "algorithm": "sticky-sessions",
                "sticky_sessions_cookie": "srv", "sticky_sessions_cookie_path": "/app"
            }
        ],
        "consumers": [
            {
                "username": "alice", "custom_id": "a-1", "tags": ["vip"],
                "keyauth_credentials": [{ "key": "alice-key" }],
                "basicauth_credentials": [{ "username": "alice-basic", "password": "hunter2", "tags": ["web"] }],
                "acls": [{ "group": "admins" }, { "group": "staff", "tags": ["t"] }],
                "jwt_secrets": [{ "key": "alice-iss", "secret": "alice-jwt-secret" }],
                "hmacauth_credentials": [{ "username": "alice-hmac", "secret": "alice-hmac-secret" }]
            },
            {
                "username": "bob", "keyauth_credentials": [{ "key": "bob-key", "tags": ["rotated"] }],
                "groups": [{ "name": "gold" }],
                "plugins": [{ "name": "request-termination", "config": { "status_code": 403, "message": "bob is blocked" } }]
            }
        ],
        "plugins": [
            { "name": "request-termination", "enabled": false, "config": { "status_code": 500 } }
        ],
        "certificates": [
            { "cert": leaf.cert_pem, "key": leaf.key_pem, "tags": ["edge"], "snis": [{ "name": "api.example.com" }] }
        ],
        "ca_certificates": [
            { "id": "3f5c2d4e-8a61-4f1b-9c2d-7e3a1b5c9d01", "cert": ca_pem, "tags": ["internal-ca"] }
        ],
        "vaults": [{ "prefix": "edge-env", "name": "env", "description": "edge secrets", "config": { "prefix": "STRAIT_RT_" } }],
        "key_sets": [{ "name": "signing" }],
        "keys": [
            // Not in the set: with basic-auth credentials decK dumps ids, and then writes a
            // key's `set` as `{id, name}`, which its own diff reads as a change against any
            // gateway (keys in sets round-trip in vaults_keys.rs, without basic-auth).
            { "name": "signer-1", "kid": "signer-1", "jwk": jwk("signer-1") },
            { "name": "from-vault", "kid": "vaulted", "jwk": "{vault://edge-env/jwk}" }
        ],
        "consumer_groups": [{
            "name": "gold", "tags": ["tier"],
            "consumers": [{ "username": "alice" }],
            "plugins": [{ "name": "request-termination", "config": { "status_code": 418, "message": "gold" } }]
        }]
    })
}

/// Every collection's entries, for before/after equality. decK re-creates entities by their
/// names, so ids may change: each id is replaced by a label of the entity it names (its
/// collection and identifying field), which keeps every reference checked. Timestamps go.
async fn lists(gw: &Gateway) -> Value {
    let mut raw = Vec::new();
    for collection in COLLECTIONS {
        let reply = gw.admin_get(&format!("/{collection}?size=1000")).await;
        assert_eq!(reply.status, 200, "GET /{collection}: {}", reply.text());
        raw.push((*collection, data(&reply.json())));
    }
    let mut labels = std::collections::HashMap::new();
    for (collection, entries) in &raw {
        for entry in entries {
            let identity = ["name", "username", "key", "target", "cert", "group", "prefix"]
                .iter()
                .find_map(|field| entry[*field].as_str())
                .unwrap_or("?");
            let id = entry["id"].as_str().unwrap_or_default().to_string();
            labels.insert(id, format!("{collection}:{identity}"));
        }
    }
    let mut all = serde_json::Map::new();
    for (collection, entries) in raw {
        let mut entries: Vec<Value> = entries
            .into_iter()
            .map(|mut entry| {
                if let Some(object) = entry.as_object_mut() {
                    for field in ["id", "created_at", "updated_at"] {
                        object.remove(field);
                    }
                }
                relabel(&mut entry, &labels);
                entry
            })
            .collect();
        entries.sort_by_key(|entry| entry.to_string());
        all.insert(collection.to_string(), Value::Array(entries));
    }
    Value::Object(all)
}

fn relabel(value: &mut Value, labels: &std::collections::HashMap<String, String>) {
    match value {
        Value::String(text) => {
            if let Some(label) = labels.get(text.as_str()) {
                *text = label.clone();
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| relabel(v, labels)),
        Value::Object(map) => map.values_mut().for_each(|v| relabel(v, labels)),
        _ => {}
    }
}

/// What Kong stores for a basic-auth `password` of `consumer`: lowercase hex SHA-1 of the
/// password followed by the consumer's id (kong/plugins/basic-auth/crypto.lua).
fn kong_password_hash(password: &str, consumer: &str) -> String {
    let salted = format!("{password}{consumer}");
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, salted.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// What the proxy answers for a fixed set of requests: status and body of each.
async fn answers(gw: &Gateway) -> Vec<(u16, String)> {
    let requests = [
        get("/orders/list"),
        get("/closed"),
        get_host("/anything", "balanced.example"),
        get("/nothing-here"),
    ];
    let mut out = Vec::new();
    for request in requests {
        let reply = gw.proxy(request).await;
        // The request id (echoed by the upstream, in error bodies) is new
        // for every request: compared as its place, not its value.
        let id = reply.header("x-kong-request-id").expect("X-Kong-Request-Id");
        out.push((reply.status.as_u16(), reply.text().replace(&id, "<request id>")));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deck_dump_reset_sync_round_trips_every_stored_entity() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let leaf = LeafCert::self_signed(&["api.example.com"]);
    let ca = TestCa::new("round-trip CA");
    let everything = every_entity(&origin, &leaf, &ca.cert_pem());
    let jwk_env = jwk("vaulted");
    let env = [("STRAIT_RT_JWK", jwk_env.as_str())];
    let dir = TempDir::new();
    std::fs::write(dir.path().join("everything.json"), everything.to_string()).expect("write");
    let validated = strait_e2e::run_strait(&["config", "validate", "everything.json"], dir.path(), &env).await;
    assert_eq!(validated.code, Some(0), "strait config validate: {}", validated.all());
    let gw = Gateway::start(GatewayOptions::new().env("STRAIT_RT_JWK", &jwk_env)).await;
    gw.apply(&everything).await;
    // The marker the harness adds is part of the configuration too; drop it so the lists
    // below hold only what this test wrote.
    for path in ["/routes/e2e-marker", "/services/e2e-marker-service"] {
        let reply = gw.admin("DELETE", path, &[], "").await;
        assert_eq!(reply.status, 204, "DELETE {path}: {}", reply.text());
    }
    let before = lists(&gw).await;
    // Kong's export loads back into the node it came from as no change.
    let exported = gw.admin_get("/config").await.json()["config"]
        .as_str()
        .expect("GET /config answers {config: text}")
        .to_string();
    let (status, body) = gw.post_config(&json!({ "config": exported }).to_string()).await;
    assert_eq!(status, 201, "GET /config posted back: {body}");
    assert_eq!(lists(&gw).await, before, "GET /config round-trips every entity");
    for collection in COLLECTIONS {
        assert!(
            !before[*collection].as_array().is_some_and(Vec::is_empty),
            "the configuration uses {collection}"
        );
    }
    assert_eq!(members(&gw, "gold").await, ["alice", "bob"]);
    let answered = answers(&gw).await;
    assert_eq!(answered[0].0, 200, "proxied through the service: {answered:?}");
    assert_eq!(answered[1], (410, r#"{"message":"gone"}"#.to_string()), "{answered:?}");
    assert_eq!(
        answered[2].0, 200,
        "proxied through the upstream's target: {answered:?}"
    );

    deck(&gw, dir.path(), &["gateway", "dump", "-o", "dump.yaml", "--yes"])
        .await
        .expect_success("deck gateway dump");
    deck(&gw, dir.path(), &["gateway", "reset", "--force"])
        .await
        .expect_success("deck gateway reset");
    let emptied = lists(&gw).await;
    for collection in COLLECTIONS {
        assert_eq!(emptied[*collection], json!([]), "reset emptied {collection}");
    }
    assert_eq!(
        gw.proxy(get("/closed")).await.status,
        404,
        "nothing is routed after the reset"
    );

    let synced = deck(&gw, dir.path(), &["gateway", "sync", "dump.yaml"])
        .await
        .expect_success("deck gateway sync");
    let diff = deck(&gw, dir.path(), &["gateway", "diff", "dump.yaml"])
        .await
        .expect_success("deck gateway diff");
    diff.expect_no_changes(&synced.stdout);
    let alice = gw.admin_get("/consumers/alice").await.json()["id"]
        .as_str()
        .expect("alice's id")
        .to_string();
    let dumped_hash = before["basic-auths"][0]["password"]
        .as_str()
        .expect("a basic-auth password")
        .to_string();
    let rehashed = kong_password_hash(&dumped_hash, &alice);
    let mut expected = before.clone();
    expected["basic-auths"][0]["password"] = json!(rehashed);
    assert_eq!(
        lists(&gw).await,
        expected,
        "every entity is back as it was, the basic-auth password hashed again as Kong does"
    );
    deck(&gw, dir.path(), &["gateway", "dump", "-o", "again.yaml", "--yes"])
        .await
        .expect_success("second deck gateway dump");
    let first = std::fs::read_to_string(dir.path().join("dump.yaml")).expect("dump.yaml");
    let second = std::fs::read_to_string(dir.path().join("again.yaml")).expect("again.yaml");
    assert!(first.contains(&dumped_hash), "the dump holds the stored hash:\n{first}");
    assert_eq!(
        first.replace(&dumped_hash, &rehashed),
        second,
        "a dump of the restored node equals the original dump but for the re-hashed password"
    );
    assert_eq!(answers(&gw).await, answered, "the proxy answers as before");
    assert_eq!(members(&gw, "gold").await, ["alice", "bob"], "memberships are back");
}
