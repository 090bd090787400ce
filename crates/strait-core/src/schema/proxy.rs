//! Schemas of the entities that shape proxying: services (with the `url`
//! shorthand) and routes (with Kong's per-protocol rules).

use serde_json::{json, Map, Value};

use super::field::Field;
use super::formats;
use super::{auto_fields, is_nonempty, tags_field, EntityDef};
use crate::error::FieldError;

/// Every protocol a service or route may name.
pub(crate) const PROTOCOLS: &[&str] = &[
    "grpc",
    "grpcs",
    "http",
    "https",
    "tcp",
    "tls",
    "tls_passthrough",
    "udp",
    "ws",
    "wss",
];

fn timeout() -> Field {
    Field::integer().between(1, 2_147_483_646).default(json!(60000))
}

pub(crate) fn service() -> EntityDef {
    let mut fields = auto_fields(false);
    fields.extend([
        ("name", Field::string().unique().check(formats::utf8_name)),
        ("retries", Field::integer().default(json!(5)).between(0, 32767)),
        (
            "protocol",
            Field::string().required().default(json!("http")).one_of(PROTOCOLS),
        ),
        ("host", Field::string().required().check(formats::host)),
        ("port", Field::integer().required().default(json!(80)).between(0, 65535)),
        ("path", Field::string().check(formats::service_path)),
        ("connect_timeout", timeout()),
        ("write_timeout", timeout()),
        ("read_timeout", timeout()),
        ("tags", tags_field()),
        ("client_certificate", Field::foreign("certificates")),
        ("tls_verify", Field::boolean()),
        ("tls_verify_depth", Field::integer().between(0, 64)),
        ("ca_certificates", Field::array(Field::string().uuid())),
        ("enabled", Field::boolean().required().default(json!(true))),
        (
            "tls_sans",
            Field::record(vec![
                ("dnsnames", Field::array(Field::string().check(formats::wildcard_host))),
                ("uris", Field::array(Field::string().check(formats::san_uri))),
            ]),
        ),
    ]);
    EntityDef {
        fields,
        endpoint_key: Some("name"),
        shorthand: service_url_shorthand,
        finish: service_checks,
        entity_checks: json!([{ "conditional": { "if_field": "protocol",
            "if_match": { "not_one_of": ["https", "tls"] },
            "then_field": "client_certificate", "then_match": { "eq": null } } }]),
    }
}

/// `url` sets protocol, host, port and path at once (Kong's shorthand).
fn service_url_shorthand(input: &mut Map<String, Value>, errors: &mut Vec<FieldError>) {
    let Some(url) = input.remove("url") else {
        return;
    };
    let Some(url) = url.as_str() else {
        if !url.is_null() {
            errors.push(FieldError::new("url", "expected a string"));
        }
        return;
    };
    let parts = split_url(url);
    let port = parts.port.as_deref().map(|p| match p.parse::<i64>() {
        Ok(n) => json!(n),
        Err(_) => json!(p),
    });
    let implied = match port.as_ref().and_then(Value::as_i64) {
        Some(80) => Some("http"),
        Some(443) => Some("https"),
        _ => None,
    };
    let protocol = parts.scheme.as_deref().or(implied).unwrap_or("http").to_string();
    let port = port.unwrap_or_else(|| json!(if protocol == "https" { 443 } else { 80 }));
    input.insert("protocol".into(), json!(protocol));
    input.insert("host".into(), parts.host.map_or(Value::Null, Value::String));
    input.insert("port".into(), port);
    input.insert("path".into(), parts.path.map_or(Value::Null, Value::String));
}

struct UrlParts {
    scheme: Option<String>,
    host: Option<String>,
    port: Option<String>,
    path: Option<String>,
}

/// A small RFC 3986 split, enough for `scheme://[user@]host[:port][/path][?query]`.
fn split_url(url: &str) -> UrlParts {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme.to_string()), rest),
        None => {
            let path = url.split(['?', '#']).next().filter(|p| !p.is_empty());
            let path = path.map(str::to_string);
            return UrlParts {
                scheme: None,
                host: None,
                port: None,
                path,
            };
        }
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((ip, after)) => (ip.to_string(), after.strip_prefix(':').map(str::to_string)),
            None => (authority.to_string(), None),
        },
        None => match authority.split_once(':') {
            Some((host, port)) => (host.to_string(), Some(port.to_string())),
            None => (authority.to_string(), None),
        },
    };
    let path = tail.split(['?', '#']).next().filter(|p| !p.is_empty());
    UrlParts {
        scheme,
        host: Some(host).filter(|h| !h.is_empty()),
        port,
        path: path.map(str::to_string),
    }
}

/// Kong's service conditionals: no path for stream/gRPC protocols, TLS
/// options only for `https`/`tls`.
fn service_checks(out: &mut Map<String, Value>, _: &Map<String, Value>, errors: &mut Vec<FieldError>) {
    let protocol = out.get("protocol").and_then(Value::as_str).unwrap_or("http");
    let mut must_be_null = Vec::new();
    if ["tcp", "tls", "udp", "grpc", "grpcs"].contains(&protocol) {
        must_be_null.push("path");
    }
    if !["https", "tls"].contains(&protocol) {
        must_be_null.extend([
            "client_certificate",
            "tls_verify",
            "tls_verify_depth",
            "ca_certificates",
            "tls_sans",
        ]);
    }
    let mut failed = false;
    for field in must_be_null {
        if out.get(field).is_some_and(|v| !v.is_null()) {
            errors.push(FieldError::new(field, "value must be null"));
            failed = true;
        }
    }
    if failed {
        errors.push(FieldError::new(
            "",
            "failed conditional validation given value of field 'protocol'",
        ));
    }
}

pub(crate) fn route() -> EntityDef {
    let mut fields = auto_fields(false);
    let cidr_port = Field::record(vec![
        ("ip", Field::string().check(formats::ip_or_cidr)),
        ("port", Field::integer().between(0, 65535)),
    ]);
    fields.extend([
        ("name", Field::string().unique().check(formats::utf8_name)),
        (
            "protocols",
            Field::set(Field::string().one_of(PROTOCOLS))
                .required()
                .len_min(1)
                .default(json!(["http", "https"])),
        ),
        ("methods", Field::set(Field::string().check(formats::http_method))),
        ("hosts", Field::array(Field::string().check(formats::route_host))),
        ("paths", Field::array(Field::string().check(formats::router_path))),
        (
            "headers",
            Field::map(
                Field::string().check(formats::route_header_name),
                Field::array(Field::string()),
            ),
        ),
        (
            "https_redirect_status_code",
            Field::integer()
                .required()
                .default(json!(426))
                .one_of_integers(&[426, 301, 302, 307, 308]),
        ),
        ("regex_priority", Field::integer().default(json!(0))),
        ("strip_path", Field::boolean().required().default(json!(true))),
        (
            "path_handling",
            Field::string().default(json!("v0")).one_of(&["v0", "v1"]),
        ),
        ("preserve_host", Field::boolean().required().default(json!(false))),
        ("request_buffering", Field::boolean().required().default(json!(true))),
        ("response_buffering", Field::boolean().required().default(json!(true))),
        ("snis", Field::set(Field::string().check(formats::sni))),
        ("sources", Field::set(cidr_port.clone())),
        ("destinations", Field::set(cidr_port)),
        ("tags", tags_field()),
        ("service", Field::foreign("services")),
        ("expression", Field::string().check(formats::route_expression)),
        ("priority", Field::integer()),
    ]);
    EntityDef {
        fields,
        endpoint_key: Some("name"),
        shorthand: |_, _| {},
        finish: super::route_rules::route_checks,
        entity_checks: super::route_rules::entity_checks_json(),
    }
}

/// Lower-cases header names (Kong matches them case-insensitively).
pub(crate) fn lowercase_headers(out: &mut Map<String, Value>) {
    let Some(Value::Object(headers)) = out.get("headers") else {
        return;
    };
    let mut lowered = Map::new();
    for (name, values) in headers {
        let slot = lowered.entry(name.to_ascii_lowercase()).or_insert(json!([]));
        if let (Some(all), Some(more)) = (slot.as_array_mut(), values.as_array()) {
            all.extend(more.iter().cloned());
        }
    }
    out.insert("headers".into(), Value::Object(lowered));
}

/// True when the field holds something (Kong's `is_nonempty`).
pub(crate) fn has(out: &Map<String, Value>, field: &str) -> bool {
    out.get(field).is_some_and(is_nonempty)
}
