//! Schemas of consumers, plugins, and TLS material (certificates, SNIs, CA
//! certificates). Consumers' credentials are in `credentials`.

use serde_json::{json, Map, Value};

use super::field::Field;
use super::formats;
use super::proxy::{has, PROTOCOLS};
use super::{auto_fields, tags_field, EntityDef};
use crate::error::FieldError;

/// Kong's bundled plugin names (kong/constants.lua), and the Kong Enterprise
/// plugins Strait runs (`mtls-auth`).
pub const BUNDLED_PLUGINS: &[&str] = &[
    "jwt",
    "acl",
    "correlation-id",
    "cors",
    "oauth2",
    "tcp-log",
    "udp-log",
    "file-log",
    "http-log",
    "key-auth",
    "hmac-auth",
    "basic-auth",
    "ip-restriction",
    "request-transformer",
    "response-transformer",
    "request-size-limiting",
    "rate-limiting",
    "response-ratelimiting",
    "syslog",
    "loggly",
    "datadog",
    "ldap-auth",
    "statsd",
    "bot-detection",
    "aws-lambda",
    "request-termination",
    "prometheus",
    "proxy-cache",
    "session",
    "acme",
    "grpc-gateway",
    "grpc-web",
    "pre-function",
    "post-function",
    "azure-functions",
    "zipkin",
    "opentelemetry",
    "ai-proxy",
    "ai-prompt-decorator",
    "ai-prompt-template",
    "ai-prompt-guard",
    "ai-request-transformer",
    "ai-response-transformer",
    "standard-webhooks",
    "redirect",
    "mtls-auth",
];

pub(crate) fn consumer() -> EntityDef {
    let mut fields = auto_fields(false);
    fields.extend([
        ("username", Field::string().unique()),
        ("custom_id", Field::string().unique()),
        ("tags", tags_field()),
    ]);
    EntityDef {
        fields,
        endpoint_key: Some("username"),
        shorthand: |_, _| {},
        finish: |out, _, errors| {
            if !has(out, "custom_id") && !has(out, "username") {
                errors.push(FieldError::new(
                    "",
                    "at least one of these fields must be non-empty: 'custom_id', 'username'",
                ));
            }
        },
        entity_checks: json!([{ "at_least_one_of": ["custom_id", "username"] }]),
    }
}

pub(crate) fn consumer_group() -> EntityDef {
    let mut fields = auto_fields(false);
    fields.extend([("name", Field::string().required().unique()), ("tags", tags_field())]);
    EntityDef::plain(fields, Some("name"))
}

/// A membership: Kong keys it by (group, consumer); Strait gives it the id
/// [`super::membership_id`] derives from the pair when none is given.
pub(crate) fn consumer_group_consumer() -> EntityDef {
    EntityDef {
        fields: vec![
            ("id", Field::string().uuid().auto()),
            ("created_at", Field::integer().auto()),
            ("consumer_group", Field::foreign("consumer_groups").required()),
            ("consumer", Field::foreign("consumers").required()),
        ],
        endpoint_key: None,
        shorthand: |_, _| {},
        finish: |out, _, _| {
            let id_of = |field: &str| {
                out.get(field)
                    .and_then(|fk| fk.get("id"))
                    .and_then(Value::as_str)
                    .and_then(|id| uuid::Uuid::parse_str(id).ok())
            };
            if let (None | Some(Value::Null), Some(group), Some(consumer)) =
                (out.get("id"), id_of("consumer_group"), id_of("consumer"))
            {
                out.insert("id".into(), json!(super::membership_id(group, consumer)));
            }
        },
        entity_checks: json!([]),
    }
}

/// Kong's bundled names, and any plugin whose schema was registered at
/// start-up (a custom Lua plugin the `plugins` setting names).
fn known_plugin(name: &str) -> Result<(), String> {
    match BUNDLED_PLUGINS.contains(&name) || super::plugins::has_schema(name) {
        true => Ok(()),
        false => Err(format!(
            "plugin '{name}' not enabled; add it to the 'plugins' configuration property"
        )),
    }
}

pub(crate) fn plugin() -> EntityDef {
    let mut fields = auto_fields(false);
    fields.extend([
        ("name", Field::string().required().check(known_plugin)),
        ("instance_name", Field::string().unique().check(formats::utf8_name)),
        ("route", Field::foreign("routes")),
        ("service", Field::foreign("services")),
        ("consumer", Field::foreign("consumers")),
        ("consumer_group", Field::foreign("consumer_groups")),
        ("config", Field::object().default(json!({}))),
        ("ordering", ordering_field()),
        (
            "protocols",
            Field::set(Field::string().one_of(PROTOCOLS))
                .required()
                .default(json!(["grpc", "grpcs", "http", "https"])),
        ),
        ("enabled", Field::boolean().required().default(json!(true))),
        ("tags", tags_field()),
    ]);
    EntityDef {
        fields,
        endpoint_key: Some("instance_name"),
        shorthand: |_, _| {},
        finish: plugin_config_checks,
        entity_checks: json!([]),
    }
}

/// Kong Enterprise's `ordering`: for `before` and `after`, a map from a
/// phase (`access`, the one Kong orders dynamically) to plugin names.
fn ordering_field() -> Field {
    let names = || {
        Field::map(
            Field::string().one_of(&["access"]),
            Field::array(Field::string().check(known_plugin)),
        )
    };
    Field::record(vec![("before", names()), ("after", names())])
}

/// An `ordering` that names the plugin itself, or one plugin both before
/// and after it: a cycle on any route it applies to.
fn check_ordering(out: &Map<String, Value>, errors: &mut Vec<FieldError>) {
    let Some(name) = out.get("name").and_then(Value::as_str) else {
        return;
    };
    let names = |side: &str| -> Vec<&str> {
        out.get("ordering")
            .and_then(|o| o.get(side))
            .and_then(|s| s.get("access"))
            .and_then(Value::as_array)
            .map(|list| list.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    };
    let (before, after) = (names("before"), names("after"));
    for (side, list) in [("before", &before), ("after", &after)] {
        if list.contains(&name) {
            errors.push(FieldError::new(
                format!("ordering.{side}.access"),
                format!("a plugin cannot be ordered {side} itself ('{name}')"),
            ));
        }
    }
    if let Some(both) = before.iter().find(|other| after.contains(other)) {
        errors.push(FieldError::new(
            "ordering",
            format!("plugin ordering cycle: {name} -> {both} -> {name} ('{both}' is both before and after)"),
        ));
    }
}

/// Validates `config` against the plugin's own schema (defaults filled in)
/// when Strait knows it; other bundled plugins keep `config` as given.
fn plugin_config_checks(out: &mut Map<String, Value>, given: &Map<String, Value>, errors: &mut Vec<FieldError>) {
    let Some(name) = out.get("name").and_then(Value::as_str).map(str::to_string) else {
        return;
    };
    let config = given.get("config").filter(|c| !c.is_null());
    if config.is_some_and(|c| !c.is_object()) {
        return;
    }
    if has(out, "consumer") && has(out, "consumer_group") {
        errors.push(FieldError::new(
            "",
            "only one of these fields must be non-empty: 'consumer', 'consumer_group'",
        ));
    }
    check_ordering(out, errors);
    super::plugins::check_entity(&name, out, given, errors);
    if let Some(config) = super::plugins::validate_plugin_config(&name, config, errors) {
        out.insert("config".into(), config);
    }
}

pub(crate) fn certificate() -> EntityDef {
    let mut fields = auto_fields(false);
    fields.extend([
        (
            "cert",
            Field::string().required().referenceable().check(formats::certificate),
        ),
        ("key", Field::string().required().referenceable().check(formats::key)),
        ("cert_alt", Field::string().referenceable().check(formats::certificate)),
        ("key_alt", Field::string().referenceable().check(formats::key)),
        ("tags", tags_field()),
        // Transient: the Admin API creates one SNI per name; never stored here.
        ("snis", Field::array(Field::string().check(formats::wildcard_host))),
    ]);
    EntityDef {
        fields,
        endpoint_key: None,
        shorthand: |_, _| {},
        finish: certificate_checks,
        entity_checks: json!([{ "mutually_required": ["cert_alt", "key_alt"] }]),
    }
}

fn certificate_checks(out: &mut Map<String, Value>, _: &Map<String, Value>, errors: &mut Vec<FieldError>) {
    out.remove("snis");
    if has(out, "cert_alt") != has(out, "key_alt") {
        errors.push(FieldError::new(
            "",
            "all or none of these fields must be set: 'cert_alt', 'key_alt'",
        ));
    }
}

pub(crate) fn sni() -> EntityDef {
    let mut fields = auto_fields(false);
    fields.extend([
        (
            "name",
            Field::string().required().unique().check(formats::wildcard_host),
        ),
        ("certificate", Field::foreign("certificates").required()),
        ("tags", tags_field()),
    ]);
    EntityDef::plain(fields, Some("name"))
}

pub(crate) fn ca_certificate() -> EntityDef {
    let mut fields = auto_fields(false);
    fields.extend([
        ("cert", Field::string().required().check(formats::certificate)),
        ("cert_digest", Field::string().unique()),
        ("tags", tags_field()),
    ]);
    EntityDef {
        fields,
        endpoint_key: None,
        shorthand: |_, _| {},
        finish: |out, _, errors| {
            let cert = out.get("cert").and_then(Value::as_str).unwrap_or("");
            if cert.matches("-----BEGIN CERTIFICATE-----").count() > 1 {
                errors.push(FieldError::new("", "please submit only one certificate at a time"));
            }
        },
        entity_checks: json!([]),
    }
}
