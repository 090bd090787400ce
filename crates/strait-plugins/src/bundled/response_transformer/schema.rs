//! `response-transformer`'s config schema: Kong 3.9's fields, defaults and checks.

use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;
use strait_core::schema::formats;

use crate::config_fields::list;

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

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        ("remove", response_record(false, colon_pair, false)),
        ("rename", response_record(false, colon_header_rename, true)),
        ("replace", response_record(true, colon_pair, true)),
        ("add", response_record(true, colon_pair, true)),
        ("append", response_record(true, colon_pair, true)),
    ])
}
