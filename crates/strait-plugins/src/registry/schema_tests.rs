//! The bundled plugins' schemas through the registry: defaults filled in,
//! Kong's messages, shorthands, and the `/schemas/plugins/{name}` bodies.

use serde_json::{json, Map, Value};
use strait_core::schema::{mirror_shorthands, plugin_schema_json};
use strait_core::FieldError;

/// Validates `config` of plugin `name` as a write would (defaults filled).
fn validate_config(name: &str, config: Option<&Value>, errors: &mut Vec<FieldError>) -> Option<Value> {
    super::install();
    strait_core::schema::validate_plugin_config(name, config, errors)
}

fn plugin_schema(name: &str) -> Option<Value> {
    super::install();
    plugin_schema_json(name)
}

fn rate_limiting(config: Value) -> (Value, Vec<FieldError>) {
    let mut errors = Vec::new();
    let out = validate_config("rate-limiting", Some(&config), &mut errors).expect("known plugin");
    (out, errors)
}

#[test]
fn redis_shorthands_move_to_the_redis_record() {
    let (out, errors) = rate_limiting(json!({
        "minute": 5, "policy": "redis", "redis_host": "cache.internal", "redis_port": 6380,
        "redis_ssl": true, "redis_database": 2
    }));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(out["redis"]["host"], "cache.internal");
    assert_eq!(out["redis"]["port"], 6380);
    assert_eq!(out["redis"]["ssl"], true);
    assert_eq!(out["redis"]["database"], 2);
    assert_eq!(out["redis"]["timeout"], 2000, "the record's defaults still fill in");
    assert!(out.get("redis_host").is_none(), "shorthands are not stored: {out}");
    // The same value in both places is one value; null shorthands are nothing.
    let (out, errors) = rate_limiting(json!({
        "minute": 5, "redis_host": "a", "redis": {"host": "a"}, "redis_password": null
    }));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(out["redis"]["host"], "a");
}

#[test]
fn redis_shorthands_are_checked_with_their_fields_type_and_must_agree() {
    let (_, errors) = rate_limiting(json!({"minute": 5, "redis_port": "high"}));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path, "config.redis_port");
    assert_eq!(errors[0].message, "expected an integer");
    let (_, errors) = rate_limiting(json!({"minute": 5, "redis_host": "a", "redis": {"host": "b"}}));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path, "config.redis_host");
    assert_eq!(
        errors[0].message,
        "both deprecated and new field are used but their values mismatch: redis_host = a vs redis.host = b"
    );
    let mut errors = Vec::new();
    let given = json!({"limits": {"video": {"minute": 1}}, "redis_timeout": 10});
    let out = validate_config("response-ratelimiting", Some(&given), &mut errors).expect("known");
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(out["redis"]["timeout"], 10);
}

#[test]
fn answers_mirror_the_shorthands_and_the_schema_describes_them() {
    let (out, _) = rate_limiting(json!({"minute": 5}));
    let mut config = out.as_object().cloned().expect("a record");
    super::install();
    mirror_shorthands("rate-limiting", &mut config);
    assert_eq!(config["redis_port"], 6379);
    assert_eq!(config["redis_timeout"], 2000);
    assert_eq!(config["redis_database"], 0);
    assert_eq!(config["redis_ssl"], false);
    assert!(config["redis_host"].is_null() && config.contains_key("redis_host"));
    let mirrored = config.keys().filter(|k| k.starts_with("redis_")).count();
    assert_eq!(mirrored, 9);
    let mut key_auth = Map::new();
    super::install();
    mirror_shorthands("key-auth", &mut key_auth);
    assert!(key_auth.is_empty());

    let schema = plugin_schema("rate-limiting").expect("schema");
    let config = schema["fields"][2]["config"].clone();
    let shorthands = config["shorthand_fields"].as_array().expect("shorthand_fields");
    assert_eq!(shorthands.len(), 9);
    let host = &shorthands[0]["redis_host"];
    assert_eq!(host["type"], "string");
    assert_eq!(
        host["deprecation"]["replaced_with"],
        json!([{"path": ["redis", "host"]}])
    );
    assert_eq!(
        host["deprecation"]["message"],
        "rate-limiting: config.redis_host is deprecated, please use config.redis.host instead"
    );
    assert!(host.get("default").is_none());
}

#[test]
fn request_termination_defaults_are_filled_and_described() {
    let mut errors = Vec::new();
    let config = validate_config("request-termination", None, &mut errors).expect("known plugin");
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(config["status_code"], json!(503));
    assert_eq!(config["echo"], json!(false));
    assert!(config["message"].is_null());
    let schema = plugin_schema("request-termination").expect("schema");
    let text = schema.to_string();
    assert!(text.contains(r#""status_code":{"between":[100,599],"default":503"#) || text.contains("503"));
    assert!(plugin_schema("no-such-plugin").is_none());
    let key_auth = plugin_schema("key-auth").expect("key-auth schema").to_string();
    assert!(key_auth.contains(r#""eq":null"#), "key-auth is no_consumer: {key_auth}");
}

#[test]
fn request_termination_rules() {
    let mut errors = Vec::new();
    let given = json!({"message": "m", "body": "b"});
    validate_config("request-termination", Some(&given), &mut errors);
    assert_eq!(errors[0].message, "message cannot be used with content_type or body");
    let mut errors = Vec::new();
    validate_config(
        "request-termination",
        Some(&json!({"status_code": 700, "x": 1})),
        &mut errors,
    );
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["config.status_code", "config.x"]);
}

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
    let schema = plugin_schema("jwt").expect("schema").to_string();
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
    let schema = plugin_schema("hmac-auth").expect("schema");
    let consumer = schema["fields"][0]["consumer"].as_object().expect("consumer field");
    assert!(consumer.contains_key("eq"), "no_consumer: {consumer:?}");
}
