//! Kong's control-plane error model: field errors with paths, the
//! declarative-config error, and its rendering as Kong's 400 body.
//!
//! Paths read like `services[1].routes[0].paths[0]` (0-based indexes). An
//! entity-level error carries the entity's own path (`services[1]`), or `""`
//! when it concerns the whole input. Nothing here knows about HTTP.

use std::fmt;

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::entities::EntityKind;

/// Kong's error code for an invalid declarative configuration.
pub const DECLARATIVE_CONFIG_ERROR_CODE: i64 = 14;
/// Kong's error name for an invalid declarative configuration.
pub const DECLARATIVE_CONFIG_ERROR_NAME: &str = "invalid declarative configuration";

/// One violation, at one place in the input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The same error seen from `prefix` (an entity's path in a document).
    pub fn under(self, prefix: &str) -> Self {
        FieldError {
            path: join_path(prefix, &self.path),
            message: self.message,
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// `prefix.rest`, or whichever of the two is non-empty.
pub fn join_path(prefix: &str, rest: &str) -> String {
    match (prefix.is_empty(), rest.is_empty()) {
        (true, _) => rest.to_string(),
        (false, true) => prefix.to_string(),
        (false, false) if rest.starts_with('[') => format!("{prefix}{rest}"),
        (false, false) => format!("{prefix}.{rest}"),
    }
}

/// Kong's form of a field path in messages and flattened errors: indexes
/// are 1-based members (`filters[0].config` is written `filters.1.config`).
pub fn kong_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find(']') else { break };
        let inner = &rest[open + 1..open + close];
        match inner.parse::<usize>() {
            Ok(index) => out.push_str(&format!(".{}", index + 1)),
            Err(_) => out.push_str(&rest[open..=open + close]),
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

/// Every problem found in a declarative configuration.
#[derive(Debug, Clone, thiserror::Error)]
pub struct ConfigError {
    pub errors: Vec<FieldError>,
    pub flattened: Vec<FlattenedEntityError>,
}

/// Kong 3.x `flattened_errors` entry: the errors of one entity.
#[derive(Debug, Clone, Serialize)]
pub struct FlattenedEntityError {
    pub entity_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entity_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entity_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entity_tags: Option<Vec<String>>,
    pub entity: Value,
    pub errors: Vec<FlattenedFieldError>,
}

/// One error of a flattened entity; `kind` is `"field"` or `"entity"`.
#[derive(Debug, Clone, Serialize)]
pub struct FlattenedFieldError {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl ConfigError {
    /// An error without flattened entity details.
    pub fn new(errors: Vec<FieldError>) -> Self {
        ConfigError {
            errors,
            flattened: Vec::new(),
        }
    }

    /// Kong's `POST /config` 400 body.
    pub fn to_kong_body(&self, flatten: bool) -> Value {
        let fields = self.fields_tree();
        let rendered = serde_json::to_string(&fields).unwrap_or_default();
        let mut body = json!({
            "code": DECLARATIVE_CONFIG_ERROR_CODE,
            "name": DECLARATIVE_CONFIG_ERROR_NAME,
            "message": format!("declarative config is invalid: {rendered}"),
            "fields": fields,
        });
        if flatten {
            let flattened = serde_json::to_value(&self.flattened).unwrap_or(Value::Null);
            body["flattened_errors"] = flattened;
        }
        body
    }

    /// The nested `fields` object mirroring the input document.
    pub fn fields_tree(&self) -> Value {
        let mut root = Value::Object(Map::new());
        for error in &self.errors {
            insert_error(&mut root, error);
        }
        root
    }
}

/// One step of a path: a field name or an array index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PathSegment {
    Name(String),
    Index(usize),
}

/// Splits `a.b[2].c` into segments. Malformed indexes stay part of the name.
pub(crate) fn parse_path(path: &str) -> Vec<PathSegment> {
    let mut segments = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (name, mut rest) = match part.find('[') {
            Some(at) => part.split_at(at),
            None => (part, ""),
        };
        if !name.is_empty() {
            segments.push(PathSegment::Name(name.to_string()));
        }
        while let Some(close) = rest.find(']') {
            match rest[1..close].parse::<usize>() {
                Ok(index) => segments.push(PathSegment::Index(index)),
                Err(_) => segments.push(PathSegment::Name(rest[..=close].to_string())),
            }
            rest = &rest[close + 1..];
        }
    }
    segments
}

/// True when the path names a whole entity (`services[1]`, `services[1].routes[0]`).
fn is_entity_path(segments: &[PathSegment]) -> bool {
    match segments {
        [.., PathSegment::Name(table), PathSegment::Index(_)] => EntityKind::from_table(table).is_some(),
        _ => false,
    }
}

fn insert_error(root: &mut Value, error: &FieldError) {
    let segments = parse_path(&error.path);
    if segments.is_empty() {
        push_message(root, "error", &error.message);
        return;
    }
    let entity_level = is_entity_path(&segments);
    let (last, parents) = match entity_level {
        true => (None, &segments[..]),
        false => (segments.last(), &segments[..segments.len() - 1]),
    };
    let mut node = root;
    for segment in parents {
        node = child_slot(node, segment);
    }
    match last {
        None => push_message(node, "@entity", &error.message),
        Some(PathSegment::Name(name)) => push_message(node, name, &error.message),
        Some(index @ PathSegment::Index(_)) => {
            let slot = child_slot(node, index);
            merge_message(slot, &error.message);
        }
    }
}

/// The child of `node` at `segment`, created (object or null-padded array) as needed.
fn child_slot<'a>(node: &'a mut Value, segment: &PathSegment) -> &'a mut Value {
    match segment {
        PathSegment::Name(name) => {
            if !node.is_object() {
                *node = Value::Object(Map::new());
            }
            let map = node.as_object_mut().expect("just made an object");
            map.entry(name.clone()).or_insert(Value::Null)
        }
        PathSegment::Index(index) => {
            if !node.is_array() {
                *node = Value::Array(Vec::new());
            }
            let items = node.as_array_mut().expect("just made an array");
            if items.len() <= *index {
                items.resize(index + 1, Value::Null);
            }
            &mut items[*index]
        }
    }
}

fn push_message(node: &mut Value, key: &str, message: &str) {
    let slot = child_slot(node, &PathSegment::Name(key.to_string()));
    if key == "@entity" {
        match slot {
            Value::Array(items) => items.push(Value::String(message.to_string())),
            other => *other = json!([message]),
        }
    } else {
        merge_message(slot, message);
    }
}

/// A leaf holds one message as a string, several as an array of strings.
fn merge_message(slot: &mut Value, message: &str) {
    let new = Value::String(message.to_string());
    match slot {
        Value::Null | Value::Object(_) => *slot = new,
        Value::String(old) => *slot = json!([old.clone(), message]),
        Value::Array(items) => items.push(new),
        _ => *slot = new,
    }
}

#[cfg(test)]
mod tests;
