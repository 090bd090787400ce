//! A filter's `config_schema` (JSON Schema draft 4, what Kong sets for
//! filter metadata): the keywords filter schemas use, each error with the
//! path of the value it is about. A schema with a keyword this validator
//! does not know is refused when the filter loads, by name, so no part of
//! a schema is silently ignored.

use serde_json::{Map, Value};

/// Keywords that only describe, never constrain.
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "id",
    "$id",
    "title",
    "description",
    "default",
    "examples",
    "format",
];

/// Keywords checked here.
const CHECKED: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
];

/// Refuses a schema using keywords this validator does not check.
pub(crate) fn check_supported(schema: &Value) -> Result<(), String> {
    let Value::Object(object) = schema else {
        return match schema {
            Value::Bool(_) => Ok(()),
            _ => Err("a schema must be an object".into()),
        };
    };
    for (key, value) in object {
        if ANNOTATIONS.contains(&key.as_str()) {
            continue;
        }
        if !CHECKED.contains(&key.as_str()) {
            return Err(format!("keyword {key:?} is not supported"));
        }
        match key.as_str() {
            "properties" => {
                for (name, inner) in value.as_object().ok_or("properties must be an object")? {
                    check_supported(inner).map_err(|e| format!("properties.{name}: {e}"))?;
                }
            }
            "items" | "additionalProperties" => check_supported(value).map_err(|e| format!("{key}: {e}"))?,
            _ => {}
        }
    }
    Ok(())
}

/// Checks `value` against `schema`; the first error as `path: message`.
pub(crate) fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    let mut errors = Vec::new();
    check(schema, value, "", &mut errors);
    match errors.into_iter().next() {
        None => Ok(()),
        Some((path, message)) if path.is_empty() => Err(message),
        Some((path, message)) => Err(format!("{path}: {message}")),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_type(value: &Value, wanted: &str) -> bool {
    let actual = type_name(value);
    actual == wanted || (wanted == "number" && actual == "integer")
}

fn join(path: &str, key: &str) -> String {
    match path.is_empty() {
        true => key.to_string(),
        false => format!("{path}.{key}"),
    }
}

fn check(schema: &Value, value: &Value, path: &str, errors: &mut Vec<(String, String)>) {
    let schema = match schema {
        Value::Object(schema) => schema,
        Value::Bool(false) => return errors.push((path.to_string(), "no value is allowed here".into())),
        _ => return,
    };
    if let Some(wanted) = schema.get("type") {
        let names: Vec<&str> = match wanted {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !names.is_empty() && !names.iter().any(|n| is_type(value, n)) {
            let message = format!("expected {}, got {}", names.join(" or "), type_name(value));
            return errors.push((path.to_string(), message));
        }
    }
    if let Some(Value::Array(options)) = schema.get("enum") {
        if !options.contains(value) {
            errors.push((
                path.to_string(),
                format!("expected one of {}", Value::Array(options.clone())),
            ));
        }
    }
    match value {
        Value::Object(object) => check_object(schema, object, path, errors),
        Value::Array(items) => check_array(schema, items, path, errors),
        Value::String(text) => check_length(schema, text.chars().count(), "characters", path, errors),
        Value::Number(number) => check_number(schema, number.as_f64().unwrap_or(0.0), path, errors),
        _ => {}
    }
}

fn check_object(
    schema: &Map<String, Value>,
    object: &Map<String, Value>,
    path: &str,
    errors: &mut Vec<(String, String)>,
) {
    if let Some(Value::Array(required)) = schema.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if !object.contains_key(name) {
                errors.push((join(path, name), "required field missing".into()));
            }
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    for (key, inner) in object {
        match properties.and_then(|p| p.get(key)) {
            Some(property) => check(property, inner, &join(path, key), errors),
            None => match schema.get("additionalProperties") {
                Some(Value::Bool(false)) => errors.push((join(path, key), "unknown field".into())),
                Some(additional) => check(additional, inner, &join(path, key), errors),
                None => {}
            },
        }
    }
}

fn check_array(schema: &Map<String, Value>, items: &[Value], path: &str, errors: &mut Vec<(String, String)>) {
    check_length(schema, items.len(), "items", path, errors);
    if let Some(item_schema) = schema.get("items") {
        for (index, item) in items.iter().enumerate() {
            check(item_schema, item, &join(path, &(index + 1).to_string()), errors);
        }
    }
}

fn check_length(
    schema: &Map<String, Value>,
    length: usize,
    unit: &str,
    path: &str,
    errors: &mut Vec<(String, String)>,
) {
    let (min, max) = match unit {
        "items" => ("minItems", "maxItems"),
        _ => ("minLength", "maxLength"),
    };
    if let Some(low) = schema.get(min).and_then(Value::as_u64) {
        if (length as u64) < low {
            errors.push((path.to_string(), format!("at least {low} {unit} expected")));
        }
    }
    if let Some(high) = schema.get(max).and_then(Value::as_u64) {
        if length as u64 > high {
            errors.push((path.to_string(), format!("at most {high} {unit} expected")));
        }
    }
}

fn check_number(schema: &Map<String, Value>, number: f64, path: &str, errors: &mut Vec<(String, String)>) {
    let flag = |key: &str| schema.get(key).and_then(Value::as_bool).unwrap_or(false);
    if let Some(low) = schema.get("minimum").and_then(Value::as_f64) {
        if number < low || (flag("exclusiveMinimum") && number == low) {
            errors.push((path.to_string(), format!("value should be greater than {low}")));
        }
    }
    if let Some(high) = schema.get("maximum").and_then(Value::as_f64) {
        if number > high || (flag("exclusiveMaximum") && number == high) {
            errors.push((path.to_string(), format!("value should be less than {high}")));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_config_is_checked_with_paths_in_errors() {
        let schema = json!({
            "type": "object",
            "properties": {
                "header": {"type": "string", "minLength": 1},
                "limit": {"type": "integer", "minimum": 1, "maximum": 10},
                "mode": {"enum": ["a", "b"]},
                "list": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["header"],
            "additionalProperties": false
        });
        check_supported(&schema).unwrap();
        assert_eq!(validate(&schema, &json!({"header": "x", "limit": 3})), Ok(()));
        assert_eq!(
            validate(&schema, &json!({})),
            Err("header: required field missing".into())
        );
        assert_eq!(
            validate(&schema, &json!("x")),
            Err("expected object, got string".into())
        );
        assert_eq!(
            validate(&schema, &json!({"header": "x", "limit": 11})),
            Err("limit: value should be less than 10".into())
        );
        assert_eq!(
            validate(&schema, &json!({"header": "x", "list": ["a", 2]})),
            Err("list.2: expected string, got integer".into())
        );
        assert_eq!(
            validate(&schema, &json!({"header": "x", "other": 1})),
            Err("other: unknown field".into())
        );
        assert!(validate(&schema, &json!({"header": "x", "mode": "c"})).is_err());
    }

    #[test]
    fn unknown_keywords_are_refused_by_name() {
        let error = check_supported(&json!({"properties": {"a": {"pattern": "^x"}}})).unwrap_err();
        assert!(error.contains("pattern"), "{error}");
    }
}
