//! Bytes to a JSON document: UTF-8 check, format sniffing, YAML or JSON
//! parsing with the parser's line/column, and the top-level keys.

use serde_json::{Map, Value};

use super::DeclarativeFormat;
use crate::error::FieldError;

/// `_format_version` values Kong accepts.
pub const FORMAT_VERSIONS: &[&str] = &["1.1", "2.1", "3.0"];

/// Top-level keys that carry no entities (`_info`, `_workspace` and
/// `_konnect` are decK's, read by `info`).
const META_KEYS: &[&str] = &[
    "_format_version",
    "_transform",
    "_comment",
    "_ignore",
    "_workspace",
    "_info",
    "_konnect",
];

fn parse_failure(detail: impl std::fmt::Display) -> FieldError {
    FieldError::new("", format!("failed parsing declarative configuration: {detail}"))
}

/// Decodes the document; the error is the single parse failure.
pub(super) fn decode(bytes: &[u8], format: DeclarativeFormat) -> Result<Map<String, Value>, FieldError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| parse_failure(format_args!("invalid UTF-8 at byte {}", e.valid_up_to())))?;
    let json = match format {
        DeclarativeFormat::Json => true,
        DeclarativeFormat::Yaml => false,
        DeclarativeFormat::Auto => text.trim_start().starts_with('{'),
    };
    let document: Value = if json {
        serde_json::from_str(text).map_err(parse_failure)?
    } else {
        serde_yaml::from_str(text).map_err(parse_failure)?
    };
    match document {
        Value::Object(map) => Ok(map),
        _ => Err(parse_failure("expected an object")),
    }
}

/// Checks `_format_version` and flags unknown top-level keys.
pub(super) fn check_top_level(document: &Map<String, Value>, errors: &mut Vec<FieldError>) {
    match document.get("_format_version") {
        None | Some(Value::Null) => {
            errors.push(FieldError::new("_format_version", "required field missing"));
        }
        Some(Value::String(version)) if FORMAT_VERSIONS.contains(&version.as_str()) => {}
        Some(Value::String(_)) => errors.push(FieldError::new(
            "_format_version",
            format!("expected one of: {}", FORMAT_VERSIONS.join(", ")),
        )),
        Some(_) => errors.push(FieldError::new("_format_version", "expected a string")),
    }
    match document.get("_transform") {
        None | Some(Value::Null) | Some(Value::Bool(_)) => {}
        Some(_) => errors.push(FieldError::new("_transform", "expected a boolean")),
    }
    for key in document.keys() {
        let known = META_KEYS.contains(&key.as_str()) || crate::EntityKind::from_table(key).is_some();
        if !known {
            errors.push(FieldError::new(key.clone(), "unknown field"));
        }
    }
}

/// Kong's `_transform` (default `true`): whether entity values are as a user
/// writes them, so write transformations (basic-auth password hashing) run.
/// An export says `false`: its values are already the stored forms.
pub(super) fn transform_wanted(document: &Map<String, Value>) -> bool {
    document.get("_transform").and_then(Value::as_bool).unwrap_or(true)
}
