//! `jwt`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::{json, Map, Value};
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;

use crate::config_fields::bool_default;

fn strings(default: Value) -> Field {
    Field::set(Field::string()).default(default)
}

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        ("uri_param_names", strings(json!(["jwt"]))),
        ("cookie_names", strings(json!([]))),
        ("key_claim_name", Field::string().default(json!("iss"))),
        ("secret_is_base64", bool_default(false)),
        ("claims_to_verify", Field::set(Field::string().one_of(&["exp", "nbf"]))),
        ("anonymous", Field::string()),
        ("run_on_preflight", bool_default(true)),
        (
            "maximum_expiration",
            Field::number().default(json!(0)).between(0, 31_536_000),
        ),
        ("header_names", strings(json!(["authorization"]))),
        ("realm", Field::string()),
    ])
    .no_consumer()
    .check(jwt_check)
}

/// Kong's entity check: a `maximum_expiration` above 0 needs `exp` in
/// `claims_to_verify`. As in Kong, an absent `claims_to_verify` passes (the
/// conditional check validates a null value as acceptable).
fn jwt_check(config: &Map<String, Value>) -> Result<(), String> {
    let maximum = config.get("maximum_expiration").and_then(Value::as_f64).unwrap_or(0.0);
    let Some(Value::Array(claims)) = config.get("claims_to_verify") else {
        return Ok(());
    };
    if maximum > 0.0 && !claims.iter().any(|c| c == "exp") {
        return Err("expected to contain: exp".into());
    }
    Ok(())
}
