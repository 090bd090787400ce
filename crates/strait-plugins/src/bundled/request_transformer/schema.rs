//! `request-transformer`'s config schema: Kong 3.9's fields, defaults and checks.

use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;
use strait_core::schema::formats;

use crate::config_fields::list;

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

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        ("http_method", Field::string().check(formats::http_method)),
        ("remove", names_record()),
        ("rename", values_record(header_rename_entry, false)),
        ("replace", values_record(header_value_entry, true)),
        ("add", values_record(header_value_entry, false)),
        ("append", values_record(header_value_entry, false)),
    ])
    .any_protocol()
}
