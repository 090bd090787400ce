//! Config schemas of the transformation plugins (Kong 3.10 field names,
//! types and defaults).

use serde_json::json;

use super::PluginDef;
use crate::schema::field::Field;
use crate::schema::formats;

/// `name:value` with a non-empty value (Kong's `check_for_value`).
fn name_and_value(entry: &str) -> Result<(), String> {
    let (name, value) = entry.split_once(':').unwrap_or((entry, ""));
    let value = value.trim_start_matches(':');
    if name.is_empty() || value.is_empty() {
        return Err(format!("key '{name}' has no value"));
    }
    template_value(value)
}

/// The `$(...)` templates Strait evaluates (see docs/plugins.md).
fn template_value(value: &str) -> Result<(), String> {
    let mut rest = value;
    while let Some(start) = rest.find("$(") {
        let after = &rest[start + 2..];
        let Some(end) = after.find(')') else {
            return Err(format!(
                "value '{value}' is not in supported format, error: unclosed '$('"
            ));
        };
        let expression = after[..end].split(" or ").next().unwrap_or("").trim();
        let table = expression.split(['.', '[']).next().unwrap_or("");
        if !["headers", "query_params", "uri_captures", "shared"].contains(&table) || expression == table {
            return Err(format!(
                "value '{value}' is not in supported format, error: only $(headers.x), $(query_params.x), $(uri_captures.x) and $(shared.x) are supported"
            ));
        }
        rest = &after[end + 1..];
    }
    Ok(())
}

/// A header `name` or `name:value` entry.
fn header_entry(entry: &str) -> Result<(), String> {
    let name = entry.split(':').next().unwrap_or("");
    formats::header_name(name).map_err(|_| format!("'{name}' is not a valid header"))
}

fn header_value_entry(entry: &str) -> Result<(), String> {
    if !entry.contains(':') || entry.starts_with(':') {
        return Err(format!("invalid value: {entry}"));
    }
    header_entry(entry)?;
    name_and_value(entry)
}

/// A rename entry `old:new`, both header names.
fn header_rename_entry(entry: &str) -> Result<(), String> {
    header_value_entry(entry)?;
    let new = entry
        .split_once(':')
        .map(|(_, v)| v.trim_start_matches(':'))
        .unwrap_or("");
    formats::header_name(new).map_err(|_| format!("'{new}' is not a valid header"))
}

fn list(element: Field) -> Field {
    Field::array(element).required().default(json!([]))
}

fn names_record() -> Field {
    Field::record(vec![
        ("body", list(Field::string())),
        ("headers", list(Field::string().check(header_entry))),
        ("querystring", list(Field::string())),
    ])
    .required()
    .default_record()
}

fn values_record(headers: fn(&str) -> Result<(), String>, with_uri: bool) -> Field {
    let mut fields = vec![
        ("body", list(Field::string().check(name_and_value))),
        ("headers", list(Field::string().check(headers))),
        ("querystring", list(Field::string().check(name_and_value))),
    ];
    if with_uri {
        fields.push(("uri", Field::string().check(template_value)));
    }
    Field::record(fields).required().default_record()
}

pub(super) fn request_transformer() -> PluginDef {
    PluginDef::new(vec![
        ("http_method", Field::string().check(formats::http_method)),
        ("remove", names_record()),
        ("rename", values_record(header_rename_entry, false)),
        ("replace", values_record(header_value_entry, true)),
        ("add", values_record(header_value_entry, false)),
        ("append", values_record(header_value_entry, false)),
    ])
    .any_protocol()
}

pub(super) fn correlation_id() -> PluginDef {
    PluginDef::new(vec![
        ("header_name", Field::string().default(json!("Kong-Request-ID"))),
        (
            "generator",
            Field::string()
                .required()
                .default(json!("uuid#counter"))
                .one_of(&["uuid", "uuid#counter", "tracker"]),
        ),
        ("echo_downstream", Field::boolean().required().default(json!(false))),
    ])
}

/// `name:value` (Kong's `match = "^[^:]+:.*$"`).
fn colon_pair(entry: &str) -> Result<(), String> {
    match entry.split_once(':') {
        Some((name, _)) if !name.is_empty() => Ok(()),
        _ => Err(format!("invalid value: {entry}")),
    }
}

fn colon_header_rename(entry: &str) -> Result<(), String> {
    colon_pair(entry)?;
    let (old, new) = entry.split_once(':').unwrap_or((entry, ""));
    let new = new.trim_start_matches(':');
    formats::header_name(old).map_err(|_| format!("'{old}' is not a valid header"))?;
    formats::header_name(new).map_err(|_| format!("'{new}' is not a valid header"))
}

fn response_record(with_types: bool, headers: fn(&str) -> Result<(), String>, pairs: bool) -> Field {
    let json_field = if pairs {
        list(Field::string().check(colon_pair))
    } else {
        list(Field::string())
    };
    let headers_field = if pairs {
        list(Field::string().check(headers))
    } else {
        list(Field::string())
    };
    let mut fields = vec![("json", json_field)];
    if with_types {
        fields.push((
            "json_types",
            list(Field::string().one_of(&["boolean", "number", "string"])),
        ));
    }
    fields.push(("headers", headers_field));
    Field::record(fields).required().default_record()
}

pub(super) fn response_transformer() -> PluginDef {
    PluginDef::new(vec![
        ("remove", response_record(false, colon_pair, false)),
        ("rename", response_record(false, colon_header_rename, true)),
        ("replace", response_record(true, colon_pair, true)),
        ("add", response_record(true, colon_pair, true)),
        ("append", response_record(true, colon_pair, true)),
    ])
}

/// Kong's `grpc-gateway`: `proto`, the path of the `.proto` file on the node.
pub(super) fn grpc_gateway() -> PluginDef {
    PluginDef::new(vec![("proto", Field::string())])
}

/// Kong's `grpc-web`.
pub(super) fn grpc_web() -> PluginDef {
    PluginDef::new(vec![
        ("proto", Field::string()),
        ("pass_stripped_path", Field::boolean()),
        ("allow_origin_header", Field::string().default(json!("*"))),
    ])
}
