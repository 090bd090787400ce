//! The generic validator: checks a JSON value against a [`Field`], fills
//! defaults, and collects every violation with its path (never stops at the
//! first). Messages are Kong's `validation_errors`.

use serde_json::{Map, Value};

use super::field::{Field, FieldType};
use crate::error::{join_path, FieldError};

/// Where a value sits in the record being validated. Turned into text
/// (`config.headers[2]`) only when an error names it: a valid record costs
/// no path strings.
#[derive(Clone, Copy)]
pub(crate) enum At<'a> {
    Text(&'a str),
    Field(&'a At<'a>, &'a str),
    Index(&'a At<'a>, usize),
}

impl At<'_> {
    pub(crate) fn text(&self) -> String {
        match self {
            At::Text(text) => (*text).to_string(),
            At::Field(parent, name) => join_path(&parent.text(), name),
            At::Index(parent, index) => format!("{}[{index}]", parent.text()),
        }
    }
}

pub(crate) const REQUIRED: &str = "required field missing";
pub(crate) const UNKNOWN: &str = "unknown field";

/// Validates `value` (absent or null: default or required check) and returns
/// the normalized value, `Value::Null` when there is none.
pub(crate) fn validate_value(field: &Field, value: Option<&Value>, at: &At<'_>, errors: &mut Vec<FieldError>) -> Value {
    let value = match value {
        Some(Value::Null) | None => {
            if let Some(default) = &field.default {
                return validate_present(field, default, at, errors);
            }
            if field.required && !field.auto {
                errors.push(FieldError::new(at.text(), REQUIRED));
            }
            return Value::Null;
        }
        Some(value) => value,
    };
    validate_present(field, value, at, errors)
}

fn validate_present(field: &Field, value: &Value, at: &At<'_>, errors: &mut Vec<FieldError>) -> Value {
    if field.must_be_null {
        errors.push(FieldError::new(at.text(), "value must be null"));
        return Value::Null;
    }
    let before = errors.len();
    let out = match &field.ty {
        // As in Kong, a reference is not checked against the field's rules:
        // its value is, when it is resolved.
        FieldType::String if field.referenceable && value.as_str().is_some_and(crate::vault::is_reference) => {
            let text = value.as_str().unwrap_or_default();
            crate::vault::parse_reference(text).map(|_| value.clone())
        }
        FieldType::String => check_string(field, value).map(|()| value.clone()),
        FieldType::Integer => check_integer(field, value),
        FieldType::Number => check_number(field, value),
        FieldType::Boolean => match value {
            Value::Bool(_) => Ok(value.clone()),
            _ => Err("expected a boolean".to_string()),
        },
        FieldType::Array(elements) => validate_list(field, elements, value, at, errors, false),
        FieldType::Set(elements) => validate_list(field, elements, value, at, errors, true),
        FieldType::Map(keys, values) => validate_map(keys, values, value, at, errors),
        FieldType::Record(fields) => match value.as_object() {
            Some(map) => Ok(Value::Object(validate_record(fields, map, at, errors))),
            None => Err("expected a record".to_string()),
        },
        FieldType::Foreign(_) => validate_foreign(value, at, errors),
        FieldType::Object => match value {
            Value::Object(_) => Ok(value.clone()),
            _ => Err("expected a record".to_string()),
        },
        FieldType::Json => Ok(value.clone()),
    };
    match out {
        Ok(normalized) if errors.len() == before => normalized,
        Ok(_) => Value::Null,
        Err(message) => {
            errors.push(FieldError::new(at.text(), message));
            Value::Null
        }
    }
}

/// Validates every field of a record, then flags keys the schema lacks.
pub(crate) fn validate_record(
    fields: &[(&'static str, Field)],
    input: &Map<String, Value>,
    at: &At<'_>,
    errors: &mut Vec<FieldError>,
) -> Map<String, Value> {
    // Each given value by its field's position, from one pass over the
    // input (a record gives a few of its fields): no hashed lookup per
    // schema field, and the same comparisons find the unknown keys, which
    // are reported after the fields' own errors.
    let mut slots = [None; SLOTS];
    let mut spilled = Vec::new();
    let given: &mut [Option<&Value>] = if fields.len() <= SLOTS {
        &mut slots[..fields.len()]
    } else {
        spilled.resize(fields.len(), None);
        &mut spilled
    };
    let mut unknown = Vec::new();
    for (key, value) in input {
        match fields.iter().position(|(name, _)| name == key) {
            Some(at) => given[at] = Some(value),
            None => unknown.push(key),
        }
    }
    let mut out = Map::with_capacity(fields.len());
    for ((name, field), value) in fields.iter().zip(given.iter()) {
        let value = validate_value(field, *value, &At::Field(at, name), errors);
        out.insert((*name).to_string(), value);
    }
    for key in unknown {
        errors.push(FieldError::new(At::Field(at, key).text(), UNKNOWN));
    }
    out
}

/// Fields of a record whose given values are gathered on the stack.
const SLOTS: usize = 64;

fn check_string(field: &Field, value: &Value) -> Result<(), String> {
    let text = value.as_str().ok_or("expected a string")?;
    if !field.one_of.is_empty() && !field.one_of.iter().any(|o| o.as_str() == Some(text)) {
        return Err(format!("expected one of: {}", list_options(&field.one_of)));
    }
    if field.uuid && uuid::Uuid::parse_str(text).is_err() {
        return Err("expected a valid UUID".to_string());
    }
    // Kong accepts no empty string unless the field says `len_min = 0`.
    let min = field.len_min.unwrap_or(1);
    if text.chars().count() < min {
        return Err(format!("length must be at least {min}"));
    }
    if let Some(max) = field.len_max.filter(|max| text.chars().count() > *max) {
        return Err(format!("length must be at most {max}"));
    }
    match field.check {
        Some(check) => check(text),
        None => Ok(()),
    }
}

fn check_integer(field: &Field, value: &Value) -> Result<Value, String> {
    let number = match value {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
        _ => None,
    };
    let number = number.ok_or("expected an integer")?;
    if !field.one_of.is_empty() && !field.one_of.iter().any(|o| o.as_i64() == Some(number)) {
        return Err(format!("expected one of: {}", list_options(&field.one_of)));
    }
    check_between(field, number as f64)?;
    Ok(Value::from(number))
}

fn check_number(field: &Field, value: &Value) -> Result<Value, String> {
    let number = value.as_f64().ok_or("expected a number")?;
    check_between(field, number)?;
    Ok(value.clone())
}

fn check_between(field: &Field, number: f64) -> Result<(), String> {
    match field.between {
        Some((low, high)) if number < low as f64 || number > high as f64 => {
            Err(format!("value should be between {low} and {high}"))
        }
        _ => match field.gt {
            Some(bound) if number <= bound as f64 => Err(format!("value must be greater than {bound}")),
            _ => Ok(()),
        },
    }
}

fn list_options(options: &[Value]) -> String {
    let words: Vec<String> = options
        .iter()
        .map(|o| match o {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    words.join(", ")
}

fn validate_list(
    field: &Field,
    elements: &Field,
    value: &Value,
    at: &At<'_>,
    errors: &mut Vec<FieldError>,
    is_set: bool,
) -> Result<Value, String> {
    let items = match value.as_array() {
        Some(items) => items,
        None if is_set => return Err("expected a set".to_string()),
        None => return Err("expected an array".to_string()),
    };
    if let Some(min) = field.len_min {
        if items.len() < min {
            return Err(format!("length must be at least {min}"));
        }
    }
    if let Some(max) = field.len_max.filter(|max| items.len() > *max) {
        return Err(format!("length must be at most {max}"));
    }
    let mut out: Vec<Value> = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let item_at = At::Index(at, index);
        if item.is_null() {
            errors.push(FieldError::new(item_at.text(), REQUIRED));
            continue;
        }
        let normalized = validate_present(elements, item, &item_at, errors);
        // Kong sets drop repeated elements.
        if !(is_set && out.contains(&normalized)) {
            out.push(normalized);
        }
    }
    Ok(Value::Array(out))
}

fn validate_map(
    keys: &Field,
    values: &Field,
    value: &Value,
    at: &At<'_>,
    errors: &mut Vec<FieldError>,
) -> Result<Value, String> {
    let map = value.as_object().ok_or("expected a map")?;
    let mut out = Map::with_capacity(map.len());
    for (key, item) in map {
        let item_at = At::Field(at, key);
        let before = errors.len();
        validate_present(keys, &Value::String(key.clone()), &item_at, errors);
        if errors.len() == before {
            let mut normalized = validate_value(values, Some(item), &item_at, errors);
            // A record inside a map keeps only the fields it was given, as
            // decK computes it (it fills no defaults below a map), so unset
            // fields are not stored as nulls.
            if let Value::Object(record) = &mut normalized {
                record.retain(|_, v| !v.is_null());
            }
            out.insert(key.clone(), normalized);
        }
    }
    Ok(Value::Object(out))
}

/// A foreign key keeps only the referenced primary key. Other fields (a
/// `name` beside the `id`, as decK and go-kong send them) are ignored, as
/// Kong's `validate_primary_key(pk, ignore_others)` does; a reference by
/// name alone was already resolved to an id by the write path.
fn validate_foreign(value: &Value, at: &At<'_>, errors: &mut Vec<FieldError>) -> Result<Value, String> {
    let map = value.as_object().ok_or("expected a record")?;
    let primary_key = [("id", Field::string().uuid().required())];
    let key_only: Map<String, Value> = map
        .iter()
        .filter(|(k, _)| *k == "id")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let out = validate_record(&primary_key, &key_only, at, errors);
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// `count` string fields `f0`, `f1`, …; the last one required, the
    /// first one defaulted.
    fn fields(count: usize) -> Vec<(&'static str, Field)> {
        (0..count)
            .map(|i| {
                let name: &'static str = Box::leak(format!("f{i}").into_boxed_str());
                let field = match i {
                    0 => Field::string().default(json!("zero")),
                    i if i == count - 1 => Field::string().required(),
                    _ => Field::string(),
                };
                (name, field)
            })
            .collect()
    }

    #[test]
    fn given_values_land_in_their_fields_and_unknown_keys_come_after_field_errors() {
        // Up to SLOTS fields the values are gathered on the stack, past it in
        // a vector: both the same.
        for count in [3, SLOTS, SLOTS + 6] {
            let fields = fields(count);
            let input = json!({"zz": 1, "f1": "one", "f0": 7, "yy": 2});
            let mut errors = Vec::new();
            let out = validate_record(&fields, input.as_object().unwrap(), &At::Text("r"), &mut errors);
            assert_eq!(out.len(), count, "{count} fields");
            assert_eq!(out.keys().next().map(String::as_str), Some("f0"));
            assert_eq!(out["f1"], json!("one"));
            assert_eq!(out["f0"], Value::Null, "a bad value is refused, not defaulted");
            let found: Vec<(&str, &str)> = errors.iter().map(|e| (e.path.as_str(), e.message.as_str())).collect();
            let last = format!("r.f{}", count - 1);
            assert_eq!(
                found,
                [
                    ("r.f0", "expected a string"),
                    (last.as_str(), REQUIRED),
                    ("r.zz", UNKNOWN),
                    ("r.yy", UNKNOWN),
                ],
                "{count} fields"
            );
            let mut errors = Vec::new();
            let required = fields[count - 1].0;
            let given = json!({ required: "x" });
            let out = validate_record(&fields, given.as_object().unwrap(), &At::Text("r"), &mut errors);
            assert!(errors.is_empty(), "{errors:?}");
            assert_eq!((&out["f0"], &out[required]), (&json!("zero"), &json!("x")));
        }
    }
}
