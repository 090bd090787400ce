//! Request and response bodies as plugins read and rewrite them: form
//! (`application/x-www-form-urlencoded`) and JSON objects. Anything else is
//! left alone.

use bytes::Bytes;
use serde_json::{Map, Value};

/// A body decoded by its content type.
#[derive(Debug, Clone, PartialEq)]
pub enum ParsedBody {
    Form(Vec<(String, String)>),
    Json(Map<String, Value>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    Form,
    Json,
    Other,
}

/// What kind of body a `Content-Type` announces.
pub fn kind_of(content_type: Option<&str>) -> BodyKind {
    let Some(value) = content_type else {
        return BodyKind::Other;
    };
    let essence = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match essence.as_str() {
        "application/x-www-form-urlencoded" => BodyKind::Form,
        "application/json" => BodyKind::Json,
        e if e.starts_with("application/") && e.ends_with("+json") => BodyKind::Json,
        _ => BodyKind::Other,
    }
}

/// Decode `body` by `kind`; `None` when it is not what it claims to be (a
/// JSON body that is not an object included).
pub fn parse(kind: BodyKind, body: &[u8]) -> Option<ParsedBody> {
    match kind {
        BodyKind::Form => {
            let text = std::str::from_utf8(body).ok()?;
            Some(ParsedBody::Form(
                crate::form::pairs(text)
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect(),
            ))
        }
        BodyKind::Json => {
            if body.iter().all(u8::is_ascii_whitespace) {
                return Some(ParsedBody::Json(Map::new()));
            }
            match serde_json::from_slice(body).ok()? {
                Value::Object(map) => Some(ParsedBody::Json(map)),
                _ => None,
            }
        }
        BodyKind::Other => None,
    }
}

/// A field given more than once (a form key twice, a JSON array).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Duplicate;

impl ParsedBody {
    /// The value of `name` as text: [`Duplicate`] when it appears more than
    /// once (forms) or is an array (JSON), as Kong counts them.
    pub fn get(&self, name: &str) -> Result<Option<String>, Duplicate> {
        match self {
            ParsedBody::Form(pairs) => {
                let mut found = pairs.iter().filter(|(k, _)| k == name).map(|(_, v)| v);
                match (found.next(), found.next()) {
                    (Some(_), Some(_)) => Err(Duplicate),
                    (value, _) => Ok(value.cloned()),
                }
            }
            ParsedBody::Json(map) => match map.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(Value::Array(_)) => Err(Duplicate),
                Some(other) => Ok(Some(other.to_string())),
            },
        }
    }

    pub fn remove(&mut self, name: &str) {
        match self {
            ParsedBody::Form(pairs) => pairs.retain(|(k, _)| k != name),
            ParsedBody::Json(map) => {
                map.shift_remove(name);
            }
        }
    }

    pub fn encode(&self) -> Bytes {
        match self {
            ParsedBody::Form(pairs) => Bytes::from(crate::form::serialize(
                pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            )),
            ParsedBody::Json(map) => Bytes::from(serde_json::to_vec(map).unwrap_or_default()),
        }
    }
}
