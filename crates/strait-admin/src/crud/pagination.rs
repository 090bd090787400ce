//! Kong's list arguments: `size` (1–1000, default 100), an opaque `offset`
//! (base64 of the last id served), the `tags` filter (`a,b` all of them,
//! `a/b` any of them) and the `next` link that keeps them.

use http::StatusCode;
use serde_json::json;
use strait_core::{Entity, EntityKind};
use uuid::Uuid;

use crate::errors::{kong_error, INVALID_OFFSET, INVALID_OPTIONS, INVALID_SIZE};
use crate::request::{escape, Query};
use crate::response::{failure, json_response, AdminResponse};
use crate::AdminState;

pub const DEFAULT_PAGE: usize = 100;
pub const MAX_PAGE: usize = 1000;
const MAX_TAGS: usize = 5;

/// Which tags an entity must carry to be listed.
#[derive(Debug, Clone, PartialEq)]
pub enum TagFilter {
    All(Vec<String>),
    Any(Vec<String>),
}

impl TagFilter {
    pub fn matches(&self, tags: Option<&[String]>) -> bool {
        let has = |tag: &String| tags.is_some_and(|t| t.contains(tag));
        match self {
            TagFilter::All(wanted) => wanted.iter().all(has),
            TagFilter::Any(wanted) => wanted.iter().any(has),
        }
    }
}

/// Parsed list arguments.
#[derive(Debug, Clone)]
pub struct PageArgs {
    pub size: usize,
    pub after: Option<String>,
    pub tags: Option<TagFilter>,
    raw_tags: Option<String>,
    raw_size: Option<String>,
}

impl PageArgs {
    /// The offset as an entity id.
    pub fn after_id(&self) -> Result<Option<Uuid>, AdminResponse> {
        match &self.after {
            None => Ok(None),
            Some(text) => Uuid::try_parse(text).map(Some).map_err(|_| invalid_offset(text)),
        }
    }

    /// `path?offset=...` keeping the `tags` and `size` arguments.
    pub fn next_link(&self, path: &str, offset: &str) -> String {
        let mut link = format!("{path}?offset={}", escape(offset));
        if let Some(tags) = &self.raw_tags {
            link.push_str(&format!("&tags={}", escape(tags)));
        }
        if let Some(size) = &self.raw_size {
            link.push_str(&format!("&size={}", escape(size)));
        }
        link
    }
}

fn invalid_offset(raw: &str) -> AdminResponse {
    let message = format!("'{raw}' is not a valid offset: bad base64 encoding");
    kong_error(
        StatusCode::BAD_REQUEST,
        INVALID_OFFSET,
        &message,
        serde_json::Value::Null,
    )
}

fn invalid_tags(message: &str) -> AdminResponse {
    let body = json!({
        "code": INVALID_OPTIONS,
        "name": "invalid options",
        "message": format!("invalid option (tags: {message})"),
        "options": { "tags": message },
    });
    json_response(StatusCode::BAD_REQUEST, &body)
}

/// Kong's tag filter syntax: only `,` (all) or only `/` (any), at most 5 tags.
pub fn parse_tags(raw: &str) -> Result<TagFilter, AdminResponse> {
    let valid_tag = |t: &str| !t.is_empty() && !t.chars().any(|c| c.is_control());
    let any = match (raw.contains(','), raw.contains('/')) {
        (true, true) => return Err(invalid_tags("invalid filter syntax")),
        (comma, slash) => slash && !comma,
    };
    let parts: Vec<&str> = raw.split(if any { '/' } else { ',' }).collect();
    let parts: Vec<&str> = match parts.last() {
        Some(last) if last.is_empty() && parts.len() > 1 => parts[..parts.len() - 1].to_vec(),
        _ => parts,
    };
    if parts.is_empty() || !parts.iter().all(|t| valid_tag(t)) {
        return Err(invalid_tags("invalid filter syntax"));
    }
    if parts.len() > MAX_TAGS {
        return Err(invalid_tags("cannot query more than 5 tags"));
    }
    let tags = parts.into_iter().map(str::to_string).collect();
    Ok(if any {
        TagFilter::Any(tags)
    } else {
        TagFilter::All(tags)
    })
}

/// `size`, `offset` and `tags` from the query string.
pub fn parse_args(query: &Query) -> Result<PageArgs, AdminResponse> {
    let raw_size = query.get("size").map(str::to_string);
    let size = match &raw_size {
        None => DEFAULT_PAGE,
        Some(raw) => match raw.parse::<f64>() {
            Err(_) => return Err(size_error("size must be a number")),
            Ok(n) if n.fract() == 0.0 && (1.0..=MAX_PAGE as f64).contains(&n) => n as usize,
            Ok(_) => return Err(size_error("size must be an integer between 1 and 1000")),
        },
    };
    let after = match query.get("offset") {
        None => None,
        Some(raw) => Some(decode_offset(raw).ok_or_else(|| invalid_offset(raw))?),
    };
    let raw_tags = query.get("tags").map(str::to_string);
    let tags = raw_tags.as_deref().map(parse_tags).transpose()?;
    Ok(PageArgs {
        size,
        after,
        tags,
        raw_tags,
        raw_size,
    })
}

fn size_error(message: &str) -> AdminResponse {
    kong_error(StatusCode::BAD_REQUEST, INVALID_SIZE, message, serde_json::Value::Null)
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Base64 (standard alphabet, padded) of `text`: Kong's offsets are opaque
/// base64 strings too.
pub fn encode_offset(text: &str) -> String {
    let mut out = String::new();
    for chunk in text.as_bytes().chunks(3) {
        let bytes = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(bytes[0]) << 16) | (u32::from(bytes[1]) << 8) | u32::from(bytes[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The text inside an offset, `None` when it is not base64 of UTF-8.
pub fn decode_offset(offset: &str) -> Option<String> {
    let trimmed = offset.trim_end_matches('=');
    let mut bits = 0u32;
    let mut count = 0;
    let mut out = Vec::new();
    for c in trimmed.bytes() {
        let value = ALPHABET.iter().position(|a| *a == c)? as u32;
        bits = (bits << 6) | value;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    String::from_utf8(out).ok().filter(|s| !s.is_empty())
}

/// The tags an entity carries.
pub fn entity_tags(entity: &Entity) -> Option<&[String]> {
    let tags = match entity {
        Entity::Vault(e) => &e.tags,
        Entity::KeySet(e) => &e.tags,
        Entity::Key(e) => &e.tags,
        Entity::ConsumerGroup(e) => &e.tags,
        Entity::ConsumerGroupConsumer(_) => &None,
        Entity::Service(e) => &e.tags,
        Entity::Route(e) => &e.tags,
        Entity::FilterChain(e) => &e.tags,
        Entity::Upstream(e) => &e.tags,
        Entity::Target(e) => &e.tags,
        Entity::Consumer(e) => &e.tags,
        Entity::Plugin(e) => &e.tags,
        Entity::Certificate(e) => &e.tags,
        Entity::Sni(e) => &e.tags,
        Entity::CaCertificate(e) => &e.tags,
        Entity::KeyauthCredential(e) => &e.tags,
        Entity::BasicauthCredential(e) => &e.tags,
        Entity::Acl(e) => &e.tags,
        Entity::JwtSecret(e) => &e.tags,
        Entity::HmacauthCredential(e) => &e.tags,
        Entity::Oauth2Credential(e) => &e.tags,
    };
    tags.as_deref()
}

/// A page of entities and the id to continue after, if more follow.
pub struct Page {
    pub entities: Vec<Entity>,
    pub next_after: Option<Uuid>,
}

impl Page {
    fn cut(mut entities: Vec<Entity>, size: usize) -> Page {
        let next_after = (entities.len() > size).then(|| entities[size - 1].id());
        entities.truncate(size);
        Page { entities, next_after }
    }
}

fn wanted(args: &PageArgs, entity: &Entity) -> bool {
    args.tags
        .as_ref()
        .is_none_or(|filter| filter.matches(entity_tags(entity)))
}

/// A page of all entities of `kind`, scanning in id order past filtered ones.
pub fn page_kind(state: &AdminState, kind: EntityKind, args: &PageArgs) -> Result<Page, AdminResponse> {
    let batch = if args.tags.is_some() { MAX_PAGE } else { args.size + 1 };
    let mut after = args.after_id()?;
    let mut found = Vec::with_capacity(args.size + 1);
    loop {
        let entities = state.store.list(kind, after, batch).map_err(|e| failure(&e))?;
        let exhausted = entities.len() < batch;
        for entity in entities {
            after = Some(entity.id());
            if wanted(args, &entity) {
                found.push(entity);
                if found.len() > args.size {
                    return Ok(Page::cut(found, args.size));
                }
            }
        }
        if exhausted {
            return Ok(Page::cut(found, args.size));
        }
    }
}

/// A page of the given entity ids (in id order).
pub fn page_ids(state: &AdminState, kind: EntityKind, ids: Vec<Uuid>, args: &PageArgs) -> Result<Page, AdminResponse> {
    let after = args.after_id()?;
    let mut found = Vec::new();
    for id in ids.into_iter().filter(|id| after.is_none_or(|a| *id > a)) {
        let entity = state.store.get(kind, id).map_err(|e| failure(&e))?;
        if let Some(entity) = entity.filter(|e| wanted(args, e)) {
            found.push(entity);
            if found.len() > args.size {
                break;
            }
        }
    }
    Ok(Page::cut(found, args.size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_round_trip() {
        for text in ["a", "ab", "abc", "6a1f8c8e-0000-4000-8000-000000000001"] {
            assert_eq!(decode_offset(&encode_offset(text)).as_deref(), Some(text));
        }
        assert_eq!(decode_offset("!!"), None);
    }

    #[test]
    fn tag_filters() {
        assert_eq!(
            parse_tags("a,b").ok(),
            Some(TagFilter::All(vec!["a".into(), "b".into()]))
        );
        assert_eq!(
            parse_tags("a/b").ok(),
            Some(TagFilter::Any(vec!["a".into(), "b".into()]))
        );
        assert!(parse_tags("a,b/c").is_err());
        assert!(parse_tags("a,b,c,d,e,f").is_err());
        let tags = vec!["a".to_string()];
        assert!(TagFilter::Any(vec!["a".into(), "z".into()]).matches(Some(&tags)));
        assert!(!TagFilter::All(vec!["a".into(), "z".into()]).matches(Some(&tags)));
    }
}
