//! Schema tests: one file per group of entity kinds.

mod balancer;
mod credentials;
mod identity;
mod proxy;
mod secrets;
mod wasm;

use serde_json::Value;

use super::*;

pub(super) const NOW: i64 = 1_700_000_000;

pub(super) const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
pub(super) const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n";

/// The validated entity's fields as JSON.
pub(super) fn valid(kind: EntityKind, input: Value) -> Value {
    match validate_entity(kind, &input, NOW) {
        Ok(entity) => serde_json::to_value(entity).unwrap()["entity"].clone(),
        Err(errors) => panic!("unexpected errors: {errors:?}"),
    }
}

/// Every error as `(path, message)`.
pub(super) fn invalid(kind: EntityKind, input: Value) -> Vec<(String, String)> {
    match validate_entity(kind, &input, NOW) {
        Ok(entity) => panic!("unexpectedly valid: {entity:?}"),
        Err(errors) => errors.into_iter().map(|e| (e.path, e.message)).collect(),
    }
}

/// The description of field `name` in the `/schemas` answer of `kind`.
pub(super) fn schema_field(kind: EntityKind, name: &str) -> Value {
    entity_schema_json(kind)["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|f| f.get(name).cloned())
        .unwrap()
}

pub(super) fn pair(path: &str, message: &str) -> (String, String) {
    (path.to_string(), message.to_string())
}

#[test]
fn non_object_input_is_rejected() {
    assert_eq!(
        invalid(EntityKind::Services, serde_json::json!([1])),
        vec![pair("", "expected a record")]
    );
}

#[test]
fn deterministic_ids_follow_the_endpoint_key() {
    let a = valid(EntityKind::Services, serde_json::json!({"name": "a", "host": "h"}));
    let b = valid(EntityKind::Services, serde_json::json!({"name": "a", "host": "other"}));
    assert_eq!(a["id"], b["id"]);
    let id = entity_id_for_key(EntityKind::Services, "a");
    assert_eq!(a["id"], serde_json::json!(id));
    assert_ne!(id, entity_id_for_key(EntityKind::Routes, "a"));
    assert_eq!(id.get_version_num(), 3);
}

#[test]
fn unnamed_entities_get_random_ids() {
    let a = valid(EntityKind::Services, serde_json::json!({"host": "h"}));
    let b = valid(EntityKind::Services, serde_json::json!({"host": "h"}));
    assert_ne!(a["id"], b["id"]);
}

#[test]
fn given_id_and_timestamps_are_kept() {
    let id = "6b5e5e5e-1111-4222-8333-444455556666";
    let out = valid(
        EntityKind::Consumers,
        serde_json::json!({"id": id, "username": "u", "created_at": 5, "updated_at": 6}),
    );
    assert_eq!(out["id"], id);
    assert_eq!(out["created_at"], 5);
    assert_eq!(out["updated_at"], 6);
}

#[test]
fn bad_id_and_timestamp_types_are_reported() {
    let errors = invalid(
        EntityKind::Consumers,
        serde_json::json!({"id": "nope", "username": "u", "created_at": "x"}),
    );
    assert_eq!(
        errors,
        vec![
            pair("id", "expected a valid UUID"),
            pair("created_at", "expected an integer")
        ]
    );
}

#[test]
fn tags_follow_kong_rules() {
    let out = valid(
        EntityKind::Consumers,
        serde_json::json!({"username": "u", "tags": ["a b", "ü", "a b"]}),
    );
    assert_eq!(out["tags"], serde_json::json!(["a b", "ü"]));
    let message =
        |t: &str| format!("invalid tag '{t}': expected printable ascii (except `,` and `/`) or valid utf-8 sequences");
    assert_eq!(
        invalid(
            EntityKind::Consumers,
            serde_json::json!({"username": "u", "tags": ["a,b", "a/b", "", 3, null]})
        ),
        vec![
            pair("tags[0]", &message("a,b")),
            pair("tags[1]", &message("a/b")),
            pair("tags[2]", "length must be at least 1"),
            pair("tags[3]", "expected a string"),
            pair("tags[4]", "required field missing"),
        ]
    );
    assert_eq!(
        invalid(EntityKind::Consumers, serde_json::json!({"username": "u", "tags": "a"})),
        vec![pair("tags", "expected a set")]
    );
}

#[test]
fn every_schema_lists_id_timestamps_and_defaults() {
    for kind in EntityKind::ALL {
        let schema = entity_schema_json(kind);
        let fields = schema["fields"].as_array().unwrap();
        assert_eq!(
            fields[0]["id"],
            serde_json::json!({"type": "string", "uuid": true, "auto": true})
        );
        assert!(fields.iter().any(|f| f.get("created_at").is_some()), "{kind:?}");
    }
}

#[test]
fn schema_json_shows_defaults_and_constraints() {
    let field = |name: &str| schema_field(EntityKind::Services, name);
    assert_eq!(
        field("retries"),
        serde_json::json!({"type": "integer", "default": 5, "between": [0, 32767]})
    );
    assert_eq!(field("protocol")["default"], "http");
    assert_eq!(field("port")["default"], 80);
    assert_eq!(field("client_certificate")["reference"], "certificates");
    let healthchecks = schema_field(EntityKind::Upstreams, "healthchecks");
    assert_eq!(healthchecks["default"], default_healthchecks());
}

#[test]
fn schema_json_defaults_match_what_validation_fills() {
    let minimal: [(EntityKind, Value); 3] = [
        (EntityKind::Services, serde_json::json!({"host": "h"})),
        (EntityKind::Routes, serde_json::json!({"paths": ["/"]})),
        (EntityKind::Upstreams, serde_json::json!({"name": "u"})),
    ];
    for (kind, input) in minimal {
        let out = valid(kind, input);
        for field in entity_schema_json(kind)["fields"].as_array().unwrap() {
            let (name, spec) = field.as_object().unwrap().iter().next().unwrap();
            if let Some(default) = spec.get("default") {
                assert_eq!(&out[name], default, "{kind:?}.{name}");
            }
        }
    }
}
