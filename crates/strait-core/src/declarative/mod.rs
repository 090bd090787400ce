//! Kong's declarative configuration format (`kong.yml`, `POST /config`):
//! parsing in flat or nested form, reference resolution, whole-document
//! validation with every error and its path, and export.
//!
//! Pipeline: decode → collect entities (nested children flattened, parent
//! links remembered) → assign ids → index and detect duplicates → resolve
//! references → validate each entity → document-wide uniqueness → `Config`.

mod collect;
mod decode;
mod export;
mod info;
mod memo;
mod resolve;
mod verify;

use crate::entities::Config;
use crate::error::{ConfigError, FieldError};
use crate::schema::RouterFlavor;

pub use decode::FORMAT_VERSIONS;
pub use export::{config_to_declarative, DeclarativeJson};
pub use memo::{top_level_member, Changes, Member, Memo, Plan};

/// How to read the bytes of a declarative configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeclarativeFormat {
    Yaml,
    Json,
    /// JSON when the first non-space character is `{`, YAML otherwise.
    Auto,
}

/// An error tied to one collected entity (path relative to it), or to the
/// document itself.
pub(crate) struct Located {
    entity: Option<usize>,
    error: FieldError,
}

impl Located {
    fn entity(at: usize, message: String) -> Located {
        Located {
            entity: Some(at),
            error: FieldError::new("", message),
        }
    }

    fn field(at: usize, field: &str, message: String) -> Located {
        Located {
            entity: Some(at),
            error: FieldError::new(field, message),
        }
    }
}

/// Parses, resolves and validates a whole declarative configuration.
pub fn parse_declarative(bytes: &[u8], format: DeclarativeFormat, now: i64) -> Result<Config, ConfigError> {
    parse_declarative_for(bytes, format, now, RouterFlavor::Expressions)
}

/// [`parse_declarative`] for a node whose `router_flavor` is `flavor`:
/// route fields the flavor lacks are errors at their path.
pub fn parse_declarative_for(
    bytes: &[u8],
    format: DeclarativeFormat,
    now: i64,
    flavor: RouterFlavor,
) -> Result<Config, ConfigError> {
    parse_whole(bytes, format, now, flavor, false).map(|(config, _)| config)
}

/// A declarative document parsed against what the last accepted one held.
pub enum Parsed {
    /// The whole configuration, with the memo of a JSON document for the
    /// next parse (its version still to be set, see [`Memo::at`]).
    Whole(Config, Option<Memo>),
    /// The document is the memorized configuration with these changes.
    Changes(Changes),
}

/// Parses a declarative document: as changes to `memo`'s configuration
/// when it is a JSON document differing from it in a few items (see
/// `memo`), else whole, remembering it for the next parse. Both give the
/// same result; errors always come from the whole parse.
pub fn parse_declarative_memo(
    bytes: &[u8],
    format: DeclarativeFormat,
    now: i64,
    flavor: RouterFlavor,
    memo: Option<&Memo>,
) -> Result<Parsed, ConfigError> {
    let json = is_json(bytes, format);
    if let Some(memo) = memo.filter(|_| json) {
        if let Some(changes) = memo::parse_changes(bytes, now, flavor, memo) {
            return Ok(Parsed::Changes(changes));
        }
    }
    parse_whole(bytes, format, now, flavor, json).map(|(config, memo)| Parsed::Whole(config, memo))
}

/// A JSON document read as changes to `memo`'s configuration (see
/// [`parse_declarative_memo`]); `None` when the whole parse must decide,
/// including whether the document is valid.
pub fn parse_declarative_changes(bytes: &[u8], now: i64, flavor: RouterFlavor, memo: &Memo) -> Option<Changes> {
    memo::parse_changes(bytes, now, flavor, memo)
}

fn is_json(bytes: &[u8], format: DeclarativeFormat) -> bool {
    match format {
        DeclarativeFormat::Json => true,
        DeclarativeFormat::Yaml => false,
        DeclarativeFormat::Auto => bytes.trim_ascii_start().first() == Some(&b'{'),
    }
}

fn parse_whole(
    bytes: &[u8],
    format: DeclarativeFormat,
    now: i64,
    flavor: RouterFlavor,
    record: bool,
) -> Result<(Config, Option<Memo>), ConfigError> {
    let document = decode::decode(bytes, format).map_err(|e| ConfigError::new(vec![e]))?;
    let mut top_level = Vec::new();
    decode::check_top_level(&document, &mut top_level);
    let info = info::read(&document, &mut top_level);
    let transform = decode::transform_wanted(&document);
    let mut pending = collect::collect(document, &mut top_level);
    if let Some(info) = &info {
        info.apply(&mut pending);
    }
    // A document with `_info` is not memorized: its items are not what was
    // written, so a later post is parsed whole.
    let mut recorder = match record && top_level.is_empty() && info.is_none() {
        true => memo::Recorder::start(bytes, &pending, transform, flavor),
        false => None,
    };
    let (ids, seeded) = resolve::assign_ids(&pending);
    let mut located = Vec::new();
    let index = resolve::Index::build(&pending, &ids, &mut located);
    if let Some(recorder) = &mut recorder {
        recorder.references(&pending);
    }
    resolve::resolve_references(&mut pending, &ids, &index, &mut located);
    drop(index);
    let mut entities = verify::validate_all(&mut pending, &ids, now, flavor, transform, &mut located);
    if transform {
        verify::transform_all(&pending, &mut entities);
    }
    verify::check_unique_fields(&pending, &entities, &mut located);
    verify::check_plugin_scopes(&entities, &mut located);
    verify::check_acl_groups(&entities, &mut located);
    verify::check_memberships(&entities, &mut located);
    if top_level.is_empty() && located.is_empty() {
        let memo = recorder.map(|recorder| recorder.finish(&pending, &ids, &seeded, &entities));
        return Ok((verify::assemble(entities), memo));
    }
    drop(entities);
    // Collecting took the document apart; flattened errors show each
    // failing item as written, so read it again (this decoded once before).
    let written = decode::decode(bytes, format).unwrap_or_default();
    Err(verify::config_error(top_level, located, &pending, &written))
}

#[cfg(test)]
mod tests;
