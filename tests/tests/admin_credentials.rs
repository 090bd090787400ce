//! Consumer credentials through the Admin API, as Kong's bundled auth plugins expose them:
//! basic-auth (`/consumers/{c}/basic-auth`, `/basic-auths`), ACL groups (`/consumers/{c}/acls`,
//! `/acls`), JWT secrets (`/consumers/{c}/jwt`, `/jwts`) and HMAC-auth
//! (`/consumers/{c}/hmac-auth`, `/hmac-auths`): create, list, read, update and delete through
//! the nested and the global endpoints, pagination and tags, the basic-auth password stored
//! only as Kong's salted SHA-1, cascades with the consumer, and all four nested under a
//! consumer in a declarative file loaded through `POST /config`.

use serde_json::{json, Value};
use strait_e2e::admin_api::{data, expect, expect_error, send_form, send_json};
use strait_e2e::{Gateway, GatewayOptions};

/// Alice's fixed id, so the password hashes below are known values:
/// `printf 'hunter2<id>' | sha1sum` and `printf 'correct-horse<id>' | sha1sum`.
const ALICE: &str = "5c0a11ce-0000-4000-8000-00000000a11c";
const HUNTER2_HASH: &str = "1709e075bec08a323a12aa15e47027290ffed396";
const CORRECT_HORSE_HASH: &str = "05f9553a9f8abb56f458a16c30eb3b8d72b62575";

const RSA_PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----
MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQCu6EzfxvkK4G0F31W0O9LdRVe7
whzuYCCkny7NgRlkVXaZDIZuF49pLQEaK78ja+U4PLpOiRmhb81kEN7hmqNlsZqs
yZoW8xoLylhqxu1TuHdK/Fl8SlP0NiN5rHzXOG7FDziHYgHCq7AvwC9melQpMKjg
mTIVRTZG2nxPgus9WQIDAQAB
-----END PUBLIC KEY-----
";

/// A gateway with consumers alice (fixed id) and bob.
async fn gateway_with_consumers() -> Gateway {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let alice = send_json(
        &gw,
        "PUT",
        &format!("/consumers/{ALICE}"),
        &json!({"username": "alice"}),
    )
    .await;
    expect(&alice, 200, "PUT alice");
    expect(
        &send_json(&gw, "POST", "/consumers", &json!({"username": "bob"})).await,
        201,
        "bob",
    );
    gw
}

fn id_of(entity: &Value) -> String {
    entity["id"].as_str().expect("an id").to_string()
}

fn is_random_hex(value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()))
}

async fn count(gw: &Gateway, path: &str) -> usize {
    data(&expect(&gw.admin_get(path).await, 200, path)).len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_stores_only_the_salted_hash() {
    let gw = gateway_with_consumers().await;
    let body = json!({"username": "alice-basic", "password": "hunter2", "tags": ["web"]});
    let created = expect(
        &send_json(&gw, "POST", "/consumers/alice/basic-auth", &body).await,
        201,
        "POST nested",
    );
    assert_eq!(
        created["password"], HUNTER2_HASH,
        "the password is never returned as given"
    );
    assert_eq!(created["consumer"], json!({"id": ALICE}));
    let id = id_of(&created);
    for path in [
        "/basic-auths/alice-basic".to_string(),
        format!("/basic-auths/{id}"),
        format!("/consumers/alice/basic-auth/{id}"),
        "/consumers/alice/basic-auth/alice-basic".to_string(),
        format!("/consumers/{ALICE}/basic-auth/alice-basic"),
    ] {
        let read = expect(&gw.admin_get(&path).await, 200, &path);
        assert_eq!(
            (read["id"].as_str(), &read["password"]),
            (Some(id.as_str()), &json!(HUNTER2_HASH))
        );
    }
    assert_eq!(
        expect(&gw.admin_get("/basic-auths/alice-basic/consumer").await, 200, "owner")["username"],
        "alice"
    );
    expect(
        &gw.admin_get("/consumers/bob/basic-auth/alice-basic").await,
        404,
        "not bob's",
    );

    // A PATCH without a password keeps the stored hash; one with a password hashes it.
    let tagged = send_json(
        &gw,
        "PATCH",
        "/basic-auths/alice-basic",
        &json!({"tags": ["web", "v2"]}),
    )
    .await;
    let tagged = expect(&tagged, 200, "PATCH tags");
    assert_eq!(
        (&tagged["password"], &tagged["tags"]),
        (&json!(HUNTER2_HASH), &json!(["web", "v2"]))
    );
    let changed = send_json(
        &gw,
        "PATCH",
        &format!("/consumers/alice/basic-auth/{id}"),
        &json!({"password": "correct-horse"}),
    )
    .await;
    assert_eq!(expect(&changed, 200, "PATCH password")["password"], CORRECT_HORSE_HASH);
    let put = send_json(
        &gw,
        "PUT",
        "/consumers/alice/basic-auth/alice-basic",
        &json!({"password": "hunter2"}),
    )
    .await;
    let put = expect(&put, 200, "PUT by username");
    assert_eq!(
        (put["id"].as_str(), &put["password"], &put["tags"]),
        (Some(id.as_str()), &json!(HUNTER2_HASH), &Value::Null)
    );

    // The global endpoint, a form body, and the errors.
    let form = send_form(
        &gw,
        "POST",
        "/basic-auths",
        "username=bob-basic&password=pw&consumer.username=bob",
    )
    .await;
    let form = expect(&form, 201, "POST global form");
    assert_eq!(form["password"].as_str().map(str::len), Some(40));
    assert_ne!(form["password"], "pw");
    assert_eq!(count(&gw, "/basic-auths").await, 2);
    assert_eq!(count(&gw, "/consumers/bob/basic-auth").await, 1);
    let taken = send_json(
        &gw,
        "POST",
        "/consumers/bob/basic-auth",
        &json!({"username": "alice-basic", "password": "x"}),
    )
    .await;
    expect_error(&taken, 409, 5, "unique constraint violation");
    let missing = send_json(
        &gw,
        "POST",
        "/consumers/bob/basic-auth",
        &json!({"username": "u", "password": ""}),
    )
    .await;
    let missing = expect_error(&missing, 400, 2, "schema violation");
    assert_eq!(missing["fields"], json!({"password": "length must be at least 1"}));
    let no_consumer = send_json(&gw, "POST", "/basic-auths", &json!({"username": "u", "password": "p"})).await;
    let no_consumer = expect_error(&no_consumer, 400, 2, "schema violation");
    assert_eq!(no_consumer["fields"]["consumer"], "required field missing");

    expect(
        &gw.admin("DELETE", "/consumers/alice/basic-auth/alice-basic", &[], "")
            .await,
        204,
        "DELETE nested",
    );
    expect(
        &gw.admin("DELETE", "/basic-auths/bob-basic", &[], "").await,
        204,
        "DELETE global",
    );
    assert_eq!(count(&gw, "/basic-auths").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_groups_are_named_by_group_within_their_consumer() {
    let gw = gateway_with_consumers().await;
    let admins = expect(
        &send_json(&gw, "POST", "/consumers/alice/acls", &json!({"group": "admins"})).await,
        201,
        "POST nested",
    );
    let id = id_of(&admins);
    assert_eq!(
        (&admins["group"], &admins["consumer"]),
        (&json!("admins"), &json!({"id": ALICE}))
    );
    expect(&gw.admin_get(&format!("/acls/{id}")).await, 200, "global by id");
    let by_group = expect(
        &gw.admin_get("/consumers/alice/acls/admins").await,
        200,
        "nested by group",
    );
    assert_eq!(by_group["id"], id.as_str());
    expect(
        &gw.admin_get("/consumers/bob/acls/admins").await,
        404,
        "bob is no admin",
    );
    assert_eq!(
        expect(&gw.admin_get(&format!("/acls/{id}/consumer")).await, 200, "owner")["username"],
        "alice"
    );

    // One group once per consumer; another consumer may join it.
    let twice = send_json(&gw, "POST", "/consumers/alice/acls", &json!({"group": "admins"})).await;
    let twice = expect_error(&twice, 409, 5, "unique constraint violation");
    assert_eq!(twice["fields"]["group"], "admins", "{twice}");
    let global = send_json(
        &gw,
        "POST",
        "/acls",
        &json!({"group": "admins", "consumer": {"username": "bob"}}),
    )
    .await;
    expect(&global, 201, "POST global");
    let no_group = send_json(&gw, "POST", "/consumers/bob/acls", &json!({"tags": ["t"]})).await;
    assert_eq!(
        expect_error(&no_group, 400, 2, "schema violation")["fields"],
        json!({"group": "required field missing"})
    );

    // PUT by group creates or replaces; PATCH and DELETE by group.
    let staff = expect(
        &send_json(&gw, "PUT", "/consumers/alice/acls/staff", &json!({"tags": ["s"]})).await,
        200,
        "PUT new group",
    );
    assert_eq!((&staff["group"], &staff["tags"]), (&json!("staff"), &json!(["s"])));
    let again = expect(
        &send_json(&gw, "PUT", "/consumers/alice/acls/staff", &json!({})).await,
        200,
        "PUT same group",
    );
    assert_eq!((&again["id"], &again["tags"]), (&staff["id"], &Value::Null));
    let patched = expect(
        &send_json(&gw, "PATCH", "/consumers/alice/acls/admins", &json!({"tags": ["root"]})).await,
        200,
        "PATCH by group",
    );
    assert_eq!(
        (patched["id"].as_str(), &patched["tags"]),
        (Some(id.as_str()), &json!(["root"]))
    );
    assert_eq!(count(&gw, "/consumers/alice/acls").await, 2);
    assert_eq!(count(&gw, "/acls").await, 3);
    expect(
        &gw.admin("DELETE", "/consumers/alice/acls/staff", &[], "").await,
        204,
        "DELETE by group",
    );
    expect(
        &gw.admin("DELETE", &format!("/acls/{id}"), &[], "").await,
        204,
        "DELETE global",
    );
    assert_eq!(count(&gw, "/consumers/alice/acls").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_secrets_generate_key_and_secret_and_check_public_keys() {
    let gw = gateway_with_consumers().await;
    let generated = expect(
        &send_json(&gw, "POST", "/consumers/alice/jwt", &json!({})).await,
        201,
        "POST nested, all defaults",
    );
    assert_eq!(generated["algorithm"], "HS256");
    assert!(
        is_random_hex(&generated["key"]) && is_random_hex(&generated["secret"]),
        "{generated}"
    );
    assert_eq!(generated["rsa_public_key"], Value::Null);
    let key = generated["key"].as_str().unwrap().to_string();
    let by_key = expect(&gw.admin_get(&format!("/jwts/{key}")).await, 200, "global by key");
    assert_eq!(by_key["secret"], generated["secret"]);
    expect(
        &gw.admin_get(&format!("/consumers/alice/jwt/{key}")).await,
        200,
        "nested by key",
    );

    let needs_key = send_json(
        &gw,
        "POST",
        "/jwts",
        &json!({"consumer": {"id": ALICE}, "algorithm": "RS256"}),
    )
    .await;
    assert_eq!(
        expect_error(&needs_key, 400, 2, "schema violation")["fields"],
        json!({"rsa_public_key": "required field missing"})
    );
    let bad_key =
        json!({"algorithm": "PS256", "rsa_public_key": "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"});
    let bad_key = send_json(&gw, "POST", "/consumers/alice/jwt", &bad_key).await;
    assert_eq!(
        expect_error(&bad_key, 400, 2, "schema violation")["fields"],
        json!({"rsa_public_key": "invalid key"})
    );
    let bad_algorithm = send_json(&gw, "POST", "/consumers/alice/jwt", &json!({"algorithm": "none"})).await;
    let bad_algorithm = expect_error(&bad_algorithm, 400, 2, "schema violation");
    assert!(bad_algorithm["fields"]["algorithm"]
        .as_str()
        .unwrap()
        .starts_with("expected one of: HS256"));

    let rsa = json!({"key": "alice-rsa", "algorithm": "RS256", "rsa_public_key": RSA_PUBLIC_KEY, "tags": ["rsa"]});
    let rsa = expect(
        &send_json(&gw, "POST", "/consumers/alice/jwt", &rsa).await,
        201,
        "RS256",
    );
    assert_eq!(rsa["rsa_public_key"], RSA_PUBLIC_KEY);
    let taken = send_json(&gw, "POST", "/consumers/bob/jwt", &json!({"key": "alice-rsa"})).await;
    expect_error(&taken, 409, 5, "unique constraint violation");
    let patched = send_json(&gw, "PATCH", "/jwts/alice-rsa", &json!({"algorithm": "RS512"})).await;
    let patched = expect(&patched, 200, "PATCH");
    assert_eq!(
        (&patched["algorithm"], &patched["secret"]),
        (&json!("RS512"), &rsa["secret"])
    );
    let cleared = send_json(&gw, "PATCH", "/jwts/alice-rsa", &json!({"rsa_public_key": null})).await;
    assert_eq!(
        expect_error(&cleared, 400, 2, "schema violation")["fields"],
        json!({"rsa_public_key": "required field missing"})
    );
    assert_eq!(count(&gw, "/consumers/alice/jwt").await, 2);
    assert_eq!(count(&gw, "/jwts?tags=rsa").await, 1);
    expect(
        &gw.admin("DELETE", "/consumers/alice/jwt/alice-rsa", &[], "").await,
        204,
        "DELETE nested",
    );
    expect(
        &gw.admin("DELETE", &format!("/jwts/{key}"), &[], "").await,
        204,
        "DELETE global",
    );
    assert_eq!(count(&gw, "/jwts").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hmac_auth_credentials_keep_their_secret() {
    let gw = gateway_with_consumers().await;
    let generated = expect(
        &send_json(
            &gw,
            "POST",
            "/consumers/bob/hmac-auth",
            &json!({"username": "bob-hmac"}),
        )
        .await,
        201,
        "POST nested",
    );
    assert!(is_random_hex(&generated["secret"]), "{generated}");
    let given = send_json(
        &gw,
        "POST",
        "/hmac-auths",
        &json!({"consumer": {"username": "alice"}, "username": "alice-hmac", "secret": "s3cr3t"}),
    )
    .await;
    let given = expect(&given, 201, "POST global");
    assert_eq!(given["secret"], "s3cr3t", "HMAC secrets are stored as given");
    assert_eq!(
        expect(&gw.admin_get("/hmac-auths/alice-hmac/consumer").await, 200, "owner")["username"],
        "alice"
    );
    expect(
        &gw.admin_get("/consumers/alice/hmac-auth/alice-hmac").await,
        200,
        "nested by username",
    );
    let patched = send_json(
        &gw,
        "PATCH",
        "/consumers/alice/hmac-auth/alice-hmac",
        &json!({"secret": "rotated"}),
    )
    .await;
    assert_eq!(expect(&patched, 200, "PATCH")["secret"], "rotated");
    let taken = send_json(
        &gw,
        "POST",
        "/consumers/alice/hmac-auth",
        &json!({"username": "bob-hmac"}),
    )
    .await;
    expect_error(&taken, 409, 5, "unique constraint violation");
    let no_name = send_json(&gw, "POST", "/consumers/alice/hmac-auth", &json!({})).await;
    assert_eq!(
        expect_error(&no_name, 400, 2, "schema violation")["fields"],
        json!({"username": "required field missing"})
    );
    assert_eq!(count(&gw, "/hmac-auths").await, 2);
    expect(
        &gw.admin("DELETE", "/hmac-auths/bob-hmac", &[], "").await,
        204,
        "DELETE global",
    );
    expect(
        &gw.admin("DELETE", "/consumers/alice/hmac-auth/alice-hmac", &[], "")
            .await,
        204,
        "DELETE nested",
    );
    assert_eq!(count(&gw, "/hmac-auths").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credential_lists_page_and_filter_by_tags() {
    let gw = gateway_with_consumers().await;
    for i in 0..5 {
        let tags = if i % 2 == 0 { json!(["even"]) } else { json!(["odd"]) };
        let acl = json!({"group": format!("g{i}"), "tags": tags});
        expect(&send_json(&gw, "POST", "/consumers/alice/acls", &acl).await, 201, "acl");
    }
    let mut seen = Vec::new();
    let mut path = "/consumers/alice/acls?size=2".to_string();
    loop {
        let page = expect(&gw.admin_get(&path).await, 200, &path);
        let entries = data(&page);
        assert!(entries.len() <= 2, "{page}");
        seen.extend(entries.iter().map(|e| e["group"].as_str().unwrap().to_string()));
        match page["next"].as_str() {
            Some(next) => path = next.to_string(),
            None => break,
        }
    }
    seen.sort();
    assert_eq!(seen, ["g0", "g1", "g2", "g3", "g4"]);
    assert_eq!(count(&gw, "/acls?tags=even").await, 3);
    assert_eq!(count(&gw, "/consumers/alice/acls?tags=odd").await, 2);
    let tags = expect(&gw.admin_get("/tags/odd").await, 200, "/tags/odd");
    assert!(data(&tags).iter().all(|row| row["entity_name"] == "acls"), "{tags}");
    assert_eq!(data(&tags).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_go_with_their_consumer() {
    let gw = gateway_with_consumers().await;
    let writes = [
        (
            "/consumers/alice/basic-auth",
            json!({"username": "a-basic", "password": "p"}),
        ),
        ("/consumers/alice/acls", json!({"group": "admins"})),
        ("/consumers/alice/jwt", json!({"key": "a-jwt"})),
        ("/consumers/alice/hmac-auth", json!({"username": "a-hmac"})),
        ("/consumers/bob/acls", json!({"group": "admins"})),
    ];
    for (path, body) in writes {
        expect(&send_json(&gw, "POST", path, &body).await, 201, path);
    }
    expect(
        &gw.admin("DELETE", "/consumers/alice", &[], "").await,
        204,
        "DELETE alice",
    );
    for collection in ["/basic-auths", "/jwts", "/hmac-auths"] {
        assert_eq!(count(&gw, collection).await, 0, "{collection} cascade");
    }
    let left = expect(&gw.admin_get("/acls").await, 200, "/acls");
    assert_eq!(data(&left).len(), 1, "only bob's ACL is left: {left}");
    // The freed names can be used again.
    let again = send_json(
        &gw,
        "POST",
        "/consumers/bob/basic-auth",
        &json!({"username": "a-basic", "password": "p"}),
    )
    .await;
    expect(&again, 201, "username free again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declarative_credentials_nested_under_a_consumer_load_via_post_config() {
    // `/config` is the embedded store's (Kong's DB-less) path: refused on
    // PostgreSQL, so this test keeps the embedded store in every run.
    let gw = Gateway::start(GatewayOptions::new().setting("database", "embedded")).await;
    let document = json!({
        "_format_version": "3.0",
        "consumers": [{
            "id": ALICE,
            "username": "alice",
            "basicauth_credentials": [{ "username": "alice-basic", "password": "hunter2" }],
            "acls": [{ "group": "admins" }, { "group": "staff", "tags": ["t"] }],
            "jwt_secrets": [{ "key": "alice-iss", "algorithm": "RS256", "rsa_public_key": RSA_PUBLIC_KEY }],
            "hmacauth_credentials": [{ "username": "alice-hmac", "secret": "hmac-secret" }],
        }],
    });
    gw.apply(&document).await;
    let basic = expect(
        &gw.admin_get("/consumers/alice/basic-auth/alice-basic").await,
        200,
        "basic",
    );
    assert_eq!(
        basic["password"], HUNTER2_HASH,
        "a declarative password is hashed as Kong does"
    );
    assert_eq!(count(&gw, "/consumers/alice/acls").await, 2);
    expect(&gw.admin_get("/consumers/alice/acls/staff").await, 200, "acl by group");
    let jwt = expect(&gw.admin_get("/jwts/alice-iss").await, 200, "jwt");
    assert_eq!(
        (&jwt["algorithm"], &jwt["consumer"]),
        (&json!("RS256"), &json!({"id": ALICE}))
    );
    let hmac = expect(&gw.admin_get("/hmac-auths/alice-hmac").await, 200, "hmac");
    assert_eq!(hmac["secret"], "hmac-secret");

    // GET /config says `_transform: false`, so loading it back keeps the stored hash.
    let exported = expect(&gw.admin_get("/config").await, 200, "GET /config");
    let text = exported["config"].as_str().expect("config text");
    let exported: Value = serde_yaml::from_str(text).expect("exported YAML");
    assert_eq!(exported["_transform"], false);
    assert_eq!(exported["basicauth_credentials"][0]["password"], HUNTER2_HASH);
    let (status, body) = gw.post_config(text).await;
    assert_eq!(status, 201, "{body}");
    let basic = expect(
        &gw.admin_get("/basic-auths/alice-basic").await,
        200,
        "basic after reload",
    );
    assert_eq!(basic["password"], HUNTER2_HASH, "not hashed a second time");

    // Errors name the nested entity.
    let mut broken = document.clone();
    broken["consumers"][0]["jwt_secrets"][0]["rsa_public_key"] = Value::Null;
    broken["consumers"][0]["acls"][1]["group"] = json!("admins");
    let (status, body) = gw.post_config(&broken.to_string()).await;
    assert_eq!(status, 400, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    let consumer = &body["fields"]["consumers"][0];
    assert_eq!(
        consumer["jwt_secrets"][0]["rsa_public_key"], "required field missing",
        "{body}"
    );
    let acl_error = consumer["acls"][1]["@entity"][0].as_str();
    assert!(acl_error.is_some_and(|m| m.contains("uniqueness violation")), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credential_schemas_and_endpoints_are_listed() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    for (table, field) in [
        ("basicauth_credentials", "password"),
        ("acls", "group"),
        ("jwt_secrets", "rsa_public_key"),
        ("hmacauth_credentials", "secret"),
    ] {
        let schema = expect(&gw.admin_get(&format!("/schemas/{table}")).await, 200, table);
        let fields = schema["fields"].as_array().unwrap();
        assert!(fields.iter().any(|f| f.get(field).is_some()), "{table}: {schema}");
    }
    let endpoints = expect(&gw.admin_get("/endpoints").await, 200, "/endpoints");
    let listed = endpoints["data"].to_string();
    for path in [
        "/consumers/{consumers}/basic-auth/{basicauth_credentials}",
        "/basic-auths/{basicauth_credentials}/consumer",
        "/consumers/{consumers}/acls/{acls}",
        "/consumers/{consumers}/jwt",
        "/jwts/{jwt_secrets}",
        "/hmac-auths",
    ] {
        assert!(listed.contains(path), "{path} in {listed}");
    }
}
