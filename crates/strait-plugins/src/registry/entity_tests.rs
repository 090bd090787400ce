//! Plugin entities validated as every write path validates them, with the
//! bundled plugins' schemas registered: defaults, Kong's messages, the
//! fields that may hold vault references.

use serde_json::{json, Value};
use strait_core::schema::{plugin_has_references, references_in, BUNDLED_PLUGINS};
use strait_core::{validate_entity, Entity, EntityKind};

const NOW: i64 = 1_700_000_000;

/// The validated entity's fields as JSON.
fn valid(kind: EntityKind, input: Value) -> Value {
    super::install();
    match validate_entity(kind, &input, NOW) {
        Ok(entity) => serde_json::to_value(entity).unwrap()["entity"].clone(),
        Err(errors) => panic!("unexpected errors: {errors:?}"),
    }
}

/// Every error as `(path, message)`.
fn invalid(kind: EntityKind, input: Value) -> Vec<(String, String)> {
    super::install();
    match validate_entity(kind, &input, NOW) {
        Ok(entity) => panic!("unexpectedly valid: {entity:?}"),
        Err(errors) => errors.into_iter().map(|e| (e.path, e.message)).collect(),
    }
}

fn pair(path: &str, message: &str) -> (String, String) {
    (path.to_string(), message.to_string())
}

#[test]
fn plugin_defaults_and_known_names() {
    let out = valid(EntityKind::Plugins, json!({"name": "key-auth"}));
    assert_eq!(out["config"]["key_names"], json!(["apikey"]));
    assert_eq!(out["config"]["hide_credentials"], false);
    assert_eq!(out["protocols"], json!(["grpc", "grpcs", "http", "https"]));
    assert_eq!(out["enabled"], true);
    assert_eq!(
        invalid(EntityKind::Plugins, json!({"name": "nope", "config": []})),
        vec![
            pair(
                "name",
                "plugin 'nope' not enabled; add it to the 'plugins' configuration property"
            ),
            pair("config", "expected a record"),
        ]
    );
    assert_eq!(
        invalid(EntityKind::Plugins, json!({})),
        vec![pair("name", "required field missing")]
    );
    // Every bundled plugin validates with its defaults, or fails only where
    // Kong's schema demands a choice: a required field without a default
    // (where to send logs, a directory, a secret) or one of several fields
    // (acl's allow or deny, a rate limit, an oauth2 grant).
    for name in BUNDLED_PLUGINS {
        super::install();
        if let Err(errors) = validate_entity(EntityKind::Plugins, &json!({ "name": name }), NOW) {
            for error in errors {
                assert!(
                    error.message == "required field missing"
                        || error.message.starts_with("at least one of these fields"),
                    "{name} without config: {error:?}"
                );
            }
        }
    }
    let oauth2 = valid(
        EntityKind::Plugins,
        json!({"name": "oauth2", "config": {"enable_password_grant": true}}),
    );
    assert_eq!(oauth2["config"]["token_expiration"], 7200);
    assert_eq!(oauth2["config"]["pkce"], "lax");
    assert_eq!(
        oauth2["config"]["provision_key"].as_str().map(str::len),
        Some(32),
        "a provision_key is generated"
    );
    assert_eq!(
        invalid(EntityKind::Plugins, json!({"name": "oauth2"})),
        vec![pair(
            "config",
            "at least one of these fields must be true: enable_authorization_code, enable_implicit_grant, enable_client_credentials, enable_password_grant"
        )]
    );
    assert_eq!(
        invalid(EntityKind::Plugins, json!({"name": "response-ratelimiting"})),
        vec![pair("config.limits", "required field missing")]
    );
    assert_eq!(
        invalid(EntityKind::Plugins, json!({"name": "tcp-log"})),
        vec![
            pair("config.host", "required field missing"),
            pair("config.port", "required field missing")
        ]
    );
    assert_eq!(
        invalid(
            EntityKind::Plugins,
            json!({"name": "file-log", "config": {"path": "/tmp/x", "custom_fields_by_lua": {"a": "return 1"}}})
        ),
        vec![pair(
            "config",
            "custom_fields_by_lua: Strait runs no Lua; custom fields are not supported"
        )]
    );
    assert_eq!(
        invalid(
            EntityKind::Plugins,
            json!({"name": "http-log", "config": {"http_endpoint": "http://u:p@x/", "headers": {"Authorization": "a"}}})
        ),
        vec![pair(
            "config",
            "specifying both an 'Authorization' header and user info in 'http_endpoint' is not allowed"
        )]
    );
    assert_eq!(
        invalid(EntityKind::Plugins, json!({"name": "acl"})),
        vec![pair(
            "config",
            "at least one of these fields must be non-empty: 'config.allow', 'config.deny'"
        )]
    );
}

#[test]
fn rate_limiting_schema_is_kongs() {
    let out = valid(
        EntityKind::Plugins,
        json!({"name": "rate-limiting", "config": {"minute": 5}}),
    );
    assert_eq!(out["config"]["limit_by"], "consumer");
    assert_eq!(out["config"]["policy"], "local");
    assert_eq!(out["config"]["fault_tolerant"], true);
    assert_eq!(out["config"]["error_code"], 429);
    assert_eq!(out["config"]["error_message"], "API rate limit exceeded");
    assert_eq!(out["config"]["sync_rate"], -1);
    assert_eq!(out["config"]["redis"]["port"], 6379);
    assert_eq!(out["config"]["redis"]["timeout"], 2000);
    let error = |config: Value| invalid(EntityKind::Plugins, json!({"name": "rate-limiting", "config": config}));
    assert_eq!(
        error(json!({"second": 10, "minute": 5})),
        vec![pair(
            "config",
            "The limit for minute(5.0) cannot be lower than the limit for second(10.0)"
        )]
    );
    assert_eq!(
        error(json!({"minute": 5, "sync_rate": 1})),
        vec![pair("config", "sync_rate can only be used with the redis policy")]
    );
    assert_eq!(
        error(json!({"minute": 5, "limit_by": "header"})),
        vec![pair(
            "config",
            "config.header_name: required field missing (limit_by is header)"
        )]
    );
    assert_eq!(
        error(json!({"minute": 0})),
        vec![pair("config.minute", "value must be greater than 0")]
    );
    // Redis credentials may be vault references (Kong marks them referenceable).
    let referenced = valid(
        EntityKind::Plugins,
        json!({"name": "rate-limiting", "config": {"minute": 5, "redis": {"password": "{vault://env/redis-pw}"}}}),
    );
    assert_eq!(referenced["config"]["redis"]["password"], "{vault://env/redis-pw}");
    assert_eq!(
        &*strait_core::schema::referenceable_fields(EntityKind::Plugins, Some("rate-limiting")),
        ["config.redis.username", "config.redis.password"]
    );
}

#[test]
fn response_ratelimiting_schema_is_kongs() {
    let out = valid(
        EntityKind::Plugins,
        json!({"name": "response-ratelimiting", "config": {"limits": {"video": {"minute": 5}}}}),
    );
    assert_eq!(out["config"]["header_name"], "x-kong-limit");
    assert_eq!(out["config"]["limit_by"], "consumer");
    assert_eq!(out["config"]["block_on_first_violation"], false);
    // A record inside the map keeps only what it was given (as decK computes it).
    assert_eq!(out["config"]["limits"], json!({"video": {"minute": 5}}));
    let error = |config: Value| {
        invalid(
            EntityKind::Plugins,
            json!({"name": "response-ratelimiting", "config": config}),
        )
    };
    assert_eq!(
        error(json!({"limits": {"video": {"second": 10, "minute": 5}}})),
        vec![pair(
            "config",
            "config.limits.video: the limit for minute(5.0) cannot be lower than the limit for second(10.0)"
        )]
    );
    assert_eq!(
        error(json!({"limits": {}})),
        vec![pair("config", "config.limits: length must be at least 1")]
    );
    assert_eq!(
        error(json!({"limits": {"video": {}}})),
        vec![pair(
            "config",
            "config.limits.video: at least one of these fields must be non-empty: 'second', 'minute', 'hour', 'day', 'month', 'year'"
        )]
    );
    assert_eq!(
        error(json!({"limits": {"video": {"minute": 0}}})),
        vec![pair("config.limits.video.minute", "value must be greater than 0")]
    );
    assert_eq!(
        error(json!({"limits": {"video": {"minute": 1}}, "policy": "redis"})),
        vec![pair(
            "config",
            "config.redis.host: required field missing (policy is redis)"
        )]
    );
}

#[test]
fn plugin_references_are_found_in_place() {
    super::install();
    let plugin = |config: Value| match validate_entity(
        EntityKind::Plugins,
        &json!({"name": "rate-limiting", "config": config}),
        NOW,
    )
    .unwrap()
    {
        Entity::Plugin(plugin) => plugin,
        other => panic!("not a plugin: {other:?}"),
    };
    let plain = plugin(json!({"minute": 5, "redis": {"password": "literal"}}));
    assert!(!plugin_has_references(&plain));
    assert!(references_in(&Entity::Plugin(plain)).is_empty());
    let referenced = plugin(json!({"minute": 5, "redis": {"password": "{vault://env/pw}"}}));
    assert!(plugin_has_references(&referenced));
    assert_eq!(
        references_in(&Entity::Plugin(referenced)),
        vec![("config.redis.password".to_string(), "{vault://env/pw}".to_string())]
    );
}
