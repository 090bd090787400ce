//! Config schemas of the plugins that check signed requests, `jwt` and
//! `hmac-auth` (Kong 3.10 field names, types, defaults and checks).

use serde_json::{json, Map, Value};

use super::PluginDef;
use crate::schema::field::Field;

fn bool_default(value: bool) -> Field {
    Field::boolean().required().default(json!(value))
}

fn strings(default: Value) -> Field {
    Field::set(Field::string()).default(default)
}

pub(super) fn jwt() -> PluginDef {
    PluginDef::new(vec![
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

const HMAC_ALGORITHMS: &[&str] = &["hmac-sha1", "hmac-sha256", "hmac-sha384", "hmac-sha512"];

pub(super) fn hmac_auth() -> PluginDef {
    PluginDef::new(vec![
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{plugin_schema_json, validate_config};

    fn errors(name: &str, config: serde_json::Value) -> Vec<(String, String)> {
        let mut errors = Vec::new();
        validate_config(name, Some(&config), &mut errors);
        errors.into_iter().map(|e| (e.path, e.message)).collect()
    }

    #[test]
    fn jwt_defaults() {
        let mut errors = Vec::new();
        let config = validate_config("jwt", None, &mut errors).expect("known plugin");
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(config["uri_param_names"], json!(["jwt"]));
        assert_eq!(config["cookie_names"], json!([]));
        assert_eq!(config["header_names"], json!(["authorization"]));
        assert_eq!(config["key_claim_name"], json!("iss"));
        assert_eq!(config["secret_is_base64"], json!(false));
        assert_eq!(config["run_on_preflight"], json!(true));
        assert_eq!(config["maximum_expiration"], json!(0));
        assert!(config["claims_to_verify"].is_null());
        let schema = plugin_schema_json("jwt").expect("schema").to_string();
        assert!(schema.contains(r#""between":[0,31536000]"#), "{schema}");
    }

    #[test]
    fn jwt_rules_and_kong_messages() {
        let ok = json!({ "maximum_expiration": 60, "claims_to_verify": ["exp", "nbf"] });
        assert!(errors("jwt", ok).is_empty());
        assert_eq!(
            errors("jwt", json!({ "maximum_expiration": -1, "claims_to_verify": ["nbf"] })),
            [(
                "config.maximum_expiration".to_string(),
                "value should be between 0 and 31536000".to_string()
            )]
        );
        assert_eq!(
            errors("jwt", json!({ "maximum_expiration": 60, "claims_to_verify": ["nbf"] })),
            [("config".to_string(), "expected to contain: exp".to_string())]
        );
        assert!(errors("jwt", json!({ "maximum_expiration": 60 })).is_empty());
        let bad_claim = errors("jwt", json!({ "claims_to_verify": ["iat"] }));
        assert_eq!(bad_claim[0].1, "expected one of: exp, nbf");
    }

    #[test]
    fn hmac_auth_defaults_and_rules() {
        let mut errors_found = Vec::new();
        let config = validate_config("hmac-auth", None, &mut errors_found).expect("known plugin");
        assert!(errors_found.is_empty(), "{errors_found:?}");
        assert_eq!(config["clock_skew"], json!(300));
        assert_eq!(config["hide_credentials"], json!(false));
        assert_eq!(config["validate_request_body"], json!(false));
        assert_eq!(config["enforce_headers"], json!([]));
        assert_eq!(
            config["algorithms"],
            json!(["hmac-sha1", "hmac-sha256", "hmac-sha384", "hmac-sha512"])
        );
        assert!(errors("hmac-auth", json!({ "clock_skew": 10 })).is_empty());
        assert_eq!(
            errors("hmac-auth", json!({ "clock_skew": -10 })),
            [("config".to_string(), "value must be greater than 0".to_string())]
        );
        let wrong = errors("hmac-auth", json!({ "algorithms": ["sha1024"] }));
        assert_eq!(
            wrong[0].1,
            "expected one of: hmac-sha1, hmac-sha256, hmac-sha384, hmac-sha512"
        );
        let schema = plugin_schema_json("hmac-auth").expect("schema");
        let consumer = schema["fields"][0]["consumer"].as_object().expect("consumer field");
        assert!(consumer.contains_key("eq"), "no_consumer: {consumer:?}");
    }
}
