//! Which index buckets a condition belongs in.
//!
//! A key is a *necessary* condition: a request can only satisfy the
//! condition if its host (path) hits one of the condition's host (path)
//! keys. `None` means no such key exists and the matcher goes in the
//! "any host" ("any path") bucket. The index only narrows candidates; the
//! full condition is always evaluated, so a key may be looser than the
//! predicate it comes from, never stricter.

use std::sync::Arc;

use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::Look;
use strait_expr::{Op, RouteRegex};

use crate::cond::{Cond, Operand, Source, Test};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum HostKey {
    Exact(Arc<str>),
    /// The host ends with this text (`*.example.com` -> `.example.com`).
    Suffix(Arc<str>),
    /// The host starts with this text (`example.*` -> `example.`).
    Prefix(Arc<str>),
}

/// Where a matcher is indexed: every (host key, path prefix) pair.
#[derive(Debug, Clone, Default)]
pub(crate) struct IndexKeys {
    pub hosts: Option<Vec<HostKey>>,
    pub paths: Option<Vec<Arc<str>>>,
}

impl IndexKeys {
    pub(crate) fn of(cond: &Cond) -> IndexKeys {
        IndexKeys {
            hosts: necessary(cond, &host_key).map(dedup),
            paths: necessary(cond, &path_keys).map(dedup),
        }
    }
}

fn dedup<K: PartialEq>(keys: Vec<K>) -> Vec<K> {
    if keys.len() < 2 {
        return keys;
    }
    let mut out: Vec<K> = Vec::with_capacity(keys.len());
    for key in keys {
        if !out.contains(&key) {
            out.push(key);
        }
    }
    out
}

/// Keys one of which every matching request hits, if the condition has them.
fn necessary<K>(cond: &Cond, leaf: &dyn Fn(&Test) -> Option<Vec<K>>) -> Option<Vec<K>> {
    match cond {
        Cond::Test(test) => leaf(test),
        // Any conjunct's keys are necessary; the fewest keys narrow the most.
        Cond::And(items) => items
            .iter()
            .filter_map(|c| necessary(c, leaf))
            .min_by_key(|keys| keys.len()),
        // Every alternative must be keyed, and any of their keys may be hit.
        Cond::Or(items) if !items.is_empty() => {
            let mut all = Vec::new();
            for item in items {
                all.extend(necessary(item, leaf)?);
            }
            Some(all)
        }
        Cond::Or(_) | Cond::Not(_) => None,
    }
}

/// The host is lower case already, so `lower()` changes nothing here.
fn host_key(test: &Test) -> Option<Vec<HostKey>> {
    let (Source::Host, Operand::Str(text)) = (&test.source, &test.operand) else {
        return None;
    };
    let text = text.clone();
    match test.op {
        Op::Equals => Some(vec![HostKey::Exact(text)]),
        Op::Suffix => Some(vec![HostKey::Suffix(text)]),
        Op::Prefix => Some(vec![HostKey::Prefix(text)]),
        _ => None,
    }
}

/// Paths keep their case, so a `lower()` test gives no key.
fn path_keys(test: &Test) -> Option<Vec<Arc<str>>> {
    if test.source != Source::Path || test.lower {
        return None;
    }
    match (test.op, &test.operand) {
        (Op::Prefix | Op::Equals, Operand::Str(text)) => Some(vec![text.clone()]),
        (Op::Regex, Operand::Regex(regex)) => regex_prefixes(regex),
        (Op::Regex, Operand::SplitRegex(split)) => Some(vec![split.literal.clone()]),
        _ => None,
    }
}

/// Literal prefixes every match of a start-anchored regex begins with.
pub(crate) fn regex_prefixes(regex: &RouteRegex) -> Option<Vec<Arc<str>>> {
    if let Some(prefix) = leading_literal(regex.as_str()) {
        return Some(vec![prefix.into()]);
    }
    let hir = regex_syntax::Parser::new().parse(regex.as_str()).ok()?;
    if !hir.properties().look_set_prefix().contains(Look::Start) {
        return None;
    }
    let seq = Extractor::new().kind(ExtractKind::Prefix).extract(&hir);
    let literals = seq.literals()?;
    if literals.is_empty() {
        return None;
    }
    let prefixes = literals
        .iter()
        .map(|literal| {
            let bytes = literal.as_bytes();
            let valid = match std::str::from_utf8(bytes) {
                Ok(text) => text,
                // A literal cut inside a character: keep the whole characters.
                Err(err) => std::str::from_utf8(&bytes[..err.valid_up_to()]).unwrap_or(""),
            };
            Arc::from(valid)
        })
        .collect();
    Some(prefixes)
}

/// The common case without parsing the pattern again: `^` then plain
/// characters, with no alternation anywhere. Every match begins with those
/// characters (less the last one when a quantifier follows it). `None` when
/// the pattern is not of that shape or the run is empty; the syntax tree
/// decides then.
pub(crate) fn leading_literal(pattern: &str) -> Option<&str> {
    let rest = pattern.strip_prefix('^')?;
    if pattern.contains('|') {
        return None;
    }
    let mut end = 0;
    let mut chars = rest.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if !(c.is_alphanumeric() || "/_-%=,;:@!'\"<>~&".contains(c)) {
            break;
        }
        if matches!(chars.peek(), Some((_, '?' | '*' | '+' | '{'))) {
            break;
        }
        end = at + c.len_utf8();
    }
    (end > 0).then(|| &rest[..end])
}
