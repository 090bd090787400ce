//! strait-core: Kong's entity model, schemas with defaults, validation with
//! field paths, the declarative config format, and the change (delta) types.
//!
//! No I/O, no clocks beyond timestamps passed in, no globals: everything here
//! takes values and returns values, so it can be fuzzed and benchmarked.
#![forbid(unsafe_code)]

pub mod declarative;
pub mod delta;
pub mod entities;
pub mod error;
pub mod header_switches;
pub mod protocol;
pub mod schema;
pub mod vault;

pub use declarative::{
    config_to_declarative, parse_declarative, parse_declarative_for, parse_declarative_memo, DeclarativeFormat, Memo,
    Parsed,
};
pub use delta::{ConfigChange, ConfigDelta, ConfigVersion, DeltaBody, Entity};
pub use entities::*;
pub use error::{ConfigError, FieldError, FlattenedEntityError, FlattenedFieldError};
pub use protocol::{Protocol, ProtocolSet};
pub use schema::{entity_schema_json, validate_entity, RouterFlavor};

/// Strait's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// `Server` header on responses Strait itself produces.
pub const SERVER_HEADER: &str = concat!("strait/", env!("CARGO_PKG_VERSION"));
/// `Via` value added to proxied requests and responses.
pub const VIA_VALUE: &str = concat!("1.1 strait/", env!("CARGO_PKG_VERSION"));
