//! A `Config` as a flat declarative document (what `GET /config` and
//! `strait config export` produce); parsing it back gives an equal `Config`.
//! Like Kong's export it says `_transform: false`: basic-auth passwords are
//! already hashed and must not be hashed again when the document is loaded.

use serde::Serialize;
use serde_json::{json, Value};

use crate::entities::{Config, EntityKind};

/// Renders every entity, ids and references included, in flat form.
pub fn config_to_declarative(config: &Config) -> Value {
    let mut document = json!({ "_format_version": "3.0", "_transform": false });
    for kind in EntityKind::ALL {
        let entities = config.entities_json(kind);
        if !entities.is_empty() {
            document[kind.table()] = Value::Array(entities);
        }
    }
    document
}

/// A flat declarative document written straight to JSON text, kind by
/// kind in [`EntityKind::ALL`] order: the bytes [`config_to_declarative`]
/// gives, without building a JSON tree first (a `POST /config` answer
/// carries every entity).
pub struct DeclarativeJson {
    out: Vec<u8>,
}

impl Default for DeclarativeJson {
    fn default() -> Self {
        DeclarativeJson::new()
    }
}

impl DeclarativeJson {
    pub fn new() -> DeclarativeJson {
        DeclarativeJson::with_capacity(0)
    }

    /// A document expected to take about `bytes`: reserved once instead of
    /// grown by copies (pages never written are never resident).
    pub fn with_capacity(bytes: usize) -> DeclarativeJson {
        const HEAD: &[u8] = br#"{"_format_version":"3.0","_transform":false"#;
        let mut out = Vec::with_capacity(bytes.max(HEAD.len() + 1));
        out.extend_from_slice(HEAD);
        DeclarativeJson { out }
    }

    /// The entities of `kind`; call in `EntityKind::ALL` order.
    pub fn list<T: Serialize>(&mut self, kind: EntityKind, items: &[T]) {
        if items.is_empty() {
            return;
        }
        self.out.extend_from_slice(b",\"");
        self.out.extend_from_slice(kind.table().as_bytes());
        self.out.extend_from_slice(b"\":");
        // Writing typed entities into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut self.out, items);
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.out.push(b'}');
        self.out
    }
}
