//! A `Config` as a flat declarative document (what `GET /config` and
//! `strait config export` produce); parsing it back gives an equal `Config`.
//! Like Kong's export it says `_transform: false`: basic-auth passwords are
//! already hashed and must not be hashed again when the document is loaded.

use std::io::{self, Write};

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
/// carries every entity), into any writer (the Admin API sends it while it
/// is written).
pub struct DeclarativeJson<W> {
    out: W,
}

const HEAD: &[u8] = br#"{"_format_version":"3.0","_transform":false"#;

impl<W: Write> DeclarativeJson<W> {
    /// A document written into `out` from its first byte.
    pub fn writing_to(mut out: W) -> io::Result<DeclarativeJson<W>> {
        out.write_all(HEAD)?;
        Ok(DeclarativeJson { out })
    }

    /// The entities of `kind`; call in `EntityKind::ALL` order. After an
    /// error the document is incomplete: stop there.
    pub fn list<T: Serialize>(&mut self, kind: EntityKind, items: &[T]) -> io::Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        self.out.write_all(b",\"")?;
        self.out.write_all(kind.table().as_bytes())?;
        self.out.write_all(b"\":")?;
        serde_json::to_writer(&mut self.out, items).map_err(io::Error::from)
    }

    /// Closes the document and gives the writer back.
    pub fn end(mut self) -> io::Result<W> {
        self.out.write_all(b"}")?;
        Ok(self.out)
    }
}
