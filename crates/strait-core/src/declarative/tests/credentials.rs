//! Consumer credentials in declarative files: nested and flat, Kong's
//! `_transform` for basic-auth passwords, and the ACL group rule.

use serde_json::{json, Value};

use super::*;
use crate::schema::basicauth_password_hash;

fn errors_of(result: Result<Config, ConfigError>) -> Vec<(String, String)> {
    match result {
        Ok(config) => panic!("unexpectedly valid: {config:?}"),
        Err(error) => error.errors.into_iter().map(|e| (e.path, e.message)).collect(),
    }
}

fn pair(path: &str, message: &str) -> (String, String) {
    (path.to_string(), message.to_string())
}

fn with_credentials(transform: Option<bool>) -> Value {
    let mut document = json!({
        "_format_version": "3.0",
        "consumers": [{
            "username": "alice",
            "basicauth_credentials": [{ "username": "alice-basic", "password": "hunter2" }],
            "acls": [{ "group": "admins" }, { "group": "staff", "tags": ["t"] }],
            "jwt_secrets": [{ "key": "alice-iss", "secret": "jwt-secret" }],
            "hmacauth_credentials": [{ "username": "alice-hmac", "secret": "hmac-secret" }],
        }],
    });
    if let Some(transform) = transform {
        document["_transform"] = json!(transform);
    }
    document
}

#[test]
fn nested_credentials_are_linked_to_their_consumer() {
    let config = parse_json(with_credentials(None)).unwrap();
    let alice = config.consumers[0].id;
    assert_eq!(config.basicauth_credentials[0].consumer.id, alice);
    assert_eq!(config.acls.len(), 2);
    assert!(config.acls.iter().all(|acl| acl.consumer.id == alice));
    assert_eq!(config.acls[1].tags, Some(vec!["t".to_string()]));
    let jwt = &config.jwt_secrets[0];
    assert_eq!((jwt.consumer.id, jwt.algorithm.as_str()), (alice, "HS256"));
    assert_eq!(config.hmacauth_credentials[0].secret, "hmac-secret");
    assert_eq!(
        config.basicauth_credentials[0].id,
        entity_id_for_key(EntityKind::BasicauthCredentials, "alice-basic")
    );
    // The same file gives the same ids, ACLs (which have no name) included.
    assert_eq!(parse_json(with_credentials(None)).unwrap(), config);
}

#[test]
fn flat_credentials_resolve_their_consumer_by_name() {
    let config = parse_json(json!({
        "_format_version": "3.0",
        "consumers": [{"username": "bob"}],
        "basicauth_credentials": [{"consumer": "bob", "username": "b", "password": "p"}],
        "acls": [{"consumer": {"username": "bob"}, "group": "g"}],
        "jwt_secrets": [{"consumer": "bob", "algorithm": "HS384"}],
        "hmacauth_credentials": [{"consumer": "bob", "username": "h"}],
    }))
    .unwrap();
    let bob = config.consumers[0].id;
    assert_eq!(config.basicauth_credentials[0].consumer.id, bob);
    assert_eq!(config.acls[0].consumer.id, bob);
    assert_eq!(config.jwt_secrets[0].consumer.id, bob);
    assert_eq!(config.hmacauth_credentials[0].consumer.id, bob);
    assert_eq!(config.jwt_secrets[0].secret.len(), 32);
}

#[test]
fn passwords_are_hashed_unless_the_file_says_transform_false() {
    for transform in [None, Some(true)] {
        let config = parse_json(with_credentials(transform)).unwrap();
        let expected = basicauth_password_hash("hunter2", config.consumers[0].id);
        assert_eq!(config.basicauth_credentials[0].password, expected);
    }
    let stored = parse_json(with_credentials(Some(false))).unwrap();
    assert_eq!(stored.basicauth_credentials[0].password, "hunter2");
    assert_eq!(
        errors_of(parse_json(json!({"_format_version": "3.0", "_transform": "no"}))),
        vec![pair("_transform", "expected a boolean")]
    );
}

#[test]
fn an_export_loads_back_without_hashing_again() {
    let config = parse_json(with_credentials(None)).unwrap();
    let document = config_to_declarative(&config);
    assert_eq!(document["_transform"], false);
    assert_eq!(document["acls"].as_array().map(Vec::len), Some(2));
    assert_eq!(parse_json(document).unwrap(), config);
}

#[test]
fn credential_errors_carry_their_nested_paths() {
    let errors = errors_of(parse_json(json!({
        "_format_version": "3.0",
        "consumers": [{
            "username": "alice",
            "basicauth_credentials": [{"username": "a"}],
            "acls": [{"group": "g"}, {"group": "g"}],
            "jwt_secrets": [{"algorithm": "RS256"}, {"algorithm": "XX1"}],
            "hmacauth_credentials": [{"secret": 5}],
        }],
        "acls": [{"consumer": "alice", "group": "other"}, {"consumer": "nobody", "group": "g"}],
    })));
    let acl_twice = "uniqueness violation: 'acls' entity with group set to 'g' already declared for this consumer";
    assert_eq!(
        errors,
        vec![
            pair(
                "consumers[0].basicauth_credentials[0].password",
                "required field missing"
            ),
            pair("consumers[0].acls[1]", acl_twice),
            pair("consumers[0].jwt_secrets[0].rsa_public_key", "required field missing"),
            pair(
                "consumers[0].jwt_secrets[1].algorithm",
                &format!("expected one of: {}", crate::schema::JWT_ALGORITHMS.join(", "))
            ),
            pair(
                "consumers[0].hmacauth_credentials[0].username",
                "required field missing"
            ),
            pair("consumers[0].hmacauth_credentials[0].secret", "expected a string"),
            pair(
                "acls[1].consumer",
                "invalid reference 'consumer: nobody' (no such entry in 'consumers')"
            ),
        ]
    );
}
