//! `hmac-auth`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::{json, Map, Value};
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;

use crate::config_fields::bool_default;

const HMAC_ALGORITHMS: &[&str] = &["hmac-sha1", "hmac-sha256", "hmac-sha384", "hmac-sha512"];

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        ("hide_credentials", bool_default(false)),
        ("clock_skew", Field::number().default(json!(300))),
        ("anonymous", Field::string()),
        ("validate_request_body", bool_default(false)),
        ("enforce_headers", Field::array(Field::string()).default(json!([]))),
        (
            "algorithms",
            Field::array(Field::string().one_of(HMAC_ALGORITHMS)).default(json!(HMAC_ALGORITHMS)),
        ),
        ("realm", Field::string()),
    ])
    .no_consumer()
    .check(hmac_auth_check)
}

/// Kong's `gt = 0` on `clock_skew`, which [`Field`] cannot say.
fn hmac_auth_check(config: &Map<String, Value>) -> Result<(), String> {
    match config.get("clock_skew").and_then(Value::as_f64) {
        Some(skew) if skew <= 0.0 => Err("value must be greater than 0".into()),
        _ => Ok(()),
    }
}
