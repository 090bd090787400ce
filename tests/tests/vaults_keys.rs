//! Vaults, secret references, keys and key sets on a real node.
//!
//! A certificate whose cert comes from an environment variable and whose
//! key comes from a file serves TLS; the reference, never the value, is
//! what `GET`, `/config`, the log and the LMDB file hold; an unset
//! variable is a 400 naming the field and the reference; a rotated file
//! takes effect on the next refresh without a config change. Keys and key
//! sets have Kong's endpoints, nesting and cascade.

use std::time::Duration;

use serde_json::{json, Value};
use strait_e2e::admin_api::{data, expect, expect_error, send_json};
use strait_e2e::{eventually, get_host, Conn, Gateway, GatewayOptions, LeafCert, TempDir, TlsOptions, Trust};

/// The certificate the proxy serves for `sni`, as DER.
async fn served_certificate(gw: &Gateway, sni: &str) -> Vec<u8> {
    let options = TlsOptions::new(Some(sni), &[b"http/1.1"], Trust::Anything);
    let conn = Conn::tls(gw.proxy_tls_addr(), &options).await.expect("TLS handshake");
    let info = conn.tls.expect("a TLS connection");
    info.peer_certificates.first().expect("a certificate").to_vec()
}

fn pem_body(pem: &str) -> String {
    pem.lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<Vec<_>>()
        .join("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn referenced_tls_material_serves_rotates_and_never_leaks() {
    let first = LeafCert::self_signed(&["secret.test"]);
    let second = LeafCert::self_signed(&["secret.test"]);
    let secrets = TempDir::new();
    std::fs::write(secrets.path().join("tls-key"), format!("{}\n", first.key_pem)).unwrap();
    let gw = Gateway::start(
        GatewayOptions::new()
            .env("STRAIT_T_TLS_CERT", &first.cert_pem)
            .setting("vault_refresh_interval", "1s"),
    )
    .await;
    let base = secrets.path().to_str().unwrap();
    let config = json!({
        "_format_version": "3.0",
        "vaults": [{ "prefix": "files", "name": "file", "config": { "base_path": base } }],
        "certificates": [{
            "id": "6f0c8a52-5b1e-4f7e-9a55-0d3c1a2b3c4d",
            "cert": "{vault://env/strait-t-tls-cert}",
            "key": "{vault://files/tls-key}",
            "snis": ["secret.test"]
        }],
        "services": [{ "name": "s", "url": "http://127.0.0.1:9",
            "routes": [{ "name": "r", "paths": ["/"],
                "plugins": [{ "name": "request-termination", "config": { "status_code": 200, "message": "ok" } }] }] }]
    });
    let (status, body) = gw.post_config(&config.to_string()).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(served_certificate(&gw, "secret.test").await, first.cert_der.to_vec());

    // The reference is what is stored and shown; the values are nowhere.
    let cert = expect(
        &gw.admin_get("/certificates/6f0c8a52-5b1e-4f7e-9a55-0d3c1a2b3c4d").await,
        200,
        "GET",
    );
    assert_eq!(cert["cert"], "{vault://env/strait-t-tls-cert}");
    assert_eq!(cert["key"], "{vault://files/tls-key}");
    let exported = gw.admin_get("/config").await.text();
    let key_body = pem_body(&first.key_pem);
    let cert_body = pem_body(&first.cert_pem);
    for (place, text) in [
        ("GET /config", exported.as_str()),
        ("POST /config answer", body.as_str()),
    ] {
        assert!(text.contains("{vault://files/tls-key}"), "{place} keeps the reference");
        assert!(
            !text.contains(&key_body[..40]) && !text.contains(&cert_body[..40]),
            "{place} leaks a secret"
        );
    }

    // An unset variable: the change is refused whole, naming field and reference.
    let mut broken = config.clone();
    broken["certificates"][0]["cert"] = json!("{vault://env/strait-t-unset}");
    let (status, body) = gw.post_config(&broken.to_string()).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("cert: could not resolve {vault://env/strait-t-unset}")
            && body.contains("STRAIT_T_UNSET is not set"),
        "{body}"
    );
    let reply = send_json(
        &gw,
        "POST",
        "/certificates",
        &json!({ "cert": "{vault://env/strait-t-unset}", "key": "{vault://files/tls-key}" }),
    )
    .await;
    let error = expect_error(&reply, 400, 2, "schema violation");
    assert!(error.to_string().contains("{vault://env/strait-t-unset}"), "{error}");
    // A reference to a vault that does not exist, and one leaving the directory.
    for (reference, why) in [
        ("{vault://nowhere/x}", "vault 'nowhere' not found"),
        ("{vault://files/..%2Fstrait.conf}", "leaves the base path"),
    ] {
        let reply = send_json(
            &gw,
            "PATCH",
            "/certificates/6f0c8a52-5b1e-4f7e-9a55-0d3c1a2b3c4d",
            &json!({ "key": reference }),
        )
        .await;
        let error = expect_error(&reply, 400, 2, "schema violation");
        assert!(error.to_string().contains(why), "{reference}: {error}");
    }
    // A vault still referenced cannot be deleted.
    let reply = gw.admin("DELETE", "/vaults/files", &[], "").await;
    assert_eq!(reply.status.as_u16(), 400, "{}", reply.text());
    assert_eq!(served_certificate(&gw, "secret.test").await, first.cert_der.to_vec());

    // Rotation: the file changes, the node serves the new key on its next
    // refresh. The cert moves to a file too (same vault), in one write.
    std::fs::write(secrets.path().join("tls-cert"), &second.cert_pem).unwrap();
    std::fs::write(secrets.path().join("tls-key"), &second.key_pem).unwrap();
    let reply = send_json(
        &gw,
        "PATCH",
        "/certificates/6f0c8a52-5b1e-4f7e-9a55-0d3c1a2b3c4d",
        &json!({ "cert": "{vault://files/tls-cert}" }),
    )
    .await;
    expect(&reply, 200, "PATCH cert to a file reference");
    assert_eq!(served_certificate(&gw, "secret.test").await, second.cert_der.to_vec());
    std::fs::write(secrets.path().join("tls-cert"), &first.cert_pem).unwrap();
    std::fs::write(secrets.path().join("tls-key"), &first.key_pem).unwrap();
    eventually(Duration::from_secs(10), "the rotated certificate is served", || async {
        match served_certificate(&gw, "secret.test").await == first.cert_der.to_vec() {
            true => Ok(()),
            false => Err(anyhow::anyhow!("still the old certificate")),
        }
    })
    .await;
    let reply = gw.proxy(get_host("/", "secret.test")).await;
    assert_eq!(reply.status.as_u16(), 200);

    // Nothing secret in the log or in the store file.
    let log = gw.log();
    let store = gw.stored_bytes();
    for body in [
        pem_body(&first.key_pem),
        pem_body(&second.key_pem),
        pem_body(&first.cert_pem),
    ] {
        assert!(!log.contains(&body[..40]), "the log holds a secret");
        let needle = &body.as_bytes()[..40];
        assert!(
            !store.windows(needle.len()).any(|w| w == needle),
            "the store file holds a secret"
        );
    }
}

fn jwk(kid: &str) -> String {
    json!({ "kty": "RSA", "kid": kid, "n": "0vx7agoebGcQSuuPiLJXZpt", "e": "AQAB" }).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_key_sets_have_kongs_endpoints() {
    let gw = Gateway::start(GatewayOptions::new().env("STRAIT_T_JWK", &jwk("env-kid"))).await;
    let set = expect(
        &send_json(&gw, "POST", "/key-sets", &json!({ "name": "signing" })).await,
        201,
        "POST /key-sets",
    );
    let key = json!({ "name": "k1", "kid": "k1", "set": { "name": "signing" }, "jwk": jwk("k1") });
    let created = expect(&send_json(&gw, "POST", "/keys", &key).await, 201, "POST /keys");
    assert_eq!(created["set"], json!({ "id": set["id"] }));
    assert_eq!(created["jwk"], jwk("k1"));
    let nested = expect(
        &send_json(
            &gw,
            "POST",
            "/key-sets/signing/keys",
            &json!({ "kid": "k2", "jwk": "{vault://env/strait-t-jwk}" }),
        )
        .await,
        400,
        "a referenced JWK whose kid differs",
    );
    assert!(
        nested.to_string().contains("kid in jwk.kid must be equal to keys.kid"),
        "{nested}"
    );
    let nested = expect(
        &send_json(
            &gw,
            "POST",
            "/key-sets/signing/keys",
            &json!({ "kid": "env-kid", "jwk": "{vault://env/strait-t-jwk}" }),
        )
        .await,
        201,
        "POST /key-sets/signing/keys",
    );
    assert_eq!(
        nested["jwk"], "{vault://env/strait-t-jwk}",
        "the reference is returned, not the value"
    );
    assert_eq!(data(&gw.admin_get("/key-sets/signing/keys").await.json()).len(), 2);

    // (kid, set) is unique, as Kong's cache key.
    let reply = send_json(
        &gw,
        "POST",
        "/keys",
        &json!({ "kid": "k1", "set": { "id": set["id"] }, "jwk": jwk("k1") }),
    )
    .await;
    let error = expect_error(&reply, 409, 5, "unique constraint violation");
    assert_eq!(
        error["fields"],
        json!({ "kid": "k1", "set": { "id": set["id"] } }),
        "{error}"
    );
    // Errors name their field.
    let reply = send_json(&gw, "POST", "/keys", &json!({ "kid": "x", "jwk": "{not json" })).await;
    let error = expect_error(&reply, 400, 2, "schema violation");
    assert_eq!(error["fields"]["jwk"], "could not json decode jwk string");
    let reply = send_json(&gw, "POST", "/vaults", &json!({ "prefix": "env", "name": "env" })).await;
    let error = expect_error(&reply, 400, 2, "schema violation");
    assert_eq!(error["fields"]["prefix"], "must not be one of: env, file");

    // Deleting the set deletes its keys (Kong's on_delete = cascade).
    let reply = gw.admin("DELETE", "/key-sets/signing", &[], "").await;
    assert_eq!(reply.status.as_u16(), 204, "{}", reply.text());
    assert!(data(&gw.admin_get("/keys").await.json()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_with_every_secret_entity_validates_loads_and_round_trips_through_deck() {
    let dir = TempDir::new();
    let file = json!({
        "_format_version": "3.0",
        "vaults": [{ "prefix": "app-env", "name": "env", "description": "app secrets", "config": { "prefix": "STRAIT_T_" } }],
        "key_sets": [{ "name": "signing", "keys": [{ "name": "nested", "kid": "n1", "jwk": jwk("n1") }] }],
        "keys": [
            { "name": "top", "kid": "t1", "set": "signing", "jwk": "{vault://app-env/jwk}" },
            { "name": "loose", "kid": "l1", "pem": { "public_key": include_str!("keys/jwt_rsa_public.pem") } }
        ]
    });
    let path = dir.path().join("secrets.json");
    std::fs::write(&path, file.to_string()).unwrap();
    let jwk_t1 = jwk("t1");
    let env = [("STRAIT_T_JWK", jwk_t1.as_str())];
    let validated = strait_e2e::run_strait(&["config", "validate", "secrets.json"], dir.path(), &env).await;
    assert_eq!(validated.code, Some(0), "{}", validated.all());
    let unset = strait_e2e::run_strait(&["config", "validate", "secrets.json"], dir.path(), &[]).await;
    assert_eq!(unset.code, Some(1), "{}", unset.all());
    assert!(unset.stderr.contains("STRAIT_T_JWK is not set"), "{}", unset.all());

    let gw = Gateway::start(GatewayOptions::new().env("STRAIT_T_JWK", &jwk("t1"))).await;
    let (status, body) = gw.post_config(&file.to_string()).await;
    assert_eq!(status, 201, "{body}");
    let keys = data(&gw.admin_get("/keys").await.json());
    assert_eq!(keys.len(), 3);
    let exported: Value = gw.admin_get("/config").await.json();
    let exported = exported["config"].as_str().expect("Kong's {config: text}").to_string();
    for part in ["vaults:", "prefix: STRAIT_T_", "key_sets:", "{vault://app-env/jwk}"] {
        assert!(exported.contains(part), "GET /config has {part}:\n{exported}");
    }
    let (status, body) = gw.post_config(&json!({ "config": exported }).to_string()).await;
    assert_eq!(status, 201, "GET /config loads back: {body}");

    strait_e2e::deck::deck(&gw, dir.path(), &["gateway", "dump", "-o", "dump.yaml", "--yes"])
        .await
        .expect_success("deck gateway dump");
    let dumped = std::fs::read_to_string(dir.path().join("dump.yaml")).unwrap();
    for entity in ["vaults:", "keys:", "key_sets:", "{vault://app-env/jwk}"] {
        assert!(dumped.contains(entity), "decK dumps {entity}:\n{dumped}");
    }
    let target = Gateway::start(GatewayOptions::new().env("STRAIT_T_JWK", &jwk("t1"))).await;
    strait_e2e::deck::deck(&target, dir.path(), &["gateway", "sync", "dump.yaml"])
        .await
        .expect_success("deck gateway sync");
    strait_e2e::deck::deck(&target, dir.path(), &["gateway", "diff", "dump.yaml"])
        .await
        .expect_success("deck gateway diff")
        .expect_no_changes("synced from a dump");
    assert_eq!(data(&target.admin_get("/keys").await.json()).len(), 3);
}
