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
        DeclarativeJson {
            out: br#"{"_format_version":"3.0","_transform":false"#.to_vec(),
        }
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

/// [`config_to_declarative`] as JSON text (see [`DeclarativeJson`]).
pub fn config_to_declarative_json(config: &Config) -> Vec<u8> {
    let mut out = DeclarativeJson::new();
    for kind in EntityKind::ALL {
        match kind {
            EntityKind::Services => out.list(kind, &config.services),
            EntityKind::Routes => out.list(kind, &config.routes),
            EntityKind::Upstreams => out.list(kind, &config.upstreams),
            EntityKind::Targets => out.list(kind, &config.targets),
            EntityKind::Consumers => out.list(kind, &config.consumers),
            EntityKind::Plugins => out.list(kind, &config.plugins),
            EntityKind::Certificates => out.list(kind, &config.certificates),
            EntityKind::Snis => out.list(kind, &config.snis),
            EntityKind::CaCertificates => out.list(kind, &config.ca_certificates),
            EntityKind::KeyauthCredentials => out.list(kind, &config.keyauth_credentials),
            EntityKind::BasicauthCredentials => out.list(kind, &config.basicauth_credentials),
            EntityKind::Acls => out.list(kind, &config.acls),
            EntityKind::JwtSecrets => out.list(kind, &config.jwt_secrets),
            EntityKind::HmacauthCredentials => out.list(kind, &config.hmacauth_credentials),
        }
    }
    out.finish()
}
