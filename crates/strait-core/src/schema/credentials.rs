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

/// Kong's oauth2 `redirect_uris` element check: a URL with a scheme and a
/// host, without a fragment.
fn redirect_uri(value: &str) -> Result<(), String> {
    let cannot = || format!("cannot parse '{value}'");
    let (scheme, rest) = value.split_once("://").ok_or_else(cannot)?;
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    let host = host.strip_prefix('[').map_or_else(
        || host.split(':').next().unwrap_or(""),
        |v6| v6.split(']').next().unwrap_or(""),
    );
    if !scheme_ok || host.is_empty() || value.chars().any(|c| c.is_whitespace()) {
        return Err(cannot());
    }
    if value.contains('#') {
        return Err(format!("fragment not allowed in '{value}'"));
    }
    Ok(())
}

pub(crate) fn oauth2_credential() -> EntityDef {
    let mut fields = credential_fields();
    fields.extend([
        ("name", Field::string().required()),
        ("client_id", Field::string().unique().auto()),
        ("client_secret", Field::string().auto()),
        ("hash_secret", Field::boolean().required().default(json!(false))),
        ("redirect_uris", Field::array(Field::string().check(redirect_uri))),
        ("tags", tags_field()),
        (
            "client_type",
            Field::string()
                .required()
                .one_of(&["confidential", "public"])
                .default(json!("confidential")),
        ),
    ]);
    EntityDef {
        fields,
        endpoint_key: Some("client_id"),
        shorthand: |_, _| {},
        finish: |out, _, _| {
            fill_random(out, "client_id");
            fill_random(out, "client_secret");
        },
        entity_checks: json!([]),
    }
}

/// Kong's oauth2 secret hashing (kong/plugins/oauth2/secret.lua, PBKDF2 the
/// one algorithm it enables): PBKDF2-HMAC-SHA512, 10,000 iterations, a
/// 32-byte hash and a 16-byte random salt, written as a PHC string
/// `$pbkdf2-sha512$i=10000,l=32$<salt>$<hash>` (unpadded base64).
pub fn oauth2_secret_hash(secret: &str) -> String {
    use base64::engine::general_purpose::STANDARD_NO_PAD;
    use base64::Engine as _;
    use ring::rand::SecureRandom as _;
    let mut salt = [0u8; 16];
    // The system's random source only fails when the OS has none.
    let _ = ring::rand::SystemRandom::new().fill(&mut salt);
    let mut hash = [0u8; 32];
    ring::pbkdf2::derive(
        ring::pbkdf2::PBKDF2_HMAC_SHA512,
        std::num::NonZeroU32::new(10_000).unwrap_or(std::num::NonZeroU32::MIN),
        &salt,
        secret.as_bytes(),
        &mut hash,
    );
    format!(
        "$pbkdf2-sha512$i=10000,l=32${}${}",
        STANDARD_NO_PAD.encode(salt),
        STANDARD_NO_PAD.encode(hash)
    )
}

/// Whether `secret` matches `stored`, a PHC string from
/// [`oauth2_secret_hash`] (any iteration count and length it names).
pub fn oauth2_secret_verify(secret: &str, stored: &str) -> bool {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
    use base64::Engine as _;
    let mut parts = stored.split('$');
    let (Some(""), Some(id), Some(params), Some(salt), Some(hash), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return false;
    };
    let algorithm = match id {
        "pbkdf2-sha512" => ring::pbkdf2::PBKDF2_HMAC_SHA512,
        "pbkdf2-sha256" => ring::pbkdf2::PBKDF2_HMAC_SHA256,
        _ => return false,
    };
    let iterations = params
        .split(',')
        .find_map(|p| p.trim().strip_prefix("i="))
        .and_then(|i| i.trim().parse::<u32>().ok())
        .and_then(std::num::NonZeroU32::new);
    let decode = |text: &str| STANDARD_NO_PAD.decode(text).or_else(|_| STANDARD.decode(text)).ok();
    let (Some(iterations), Some(salt), Some(hash)) = (iterations, decode(salt), decode(hash)) else {
        return false;
    };
    ring::pbkdf2::verify(algorithm, iterations, &salt, secret.as_bytes(), &hash).is_ok()
}

/// True for a secret already in the stored form [`oauth2_secret_hash`] writes.
pub fn is_oauth2_secret_hash(secret: &str) -> bool {
    secret.starts_with("$pbkdf2-")
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
    matches!(kind, EntityKind::BasicauthCredentials | EntityKind::Oauth2Credentials)
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
    // Kong's oauth2 transformation: `hash_secret` in the write hashes the
    // secret (given or generated). A secret already hashed stays as it is.
    if let Entity::Oauth2Credential(credential) = entity {
        let asked = given.get("hash_secret").and_then(Value::as_bool) == Some(true)
            || (credential.hash_secret && given.get("client_secret").is_some_and(|s| !s.is_null()));
        if asked && credential.hash_secret && !is_oauth2_secret_hash(&credential.client_secret) {
            credential.client_secret = oauth2_secret_hash(&credential.client_secret);
        }
    }
}
