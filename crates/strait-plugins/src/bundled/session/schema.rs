//! `session`'s config schema: Kong 3.9's fields, defaults and checks, and
//! its deprecated shorthands (`cookie_lifetime`, `cookie_idletime`, ...).

use std::sync::OnceLock;

use serde_json::{json, Map, Value};
use strait_core::schema::field::Field;
use strait_core::schema::PluginSchema;

const HEADERS: &[&str] = &[
    "id",
    "audience",
    "subject",
    "timeout",
    "idling-timeout",
    "rolling-timeout",
    "absolute-timeout",
];

pub(super) fn schema() -> PluginSchema {
    let number = |default: i64| Field::number().default(json!(default));
    let string = |default: &str| Field::string().default(json!(default));
    let flag = |default: bool| Field::boolean().default(json!(default));
    PluginSchema {
        no_consumer: true,
        http_only: false,
        fill,
        ..PluginSchema::new(vec![
            ("secret", Field::string().referenceable()),
            ("storage", string("cookie").one_of(&["cookie", "kong"])),
            ("audience", string("default")),
            ("idling_timeout", number(900)),
            ("rolling_timeout", number(3600)),
            ("absolute_timeout", number(86400)),
            ("stale_ttl", number(10)),
            ("cookie_name", string("session")),
            ("cookie_path", string("/")),
            ("cookie_domain", Field::string()),
            (
                "cookie_same_site",
                string("Strict").one_of(&["Strict", "Lax", "None", "Default"]),
            ),
            ("cookie_http_only", flag(true)),
            ("cookie_secure", flag(true)),
            ("remember", flag(false)),
            ("remember_cookie_name", string("remember")),
            ("remember_rolling_timeout", number(604800)),
            ("remember_absolute_timeout", number(2592000)),
            ("response_headers", Field::set(Field::string().one_of(HEADERS))),
            ("request_headers", Field::set(Field::string().one_of(HEADERS))),
            ("read_body_for_logout", flag(false)),
            (
                "logout_methods",
                Field::set(Field::string().one_of(&["GET", "POST", "DELETE"])).default(json!(["POST", "DELETE"])),
            ),
            ("logout_query_arg", string("session_logout")),
            ("logout_post_arg", string("session_logout")),
        ])
    }
}

/// Kong's default `secret`: 44 random characters drawn once when the schema
/// loads, so every instance written without one on this node shares it
/// (stable across configuration pushes, as in Kong).
fn default_secret() -> &'static str {
    static SECRET: OnceLock<String> = OnceLock::new();
    SECRET.get_or_init(|| {
        use base64::Engine as _;
        let bytes = super::cookie::random::<32>();
        // Kong's alphabet: base64 with `/`, `+` and `=` swapped for a
        // digit, a capital and a small letter.
        let digit = char::from(b'0' + bytes[0] % 10);
        let upper = char::from(b'A' + bytes[1] % 26);
        let lower = char::from(b'a' + bytes[2] % 26);
        base64::engine::general_purpose::STANDARD
            .encode(bytes)
            .replace('/', &digit.to_string())
            .replace('+', &upper.to_string())
            .replace('=', &lower.to_string())
    })
}

/// The deprecated forms Kong 3.x still takes, each moved to its field
/// (a value of the wrong type is then refused at that field), and the
/// default secret.
fn fill(config: &mut Map<String, Value>) {
    let mut take = |old: &str, new: &str, map: fn(Value) -> Value| {
        if let Some(value) = config.remove(old) {
            let value = map(value);
            if !value.is_null() || old == "cookie_idletime" {
                config.entry(new.to_string()).or_insert(value);
            }
        }
    };
    take("cookie_lifetime", "rolling_timeout", |v| v);
    take("cookie_idletime", "idling_timeout", |v| if v.is_null() { json!(0) } else { v });
    take("cookie_discard", "stale_ttl", |v| v);
    take("cookie_samesite", "cookie_same_site", |v| {
        if v == "off" {
            json!("Lax")
        } else {
            v
        }
    });
    take("cookie_httponly", "cookie_http_only", |v| v);
    take("cookie_persistent", "remember", |v| v);
    // Kong: "cookie_renew option does not exists anymore".
    config.remove("cookie_renew");
    if config.get("secret").is_none_or(Value::is_null) {
        config.insert("secret".into(), json!(default_secret()));
    }
}
