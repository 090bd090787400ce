//! Schemas of consumer credentials (key-auth, basic-auth, ACL groups, JWT
//! secrets, HMAC-auth), as Kong's bundled plugins declare them in their
//! `daos.lua`, and Kong's one write transformation among them: basic-auth
//! passwords are stored as a salted SHA-1, never as given.

use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::field::Field;
use super::formats;
use super::{is_missing, tags_field, EntityDef};
use crate::delta::Entity;
use crate::entities::EntityKind;
use crate::error::FieldError;

/// `id`, `created_at` and the required `consumer`: credentials have no
/// `updated_at` in Kong.
fn credential_fields() -> Vec<(&'static str, Field)> {
    vec![
        ("id", Field::string().uuid().auto()),
        ("created_at", Field::integer().auto()),
        ("consumer", Field::foreign("consumers").required()),
    ]
}

/// Kong's `auto = true` string: 32 random hex characters.
fn fill_random(out: &mut Map<String, Value>, field: &str) {
    if is_missing(out.get(field)) {
        out.insert(field.into(), json!(Uuid::new_v4().simple().to_string()));
    }
}

pub(crate) fn keyauth_credential() -> EntityDef {
    let mut fields = credential_fields();
    fields.extend([
        ("key", Field::string().unique().auto()),
        ("ttl", Field::integer().between(0, 100_000_000)),
        ("tags", tags_field()),
    ]);
    EntityDef {
        fields,
        endpoint_key: Some("key"),
        shorthand: |_, _| {},
        finish: |out, _, _| fill_random(out, "key"),
        entity_checks: json!([]),
    }
}

pub(crate) fn basicauth_credential() -> EntityDef {
    let mut fields = credential_fields();
    fields.extend([
        ("username", Field::string().required().unique()),
        ("password", Field::string().required()),
        ("tags", tags_field()),
    ]);
    EntityDef::plain(fields, Some("username"))
}

pub(crate) fn acl() -> EntityDef {
    let mut fields = credential_fields();
    fields.extend([("group", Field::string().required()), ("tags", tags_field())]);
    // Kong names an ACL by (consumer, group), its cache key, not by one field.
    EntityDef::plain(fields, None)
}

/// The algorithms Kong's jwt plugin accepts (kong/plugins/jwt/daos.lua).
pub const JWT_ALGORITHMS: &[&str] = &[
    "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "EdDSA",
];

/// The algorithms for which Kong requires `rsa_public_key` and checks that it
/// is a key. Kong leaves the ES* algorithms out of this rule.
pub const JWT_ALGORITHMS_NEEDING_PUBLIC_KEY: &[&str] = &["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "EdDSA"];

pub(crate) fn jwt_secret() -> EntityDef {
    let mut fields = credential_fields();
    fields.extend([
        ("key", Field::string().unique().auto()),
        ("secret", Field::string().auto()),
        ("rsa_public_key", Field::string()),
        (
            "algorithm",
            Field::string().one_of(JWT_ALGORITHMS).default(json!("HS256")),
        ),
        ("tags", tags_field()),
    ]);
    let patterns: Vec<String> = JWT_ALGORITHMS_NEEDING_PUBLIC_KEY
        .iter()
        .map(|a| format!("^{a}$"))
        .collect();
    EntityDef {
        fields,
        endpoint_key: Some("key"),
        shorthand: |_, _| {},
        finish: jwt_secret_checks,
        entity_checks: json!([{ "conditional": {
            "if_field": "algorithm",
            "if_match": { "match_any": { "patterns": patterns } },
            "then_field": "rsa_public_key",
            "then_match": { "required": true },
        }}]),
    }
}

/// Kong's conditional check: an RSA, PS or EdDSA algorithm needs a public
/// key that OpenSSL can read; then the generated `key` and `secret`.
fn jwt_secret_checks(out: &mut Map<String, Value>, _: &Map<String, Value>, errors: &mut Vec<FieldError>) {
    let algorithm = out.get("algorithm").and_then(Value::as_str).unwrap_or("");
    if JWT_ALGORITHMS_NEEDING_PUBLIC_KEY.contains(&algorithm) {
        match out.get("rsa_public_key").and_then(Value::as_str) {
            None => errors.push(FieldError::new("rsa_public_key", super::engine::REQUIRED)),
            Some(pem) => {
                if let Err(message) = formats::pem_key(pem) {
                    errors.push(FieldError::new("rsa_public_key", message));
                }
            }
        }
    }
    fill_random(out, "key");
    fill_random(out, "secret");
}

pub(crate) fn hmacauth_credential() -> EntityDef {
    let mut fields = credential_fields();
    fields.extend([
        ("username", Field::string().required().unique()),
        ("secret", Field::string().auto()),
        ("tags", tags_field()),
    ]);
    EntityDef {
        fields,
        endpoint_key: Some("username"),
        shorthand: |_, _| {},
        finish: |out, _, _| fill_random(out, "secret"),
        entity_checks: json!([]),
    }
}

/// What Kong stores for a basic-auth password (kong/plugins/basic-auth/crypto.lua):
/// the lowercase hex SHA-1 of the password followed by the consumer's id.
pub fn basicauth_password_hash(password: &str, consumer: Uuid) -> String {
    use ring::digest::{digest, SHA1_FOR_LEGACY_USE_ONLY};
    let salted = format!("{password}{consumer}");
    digest(&SHA1_FOR_LEGACY_USE_ONLY, salted.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether [`transform_on_write`] reads what was given for entities of `kind`.
pub fn transforms_on_write(kind: EntityKind) -> bool {
    kind == EntityKind::BasicauthCredentials
}

/// Kong's schema `transformations` with `on_write`: a value stored other than
/// as given. As in Kong, one runs only when the write gave its input field:
/// `given` is the body of the write (for a `PATCH`, the patch alone), so a
/// stored hash is not hashed again by a write that leaves the password out.
/// Declarative files run them unless `_transform: false` says the values are
/// already stored forms (what an export writes).
pub fn transform_on_write(entity: &mut Entity, given: &Map<String, Value>) {
    if let Entity::BasicauthCredential(credential) = entity {
        if given.get("password").is_some_and(|p| !p.is_null()) {
            credential.password = basicauth_password_hash(&credential.password, credential.consumer.id);
        }
    }
}
