use serde_json::json;

use super::*;

const PUBLIC_PEM: &str = include_str!("../../../../../tests/tests/keys/jwt_rsa_public.pem");
const PRIVATE_PEM: &str = include_str!("../../../../../tests/tests/keys/jwt_rsa_private.pem");

fn jwk(kid: &str) -> String {
    json!({"kty": "RSA", "kid": kid, "n": "0vx7agoebGcQSuu", "e": "AQAB"}).to_string()
}

#[test]
fn vaults_take_kongs_prefix_rules_and_their_implementations_config() {
    let out = valid(
        EntityKind::Vaults,
        json!({"prefix": "my-env", "name": "env", "config": {"prefix": "APP_"}}),
    );
    assert_eq!(out["config"], json!({"prefix": "APP_"}));
    let out = valid(EntityKind::Vaults, json!({"prefix": "my-env", "name": "env"}));
    assert_eq!(out["config"], json!({"prefix": null}));
    assert_eq!(
        invalid(EntityKind::Vaults, json!({"prefix": "env", "name": "env"})),
        vec![pair("prefix", "must not be one of: env, file")]
    );
    assert_eq!(
        invalid(EntityKind::Vaults, json!({"prefix": "My_Vault", "name": "env"})),
        vec![pair("prefix", "invalid value: My_Vault")]
    );
    assert_eq!(
        invalid(EntityKind::Vaults, json!({"prefix": "aws-1", "name": "aws"})),
        vec![pair("name", "vault 'aws' is not installed")]
    );
    assert_eq!(
        invalid(
            EntityKind::Vaults,
            json!({"prefix": "files", "name": "file", "config": {"base": "/x"}})
        ),
        vec![
            pair("config.base_path", "required field missing"),
            pair("config.base", "unknown field")
        ]
    );
    assert_eq!(
        invalid(
            EntityKind::Vaults,
            json!({"prefix": "files", "name": "file", "config": {"base_path": "x"}})
        ),
        vec![pair("config.base_path", "must be an absolute path")]
    );
}

#[test]
fn keys_hold_one_jwk_or_pem_that_matches_their_kid() {
    let out = valid(EntityKind::Keys, json!({"kid": "k1", "jwk": jwk("k1")}));
    assert_eq!(out["pem"], Value::Null);
    valid(
        EntityKind::Keys,
        json!({"kid": "k1", "pem": {"public_key": PUBLIC_PEM, "private_key": PRIVATE_PEM}}),
    );
    assert_eq!(
        invalid(EntityKind::Keys, json!({"kid": "k1", "jwk": jwk("k2")})),
        vec![pair("jwk", "kid in jwk.kid must be equal to keys.kid")]
    );
    assert_eq!(
        invalid(EntityKind::Keys, json!({"kid": "k1", "jwk": "{not json"})),
        vec![pair("jwk", "could not json decode jwk string")]
    );
    assert_eq!(
        invalid(EntityKind::Keys, json!({"kid": "k1"})),
        vec![pair("", "at least one of these fields must be non-empty: 'jwk', 'pem'")]
    );
    assert_eq!(
        invalid(
            EntityKind::Keys,
            json!({"kid": "k1", "jwk": jwk("k1"), "pem": {"public_key": PUBLIC_PEM}})
        ),
        vec![pair("", "only one of these fields must be non-empty: 'jwk', 'pem'")]
    );
    assert_eq!(
        invalid(
            EntityKind::Keys,
            json!({"kid": "k1", "pem": {"public_key": "-----BEGIN PUBLIC KEY-----\nAA==\n-----END PUBLIC KEY-----"}})
        ),
        vec![pair("pem.public_key", "could not load public key")]
    );
    assert_eq!(
        invalid(EntityKind::Keys, json!({"kid": "k1", "pem": {}})),
        vec![pair("pem", "need to supply a PEM formatted public and/or private key.")]
    );
    assert_eq!(
        invalid(EntityKind::Keys, json!({"jwk": jwk("k1")})),
        vec![
            pair("kid", "required field missing"),
            pair("jwk", "kid in jwk.kid must be equal to keys.kid")
        ]
    );
}

#[test]
fn references_stand_for_values_only_in_referenceable_fields() {
    let out = valid(
        EntityKind::Certificates,
        json!({"cert": "{vault://env/tls-cert}", "key": "{vault://files/tls/key}"}),
    );
    assert_eq!(out["cert"], "{vault://env/tls-cert}");
    valid(EntityKind::Keys, json!({"kid": "k1", "jwk": "{vault://env/jwk-k1}"}));
    valid(
        EntityKind::Keys,
        json!({"kid": "k1", "pem": {"private_key": "{vault://env/pk}"}}),
    );
    assert_eq!(
        invalid(EntityKind::Certificates, json!({"cert": "{vault://env}", "key": KEY})),
        vec![pair("cert", "reference url has empty path [{vault://env}]")]
    );
    // Not referenceable: a reference is checked as the text it is.
    assert_eq!(
        invalid(EntityKind::CaCertificates, json!({"cert": "{vault://env/ca}"})),
        vec![pair("cert", "invalid certificate: expected a PEM-encoded certificate")]
    );
}

#[test]
fn references_are_found_and_replaced_by_field_path() {
    let key = validate_entity(
        EntityKind::Keys,
        &json!({"kid": "k1", "pem": {"private_key": "{vault://env/pk}", "public_key": PUBLIC_PEM}}),
        NOW,
    )
    .unwrap();
    assert_eq!(
        references_in(&key),
        vec![("pem.private_key".to_string(), "{vault://env/pk}".to_string())]
    );
    let resolved = resolve_references(&key, |path, reference| Ok(format!("{path}={reference}")))
        .unwrap()
        .unwrap();
    let Entity::Key(resolved) = resolved else {
        panic!("not a key")
    };
    let pem = resolved.pem.unwrap();
    assert_eq!(pem.private_key.as_deref(), Some("pem.private_key={vault://env/pk}"));
    assert_eq!(pem.public_key.as_deref(), Some(PUBLIC_PEM));
    let failed = resolve_references(&key, |_, _| Err("nope".into())).unwrap_err();
    assert_eq!(
        (failed.path.as_str(), failed.message.as_str()),
        ("pem.private_key", "nope")
    );
    let plain = validate_entity(EntityKind::Keys, &json!({"kid": "k1", "jwk": jwk("k1")}), NOW).unwrap();
    assert!(resolve_references(&plain, |_, _| Err("never called".into()))
        .unwrap()
        .is_none());
}

#[test]
fn referenceable_fields_are_kongs_and_described() {
    assert_eq!(
        &*referenceable_fields(EntityKind::Certificates, None),
        ["cert", "key", "cert_alt", "key_alt"]
    );
    assert_eq!(
        &*referenceable_fields(EntityKind::Keys, None),
        ["jwk", "pem.private_key", "pem.public_key"]
    );
    assert!(referenceable_fields(EntityKind::Plugins, Some("key-auth")).is_empty());
    assert!(referenceable_fields(EntityKind::CaCertificates, None).is_empty());
    let schema = entity_schema_json(EntityKind::Certificates);
    let key = schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|f| f.get("key"))
        .unwrap();
    assert_eq!(key["referenceable"], true, "{key}");
}
