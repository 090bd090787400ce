//! A `Config` as a flat declarative document (what `GET /config` and
//! `strait config export` produce); parsing it back gives an equal `Config`.
//! Like Kong's export it says `_transform: false`: basic-auth passwords are
//! already hashed and must not be hashed again when the document is loaded.

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
