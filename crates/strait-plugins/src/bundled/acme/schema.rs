//! `acme`'s config schema: Kong 3.9's fields, defaults and checks (global
//! only: `core::schema::plugins::GLOBAL_ONLY`), and the redis record's
//! deprecated names (`auth`, `ssl_server_name`, `namespace`,
//! `scan_count`).

use serde_json::{json, Map, Value};
use strait_core::schema::field::Field;
use strait_core::schema::{formats, PluginSchema};

use crate::config_fields::{redis_record, url};

/// Keys the plugin writes itself: a redis `namespace` may not start with one.
const RESERVED: &[&str] = &[
    "kong_acme:renew_config:",
    "kong_acme:renew_last_run",
    "kong_acme:cert_key:",
];

fn namespace(value: &str) -> Result<(), String> {
    match RESERVED.iter().find(|word| !value.is_empty() && value.starts_with(*word)) {
        Some(word) => Err(format!("namespace can't be prefixed with reserved word: {word}")),
        None => Ok(()),
    }
}

/// Kong's loose `%w*%p*@+%w*%.?%w*`: some `@`.
fn email(value: &str) -> Result<(), String> {
    match value.contains('@') {
        true => Ok(()),
        false => Err(format!("invalid value: {value}")),
    }
}

fn redis_storage() -> Field {
    let Field { ty, .. } = redis_record();
    let mut fields = match ty {
        strait_core::schema::field::FieldType::Record(fields) => fields,
        _ => Vec::new(),
    };
    fields.push((
        "extra_options",
        Field::record(vec![
            (
                "namespace",
                Field::string().required().default(json!("")).len_min(0).check(namespace),
            ),
            ("scan_count", Field::number().default(json!(10))),
        ])
        .default_record(),
    ));
    Field::record(fields).default_record()
}

pub(super) fn schema() -> PluginSchema {
    let kv_server = |vault: bool| {
        let mut fields = vec![
            ("https", Field::boolean().default(json!(false))),
            ("host", Field::string().check(formats::host)),
            ("port", Field::integer().between(0, 65535)),
            ("kv_path", Field::string()),
            ("timeout", Field::number()),
            ("token", Field::string().referenceable()),
        ];
        if vault {
            fields.extend([
                ("tls_verify", Field::boolean().default(json!(true))),
                ("tls_server_name", Field::string()),
                ("auth_method", Field::string().default(json!("token")).one_of(&["token", "kubernetes"])),
                ("auth_path", Field::string()),
                ("auth_role", Field::string()),
                ("jwt_path", Field::string()),
            ]);
        }
        Field::record(fields).default_record()
    };
    PluginSchema {
        no_consumer: true,
        fill,
        ..PluginSchema::new(vec![
            ("account_email", Field::string().required().referenceable().check(email)),
            (
                "account_key",
                Field::record(vec![("key_id", Field::string().required()), ("key_set", Field::string())]),
            ),
            (
                "api_uri",
                Field::string()
                    .default(json!("https://acme-v02.api.letsencrypt.org/directory"))
                    .check(url),
            ),
            ("tos_accepted", Field::boolean().default(json!(false))),
            ("eab_kid", Field::string().referenceable()),
            ("eab_hmac_key", Field::string().referenceable()),
            ("cert_type", Field::string().default(json!("rsa")).one_of(&["rsa", "ecc"])),
            (
                "rsa_key_size",
                Field::number().default(json!(4096)).one_of_integers(&[2048, 3072, 4096]),
            ),
            ("renew_threshold_days", Field::number().default(json!(14))),
            ("domains", Field::array(Field::string().check(formats::wildcard_host))),
            ("allow_any_domain", Field::boolean().default(json!(false))),
            ("fail_backoff_minutes", Field::number().default(json!(5))),
            (
                "storage",
                Field::string()
                    .default(json!("shm"))
                    .one_of(&["kong", "shm", "redis", "consul", "vault"]),
            ),
            (
                "storage_config",
                Field::record(vec![
                    (
                        "shm",
                        Field::record(vec![("shm_name", Field::string().default(json!("kong")))]).default_record(),
                    ),
                    ("kong", Field::record(vec![]).default_record()),
                    ("redis", redis_storage()),
                    ("consul", kv_server(false)),
                    ("vault", kv_server(true)),
                ])
                .default_record(),
            ),
            ("preferred_chain", Field::string()),
            ("enable_ipv4_common_name", Field::boolean().default(json!(true))),
        ])
        .check(check)
    }
}

/// The redis record's deprecated names, moved to their fields.
fn fill(config: &mut Map<String, Value>) {
    let Some(redis) = config
        .get_mut("storage_config")
        .and_then(Value::as_object_mut)
        .and_then(|s| s.get_mut("redis"))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for (old, new) in [("auth", "password"), ("ssl_server_name", "server_name")] {
        if let Some(value) = redis.remove(old).filter(|v| !v.is_null()) {
            redis.entry(new.to_string()).or_insert(value);
        }
    }
    for old in ["namespace", "scan_count"] {
        if let Some(value) = redis.remove(old).filter(|v| !v.is_null()) {
            let extra = redis.entry("extra_options").or_insert_with(|| json!({}));
            if let Some(extra) = extra.as_object_mut() {
                extra.entry(old.to_string()).or_insert(value);
            }
        }
    }
}

fn check(config: &Map<String, Value>) -> Result<(), String> {
    let text = |field: &str| config.get(field).and_then(Value::as_str).unwrap_or_default();
    let letsencrypt = [
        "https://acme-v02.api.letsencrypt.org",
        "https://acme-staging-v02.api.letsencrypt.org",
    ];
    if letsencrypt.contains(&text("api_uri")) && config.get("tos_accepted") != Some(&json!(true)) {
        return Err("terms of service must be accepted, see https://letsencrypt.org/repository/".into());
    }
    if text("storage") == "redis" {
        let redis = config.get("storage_config").and_then(|s| s.get("redis"));
        for field in ["host", "port"] {
            if redis.and_then(|r| r.get(field)).is_none_or(Value::is_null) {
                return Err(format!("failed conditional validation given value of field 'config.storage': storage_config.redis.{field}: required field missing"));
            }
        }
    }
    if matches!(text("storage"), "consul" | "vault") {
        return Err(format!(
            "storage '{}' is not implemented by this version of Strait (use kong, shm or redis)",
            text("storage")
        ));
    }
    let wildcards = |d: &&str| d.matches('*').count();
    if let Some(domains) = config.get("domains").and_then(Value::as_array) {
        for domain in domains.iter().filter_map(Value::as_str) {
            if wildcards(&domain) > 1 {
                return Err(format!("invalid wildcard domain: {domain}"));
            }
        }
    }
    Ok(())
}
