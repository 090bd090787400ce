//! Incremental declarative parsing: what the last accepted JSON document
//! held, item by item, so that the next document is parsed only where its
//! bytes differ.
//!
//! Every item of a document (an entity as written, nested children left
//! out) gets a 128-bit fingerprint of its own bytes chained with its
//! nested parent's. A [`Memo`] keeps, per item of the last accepted
//! document: that fingerprint, the entity's kind and id, and the few facts
//! the document-wide checks read (its *claims*: id, endpoint key, unique
//! field values, plugin scope, ACL group; and the references it resolved).
//! A new document whose items mostly match is then handled as changes:
//! only the new or edited items are decoded, resolved and validated, and
//! the checks compare their claims with the claims of the items kept.
//! Anything this path cannot decide exactly as the whole parse would (an
//! error, a reference into what changed, content-derived ids that shift,
//! a repeated item, a YAML document) leaves it to the whole parse.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::LazyLock;

use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::collect::{nested_children, own_fields, Pending};
use super::resolve::{content_id, given_key, id_from, nested_link, resolve_reference, IdFrom, Lookup, Seeded};
use super::verify::{assemble, for_unique_values, validate_input};
use crate::delta::{ConfigVersion, Entity};
use crate::entities::{Config, EntityKind};
use crate::schema::{endpoint_key, foreign_fields, transform_on_write, transforms_on_write, RouterFlavor};

/// The changes path is taken when the new or edited items, and the items
/// gone, are each at most 1/`CHANGE_SHARE` of the document (an edit is
/// one of each), as the compiler derives a snapshot from changes up to
/// that share.
const CHANGE_SHARE: usize = 2;

/// What [`Memo::by_fp`] holds for a fingerprint two items share.
const AMBIGUOUS: u32 = u32::MAX;

/// Keys of the two 64-bit quality foldhashes a fingerprint is made of:
/// random per process, each with its own per-hasher and shared seeds.
static KEYS: LazyLock<(foldhash::quality::RandomState, foldhash::quality::SeedableRandomState)> = LazyLock::new(|| {
    (
        foldhash::quality::RandomState::default(),
        foldhash::quality::SeedableRandomState::with_seed(random_u64(), &SHARED),
    )
});

/// The second hash's shared seed (the first uses foldhash's global one).
static SHARED: LazyLock<foldhash::SharedSeed> = LazyLock::new(|| foldhash::SharedSeed::from_u64(random_u64()));

fn random_u64() -> u64 {
    std::collections::hash_map::RandomState::new().hash_one(0u8)
}

/// A 128-bit fingerprint being written.
struct Fp(
    foldhash::quality::FoldHasher<'static>,
    foldhash::quality::FoldHasher<'static>,
);

impl Fp {
    fn new(tag: u8) -> Fp {
        let mut fp = Fp(KEYS.0.build_hasher(), KEYS.1.build_hasher());
        fp.0.write_u8(tag);
        fp.1.write_u8(tag);
        fp
    }

    fn bytes(&mut self, bytes: &[u8]) -> &mut Fp {
        self.0.write_usize(bytes.len());
        self.0.write(bytes);
        self.1.write_usize(bytes.len());
        self.1.write(bytes);
        self
    }

    fn text(&mut self, text: &str) -> &mut Fp {
        self.bytes(text.as_bytes())
    }

    fn kind(&mut self, kind: EntityKind) -> &mut Fp {
        self.bytes(kind.table().as_bytes())
    }

    fn number(&mut self, value: u128) -> &mut Fp {
        self.0.write_u128(value);
        self.1.write_u128(value);
        self
    }

    fn finish(&self) -> u128 {
        (u128::from(self.0.finish()) << 64) | u128::from(self.1.finish())
    }
}

const TAG_META: u8 = 1;
const TAG_RECORD: u8 = 2;
const TAG_NAME: u8 = 3;
const TAG_CHAIN: u8 = 4;
const TAG_SEED: u8 = 5;
const TAG_FULL: u8 = 6;
const CLAIM_ID: u8 = 10;
const CLAIM_KEY: u8 = 11;
const CLAIM_UNIQUE: u8 = 12;
const CLAIM_SCOPE: u8 = 13;
const CLAIM_ACL: u8 = 14;
const CLAIM_MEMBER: u8 = 15;

fn id_claim(kind: EntityKind, id: Uuid) -> u128 {
    Fp::new(CLAIM_ID).kind(kind).bytes(id.as_bytes()).finish()
}

fn key_claim(kind: EntityKind, key: &str) -> u128 {
    Fp::new(CLAIM_KEY).kind(kind).text(key).finish()
}

fn seed_hash(seed: &str) -> u128 {
    Fp::new(TAG_SEED).text(seed).finish()
}

fn optional_id(fp: &mut Fp, id: Option<Uuid>) {
    fp.bytes(id.as_ref().map_or(&[][..], |id| id.as_bytes()));
}

/// The claims of a validated entity other than its id and given key: the
/// unique values the document-wide check compares, a plugin's scope, an
/// ACL's (consumer, group).
fn entity_claims(entity: &Entity, key_given: bool, out: &mut Vec<u128>) {
    let kind = entity.kind();
    for_unique_values(entity, key_given, |field, value| {
        out.push(Fp::new(CLAIM_UNIQUE).kind(kind).text(field).text(&value).finish());
    });
    match entity {
        Entity::Plugin(plugin) => {
            let mut fp = Fp::new(CLAIM_SCOPE);
            fp.text(&plugin.name);
            optional_id(&mut fp, plugin.route.map(|fk| fk.id));
            optional_id(&mut fp, plugin.service.map(|fk| fk.id));
            optional_id(&mut fp, plugin.consumer.map(|fk| fk.id));
            optional_id(&mut fp, plugin.consumer_group.map(|fk| fk.id));
            out.push(fp.finish());
        }
        Entity::ConsumerGroupConsumer(membership) => {
            out.push(
                Fp::new(CLAIM_MEMBER)
                    .bytes(membership.consumer_group.id.as_bytes())
                    .bytes(membership.consumer.id.as_bytes())
                    .finish(),
            );
        }
        Entity::Acl(acl) => {
            out.push(
                Fp::new(CLAIM_ACL)
                    .bytes(acl.consumer.id.as_bytes())
                    .text(&acl.group)
                    .finish(),
            );
        }
        _ => {}
    }
}

/// The key and id claims a reference as written would resolve through
/// (see `resolve_reference`).
fn reference_claims(kind: EntityKind, input: &Map<String, Value>, link: Option<&str>, out: &mut Vec<u128>) {
    for (field, target) in foreign_fields(kind) {
        if link == Some(field) {
            continue;
        }
        match input.get(field) {
            Some(Value::String(text)) => {
                out.push(key_claim(target, text));
                if let Ok(id) = Uuid::parse_str(text) {
                    out.push(id_claim(target, id));
                }
            }
            Some(Value::Object(map)) => match map.get("id") {
                Some(id) => {
                    if let Some(id) = id.as_str().and_then(|id| Uuid::parse_str(id).ok()) {
                        out.push(id_claim(target, id));
                    }
                }
                None => {
                    if let Some(Value::String(key)) = endpoint_key(target).and_then(|field| map.get(field)) {
                        out.push(key_claim(target, key));
                    }
                }
            },
            _ => {}
        }
    }
}

/// One item of a memorized document.
#[derive(Clone)]
struct Fact {
    fp: u128,
    /// Fingerprint of its own bytes (`fp` unchained).
    own: u128,
    /// Fingerprint of all its bytes, nested lists included.
    full: u128,
    /// Hash of the content seed its id came from (0: the id did not).
    seed: u128,
    id: Uuid,
    /// Its count among items with the same seed.
    count: u32,
    /// End of its claims in `Memo::claims` (they start where the previous
    /// fact's end).
    claims: u32,
    /// End of its reference claims in `Memo::refs`.
    refs: u32,
    /// How many bytes it spans, nested lists included.
    len: u32,
    /// How many facts its subtree holds (itself and the ones after it).
    size: u32,
    /// The fact it is nested under (`NONE` at the top level).
    parent: u32,
    kind: EntityKind,
}

impl Fact {
    /// A fact for a scanned item (its place) and what parsing found of it.
    fn of(item: &Item, id: Uuid, seed: (u128, u32)) -> Fact {
        Fact {
            fp: item.fp,
            own: item.own,
            full: item.full,
            seed: seed.0,
            id,
            count: seed.1,
            claims: 0,
            refs: 0,
            len: item.len,
            size: item.size,
            parent: item.parent.map_or(NONE, |parent| parent as u32),
            kind: item.kind,
        }
    }

    /// This fact's identity at the place of `item` in a new document.
    fn moved(&self, item: &Item) -> Fact {
        Fact::of(item, self.id, (self.seed, self.count))
    }
}

/// A `u128` fingerprint is already uniformly spread: its low bits are the hash.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u128(&mut self, value: u128) {
        self.0 = value as u64;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type ByFp = HashMap<u128, u32, BuildHasherDefault<Prehashed>>;
type Claims = HashSet<u128, BuildHasherDefault<Prehashed>>;

/// What the last accepted JSON document held, item by item (see the
/// module documentation), and the configuration version it produced.
pub struct Memo {
    version: ConfigVersion,
    meta: u128,
    transform: bool,
    flavor: RouterFlavor,
    facts: Vec<Fact>,
    claims: Vec<u128>,
    refs: Vec<u128>,
    by_fp: ByFp,
    seeded: bool,
    /// The first top-level fact of each kind (`EntityKind::ALL` order).
    first_top: [u32; EntityKind::ALL.len()],
}

impl Memo {
    fn first_top(&self, kind: EntityKind) -> Option<u32> {
        let at = EntityKind::ALL.iter().position(|k| *k == kind)?;
        Some(self.first_top[at]).filter(|fact| *fact != NONE)
    }

    /// The first fact of `kind` nested directly under fact `parent`.
    fn first_child(&self, parent: u32, kind: EntityKind) -> Option<u32> {
        let end = parent.checked_add(self.facts.get(parent as usize)?.size)?;
        let mut at = parent + 1;
        while at < end {
            let fact = &self.facts[at as usize];
            if fact.parent == parent && fact.kind == kind {
                return Some(at);
            }
            at += fact.size.max(1);
        }
        None
    }

    /// The fact expected after `item` (read, not taken), which was expected
    /// to be `expect`, among the children of `parent_fact`: the one after
    /// the fact the item is, when it is one, else after `expect`'s subtree.
    fn after(&self, item: &Item, parent_fact: Option<u32>, expect: Option<u32>) -> Option<u32> {
        let parent_fp = match (item.parent, parent_fact) {
            (None, _) => None,
            (Some(_), Some(fact)) => Some(self.facts.get(fact as usize)?.fp),
            (Some(_), None) => return None,
        };
        let fp = parent_fp.map_or(item.own, |parent| chain(item.own, parent));
        let found = self.by_fp.get(&fp).copied().filter(|at| *at != AMBIGUOUS);
        let recognized = found.filter(|at| {
            let fact = &self.facts[*at as usize];
            fact.kind == item.kind && fact.parent == parent_fact.unwrap_or(NONE)
        });
        let before = recognized.or(expect)?;
        before.checked_add(self.facts.get(before as usize)?.size)
    }

    /// The configuration version the memorized document produced.
    pub fn version(&self) -> ConfigVersion {
        self.version
    }

    /// The memo of a document that produced `version`.
    pub fn at(mut self, version: ConfigVersion) -> Memo {
        self.version = version;
        self
    }

    /// How many items the memorized document held.
    pub fn items(&self) -> usize {
        self.facts.len()
    }

    fn claims_of(&self, at: usize) -> &[u128] {
        let start = at.checked_sub(1).map_or(0, |before| self.facts[before].claims as usize);
        &self.claims[start..self.facts[at].claims as usize]
    }

    fn refs_of(&self, at: usize) -> &[u128] {
        let start = at.checked_sub(1).map_or(0, |before| self.facts[before].refs as usize);
        &self.refs[start..self.facts[at].refs as usize]
    }

    /// The memo of the document [`parse_changes`] accepted as `changes`,
    /// once they produced `version`.
    pub fn advance(self, changes: Plan, version: ConfigVersion) -> Memo {
        let mut next = Builder::with_capacity(changes.sources.len(), self.meta, self.transform, self.flavor);
        for (item, source) in changes.items.iter().zip(&changes.sources) {
            match *source {
                Source::Kept(at) => {
                    let at = at as usize;
                    let fact = self.facts[at].moved(item);
                    next.push(fact, self.claims_of(at), self.refs_of(at));
                }
                Source::Fresh(at) => {
                    let fresh = &changes.fresh[at as usize];
                    next.push(fresh.fact.clone(), &fresh.claims, &fresh.refs);
                }
            }
        }
        next.finish().at(version)
    }
}

/// Builds a memo fact by fact, in document order.
struct Builder {
    memo: Memo,
}

impl Builder {
    fn with_capacity(items: usize, meta: u128, transform: bool, flavor: RouterFlavor) -> Builder {
        let mut by_fp = ByFp::default();
        by_fp.reserve(items);
        Builder {
            memo: Memo {
                version: 0,
                meta,
                transform,
                flavor,
                facts: Vec::with_capacity(items),
                claims: Vec::with_capacity(items * 2),
                refs: Vec::new(),
                by_fp,
                seeded: false,
                first_top: [NONE; EntityKind::ALL.len()],
            },
        }
    }

    fn push(&mut self, mut fact: Fact, claims: &[u128], refs: &[u128]) {
        let memo = &mut self.memo;
        memo.claims.extend_from_slice(claims);
        memo.refs.extend_from_slice(refs);
        fact.claims = memo.claims.len() as u32;
        fact.refs = memo.refs.len() as u32;
        memo.seeded |= fact.seed != 0;
        let at = memo.facts.len() as u32;
        memo.by_fp
            .entry(fact.fp)
            .and_modify(|slot| *slot = AMBIGUOUS)
            .or_insert(at);
        memo.facts.push(fact);
    }

    fn finish(mut self) -> Memo {
        for (at, fact) in self.memo.facts.iter().enumerate().rev() {
            if fact.parent == NONE {
                if let Some(kind) = EntityKind::ALL.iter().position(|k| *k == fact.kind) {
                    self.memo.first_top[kind] = at as u32;
                }
            }
        }
        self.memo.facts.shrink_to_fit();
        self.memo.claims.shrink_to_fit();
        self.memo.refs.shrink_to_fit();
        self.memo
    }
}

// ---------------------------------------------------------------------------
// Scanning: the items of a JSON document and their fingerprints, without
// decoding it.

/// No fact (a top-level item's parent).
const NONE: u32 = u32::MAX;

/// One entity item of a scanned document, in the order `collect` takes them.
struct Item {
    kind: EntityKind,
    parent: Option<usize>,
    /// Fingerprint of its own bytes (nested lists left out).
    own: u128,
    /// `own` chained with the parents' (see `chain`).
    fp: u128,
    /// Fingerprint of all its bytes, nested lists included.
    full: u128,
    /// Its bytes (`start == end` for an item taken from the memo unread).
    start: usize,
    end: usize,
    /// How many bytes it spans.
    len: u32,
    /// How many items its subtree holds, itself included.
    size: u32,
    /// The memorized fact it was recognized as, bytes unread.
    kept: Option<u32>,
}

fn chain(own: u128, parent: u128) -> u128 {
    Fp::new(TAG_CHAIN).number(own).number(parent).finish()
}

fn full_fp(kind: EntityKind, bytes: &[u8]) -> u128 {
    Fp::new(TAG_FULL).kind(kind).bytes(bytes).finish()
}

/// A scanned document: the fingerprint of its non-entity members
/// (`_format_version`, `_transform`, ...) and its items.
struct Scanned {
    meta: u128,
    items: Vec<Item>,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn peek(&mut self) -> Option<u8> {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        self.at += usize::from(found);
        found
    }

    /// A string starting here; its span, quotes included.
    fn string(&mut self) -> Option<(usize, usize)> {
        let start = self.at;
        let mut at = start + 1;
        loop {
            at += memchr::memchr2(b'"', b'\\', self.bytes.get(at..)?)?;
            if self.bytes[at] == b'"' {
                self.at = at + 1;
                return Some((start, self.at));
            }
            at += 2;
        }
    }

    /// Skips any value; its span. Only the structure is followed: what the
    /// span holds is decoded (changed items) or known to be what an accepted
    /// document held (kept items, equal bytes).
    fn value(&mut self) -> Option<(usize, usize)> {
        let start = match self.peek()? {
            b'"' => return self.string(),
            b'{' | b'[' => self.at,
            _ => {
                let start = self.at;
                while let Some(b'-' | b'+' | b'.' | b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z') = self.bytes.get(self.at) {
                    self.at += 1;
                }
                return (self.at > start).then_some((start, self.at));
            }
        };
        let mut depth = 0usize;
        loop {
            match *self.bytes.get(self.at)? {
                b'"' => {
                    self.string()?;
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        self.at += 1;
                        return Some((start, self.at));
                    }
                }
                _ => {}
            }
            self.at += 1;
        }
    }

    /// Walks an object's members: `each` gets the key (without quotes, no
    /// escapes allowed) and must take the value.
    fn members(&mut self, mut each: impl FnMut(&mut Self, (usize, usize)) -> Option<()>) -> Option<()> {
        if !self.eat(b'{') {
            return None;
        }
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            let (start, end) = self.string()?;
            let key = (start + 1, end - 1);
            if self.bytes[key.0..key.1].contains(&b'\\') || !self.eat(b':') {
                return None;
            }
            each(self, key)?;
            if self.eat(b',') {
                continue;
            }
            return self.eat(b'}').then_some(());
        }
    }
}

/// What a scan found of a top-level member (see [`top_level_member`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Member {
    /// The object has no such member.
    Absent,
    /// Its value's byte span (the last one when repeated).
    At(usize, usize),
    /// The bytes are not an object this scan can follow (escaped keys,
    /// malformed JSON): decode them to know.
    Unclear,
}

/// Where the top-level member `name` of a JSON object sits, found without
/// decoding the rest.
pub fn top_level_member(bytes: &[u8], name: &str) -> Member {
    let mut cursor = Cursor { bytes, at: 0 };
    let mut found = Member::Absent;
    let scanned = cursor.members(|cursor, (start, end)| {
        let (value_start, value_end) = cursor.value()?;
        if &bytes[start..end] == name.as_bytes() {
            found = Member::At(value_start, value_end);
        }
        Some(())
    });
    match (scanned, cursor.peek()) {
        (Some(()), None) => found,
        _ => Member::Unclear,
    }
}

/// Scans a JSON document; `None` for anything the whole parse must see
/// (not an object, a repeated entity list, nested lists out of the order
/// `collect` takes them, escaped keys, ...). With a memo, an item whose
/// bytes (nested lists included) are those of the memorized item expected
/// at its place is taken whole from the memo, subtree and all, unread.
fn scan(bytes: &[u8], memo: Option<&Memo>) -> Option<Scanned> {
    let scanner = Scanner { bytes, memo };
    let mut cursor = Cursor { bytes, at: 0 };
    let mut meta = Fp::new(TAG_META);
    // Lists are scanned in place; `collect` takes them in `EntityKind::ALL`
    // order, so lists written in another order are moved after.
    let mut items: Vec<Item> = Vec::with_capacity(memo.map_or(0, Memo::items));
    let mut lists: Vec<(usize, usize, usize)> = Vec::new();
    cursor.members(|cursor, (start, end)| {
        let key = std::str::from_utf8(&bytes[start..end]).ok()?;
        match EntityKind::ALL.iter().position(|kind| kind.table() == key) {
            Some(at) if lists.iter().all(|(kind, _, _)| *kind != at) => {
                let first = items.len();
                scanner.list(cursor, EntityKind::ALL[at], None, None, &mut items)?;
                lists.push((at, first, items.len()));
                Some(())
            }
            Some(_) => None,
            None => {
                let (value_start, value_end) = cursor.value()?;
                meta.text(key).bytes(&bytes[value_start..value_end]);
                Some(())
            }
        }
    })?;
    if cursor.peek().is_some() {
        return None;
    }
    if !lists.windows(2).all(|pair| pair[0].0 < pair[1].0) {
        lists.sort_by_key(|(kind, _, _)| *kind);
        let mut scanned: Vec<Option<Item>> = items.into_iter().map(Some).collect();
        let mut ordered = Vec::with_capacity(scanned.len());
        for (_, first, end) in lists {
            let offset = ordered.len();
            for slot in &mut scanned[first..end] {
                let mut item = slot.take()?;
                item.parent = item.parent.map(|parent| parent - first + offset);
                ordered.push(item);
            }
        }
        items = ordered;
    }
    for at in 0..items.len() {
        if items[at].kept.is_none() {
            items[at].fp = match items[at].parent {
                Some(parent) => chain(items[at].own, items[parent].fp),
                None => items[at].own,
            };
        }
    }
    for at in (0..items.len()).rev() {
        if let Some(parent) = items[at].parent {
            items[parent].size += items[at].size;
        }
    }
    Some(Scanned {
        meta: meta.finish(),
        items,
    })
}

struct Scanner<'a> {
    bytes: &'a [u8],
    memo: Option<&'a Memo>,
}

/// What reading one item found.
enum Read {
    Done,
    /// Its nested items were taken from the memo as the children of a fact
    /// the item turned out not to be: read it again without the memo.
    Mistaken,
}

impl Scanner<'_> {
    /// A list of `kind` items (or `null`) at the cursor, nested under
    /// `parent`, which is expected to be the memorized fact `parent_fact`
    /// (top level: `None` for both). Returns whether it took an item from
    /// the memo.
    fn list(
        &self,
        cursor: &mut Cursor<'_>,
        kind: EntityKind,
        parent: Option<usize>,
        parent_fact: Option<u32>,
        items: &mut Vec<Item>,
    ) -> Option<bool> {
        match cursor.peek()? {
            b'[' => cursor.at += 1,
            _ => {
                let (start, end) = cursor.value()?;
                return (&cursor.bytes[start..end] == b"null").then_some(false);
            }
        }
        let mut expect = match (self.memo, parent, parent_fact) {
            (Some(memo), None, _) => memo.first_top(kind),
            (Some(memo), Some(_), Some(fact)) => memo.first_child(fact, kind),
            _ => None,
        };
        let mut took = false;
        if cursor.eat(b']') {
            return Some(took);
        }
        loop {
            let taken = expect.and_then(|fact| self.take(cursor, fact, kind, parent, parent_fact, items));
            match (taken, self.memo) {
                (Some(next), _) => {
                    took = true;
                    expect = Some(next);
                }
                (None, Some(memo)) => {
                    let (at, start) = (items.len(), cursor.peek().map(|_| cursor.at)?);
                    if let Read::Mistaken = self.item(cursor, kind, parent, expect, items)? {
                        items.truncate(at);
                        cursor.at = start;
                        self.item(cursor, kind, parent, None, items)?;
                    }
                    expect = memo.after(&items[at], parent_fact, expect);
                }
                (None, None) => {
                    self.item(cursor, kind, parent, None, items)?;
                }
            }
            if cursor.eat(b',') {
                continue;
            }
            return cursor.eat(b']').then_some(took);
        }
    }

    /// Takes memorized fact `fact` and its subtree for the item at the
    /// cursor when the item's bytes are the fact's; the fact expected next.
    fn take(
        &self,
        cursor: &mut Cursor<'_>,
        fact: u32,
        kind: EntityKind,
        parent: Option<usize>,
        parent_fact: Option<u32>,
        items: &mut Vec<Item>,
    ) -> Option<u32> {
        let memo = self.memo?;
        let found = memo.facts.get(fact as usize)?;
        if found.kind != kind || found.parent != parent_fact.unwrap_or(NONE) {
            return None;
        }
        cursor.peek()?;
        let start = cursor.at;
        let end = start.checked_add(found.len as usize)?;
        if full_fp(kind, self.bytes.get(start..end)?) != found.full {
            return None;
        }
        cursor.at = end;
        let base = items.len();
        let first = fact as usize;
        for (at, taken) in memo.facts[first..first + found.size as usize].iter().enumerate() {
            let parent = match at {
                0 => parent,
                _ => Some(base + (taken.parent - fact) as usize),
            };
            items.push(Item {
                kind: taken.kind,
                parent,
                own: taken.own,
                fp: taken.fp,
                full: taken.full,
                start: end,
                end,
                len: taken.len,
                size: 1,
                kept: Some(fact + at as u32),
            });
        }
        Some(fact + found.size)
    }

    /// Reads one item at the cursor, expected to be memorized fact
    /// `expect` (its nested lists may then be taken from the memo).
    fn item(
        &self,
        cursor: &mut Cursor<'_>,
        kind: EntityKind,
        parent: Option<usize>,
        expect: Option<u32>,
        items: &mut Vec<Item>,
    ) -> Option<Read> {
        let bytes = cursor.bytes;
        let start = match cursor.peek()? {
            b'"' if kind == EntityKind::Snis && parent.is_some() => {
                let (start, end) = cursor.string()?;
                let own = Fp::new(TAG_NAME).kind(kind).bytes(&bytes[start..end]).finish();
                items.push(Item {
                    kind,
                    parent,
                    own,
                    fp: 0,
                    full: full_fp(kind, &bytes[start..end]),
                    start,
                    end,
                    len: (end - start) as u32,
                    size: 1,
                    kept: None,
                });
                return Some(Read::Done);
            }
            b'{' => cursor.at,
            _ => return None,
        };
        let at = items.len();
        items.push(Item {
            kind,
            parent,
            own: 0,
            fp: 0,
            full: 0,
            start,
            end: start,
            len: 0,
            size: 1,
            kept: None,
        });
        let children = nested_children(kind);
        let mut next_child = 0;
        let mut took = false;
        // The item's own bytes are everything but its nested lists' values:
        // one segment before, between and after them.
        let mut own = Fp::new(TAG_RECORD);
        own.kind(kind);
        let mut own_from = start;
        cursor.members(|cursor, (key_start, key_end)| {
            let key = &bytes[key_start..key_end];
            match children.iter().position(|(name, _, _)| name.as_bytes() == key) {
                // `collect` takes nested lists in `nested_children` order: a
                // document with another order is left to it.
                Some(child) if child >= next_child => {
                    next_child = child + 1;
                    cursor.peek()?;
                    own.bytes(&bytes[own_from..cursor.at]);
                    took |= self.list(cursor, children[child].1, Some(at), expect, items)?;
                    own_from = cursor.at;
                    Some(())
                }
                Some(_) => None,
                None => cursor.value().map(drop),
            }
        })?;
        own.bytes(&bytes[own_from..cursor.at]);
        let own = own.finish();
        let item = &mut items[at];
        item.own = own;
        item.end = cursor.at;
        item.len = u32::try_from(cursor.at - start).ok()?;
        item.full = full_fp(kind, &bytes[start..cursor.at]);
        // Nested items taken from the memo belong to `expect`: this item
        // must be that fact's own bytes (its parent is checked likewise).
        let mistaken = took
            && expect
                .and_then(|fact| self.memo?.facts.get(fact as usize))
                .map(|fact| fact.own)
                != Some(own);
        Some(if mistaken { Read::Mistaken } else { Read::Done })
    }
}

// ---------------------------------------------------------------------------
// Recording a memo while parsing a whole document.

/// Facts gathered while the whole parse runs, turned into a memo once it
/// has succeeded. Pending entities and scanned items match one to one.
pub(super) struct Recorder {
    scanned: Scanned,
    transform: bool,
    flavor: RouterFlavor,
    /// Per pending entity: its given-key claim and reference claims.
    before: Vec<(Option<u128>, Vec<u128>)>,
}

impl Recorder {
    /// Starts recording a JSON document whose items `pending` took.
    pub fn start(bytes: &[u8], pending: &[Pending], transform: bool, flavor: RouterFlavor) -> Option<Recorder> {
        let scanned = scan(bytes, None)?;
        let aligned = scanned.items.len() == pending.len()
            && scanned
                .items
                .iter()
                .zip(pending)
                .all(|(item, entity)| item.kind == entity.kind && item.parent == entity.parent);
        aligned.then(|| Recorder {
            scanned,
            transform,
            flavor,
            before: Vec::new(),
        })
    }

    /// Reads the references as written (before they are resolved).
    pub fn references(&mut self, pending: &[Pending]) {
        self.before = pending
            .iter()
            .map(|entity| {
                let link = entity
                    .parent
                    .and_then(|parent| nested_link(entity.kind, Some((pending[parent].kind, Uuid::nil()))));
                let key = given_key(entity.kind, &entity.input).map(|(_, key)| key_claim(entity.kind, key));
                let mut refs = Vec::new();
                reference_claims(entity.kind, &entity.input, link.map(|(field, _)| field), &mut refs);
                (key, refs)
            })
            .collect();
    }

    /// The memo of the accepted document.
    pub fn finish(self, pending: &[Pending], ids: &[Uuid], seeded: &[Seeded], entities: &[Option<Entity>]) -> Memo {
        let mut seeds = vec![(0u128, 0u32); pending.len()];
        for seed in seeded {
            seeds[seed.at] = (seed_hash(&seed.seed), seed.count);
        }
        let mut builder = Builder::with_capacity(pending.len(), self.scanned.meta, self.transform, self.flavor);
        let mut claims = Vec::new();
        for (at, item) in self.scanned.items.iter().enumerate() {
            claims.clear();
            let (key, refs) = &self.before[at];
            claims.extend(key);
            if let Some(entity) = &entities[at] {
                entity_claims(entity, pending[at].key_given, &mut claims);
            }
            builder.push(Fact::of(item, ids[at], seeds[at]), &claims, refs);
        }
        builder.finish()
    }
}

// ---------------------------------------------------------------------------
// Parsing a document as changes to the memorized one.

/// Where an item of the new document comes from.
#[derive(Clone, Copy)]
enum Source {
    /// The memorized fact at this index: the same bytes.
    Kept(u32),
    /// The fresh item at this index.
    Fresh(u32),
}

/// A new or edited item, validated.
struct Fresh {
    fact: Fact,
    claims: Vec<u128>,
    refs: Vec<u128>,
}

/// How the new document maps onto the memorized one: what
/// [`Memo::advance`] needs once the changes are live.
pub struct Plan {
    /// The new document's items, where they sit.
    items: Vec<Item>,
    sources: Vec<Source>,
    fresh: Vec<Fresh>,
}

/// A document read as changes to the memorized configuration.
pub struct Changes {
    /// The new and edited entities, validated (timestamps generated where
    /// the document has none; the running ones are kept for entities that
    /// exist).
    pub part: Config,
    /// Entities the document no longer holds.
    pub gone: Vec<(EntityKind, Uuid)>,
    pub plan: Plan,
}

/// Owners of key and id claims among the document's items.
struct Owners(HashMap<u128, Uuid, BuildHasherDefault<Prehashed>>);

impl Lookup for Owners {
    fn find_key(&self, kind: EntityKind, key: &str) -> Option<Uuid> {
        self.0.get(&key_claim(kind, key)).copied()
    }

    fn has_id(&self, kind: EntityKind, id: Uuid) -> bool {
        self.0.contains_key(&id_claim(kind, id))
    }
}

/// A new or edited item on its way through the pipeline.
struct Pass {
    at: usize,
    kind: EntityKind,
    input: Map<String, Value>,
    id: Uuid,
    seed: (u128, u32),
    key: Option<u128>,
    refs: Vec<u128>,
}

/// Reads `bytes` (a JSON document) as changes to the configuration `memo`
/// describes, when it is that configuration with a few items new, edited
/// or removed. `None`: the whole parse must decide (it may also find the
/// document invalid).
pub fn parse_changes(bytes: &[u8], now: i64, flavor: RouterFlavor, memo: &Memo) -> Option<Changes> {
    if flavor != memo.flavor {
        return None;
    }
    std::str::from_utf8(bytes).ok()?;
    let scanned = scan(bytes, Some(memo))?;
    if scanned.meta != memo.meta {
        return None;
    }
    let items = scanned.items;
    let mut kept = vec![false; memo.facts.len()];
    let mut hits: Vec<Option<u32>> = Vec::with_capacity(items.len());
    let mut changed = Vec::new();
    for (at, item) in items.iter().enumerate() {
        match item.kept.or_else(|| memo.by_fp.get(&item.fp).copied()) {
            Some(AMBIGUOUS) => return None,
            Some(fact) if !kept[fact as usize] => {
                kept[fact as usize] = true;
                hits.push(Some(fact));
            }
            Some(_) => return None,
            None => {
                hits.push(None);
                changed.push(at);
            }
        }
    }
    let removed: Vec<usize> = (0..memo.facts.len()).filter(|at| !kept[*at]).collect();
    let size = items.len().max(memo.facts.len()).max(1);
    if changed.len().max(removed.len()) * CHANGE_SHARE > size {
        return None;
    }

    // Ids, parents first; content-derived ids must not shift for kept items.
    let mut passes: Vec<Pass> = Vec::with_capacity(changed.len());
    let mut fresh_at: HashMap<usize, usize> = HashMap::with_capacity(changed.len());
    let mut seeds_touched: HashSet<u128> = removed
        .iter()
        .map(|at| memo.facts[*at].seed)
        .filter(|seed| *seed != 0)
        .collect();
    let mut fresh_seed_counts: HashMap<u128, u32> = HashMap::new();
    let id_of = |at: usize, passes: &[Pass], fresh_at: &HashMap<usize, usize>| match hits[at] {
        Some(fact) => memo.facts[fact as usize].id,
        None => passes[fresh_at[&at]].id,
    };
    for &at in &changed {
        let item = &items[at];
        let value: Value = serde_json::from_slice(&bytes[item.start..item.end]).ok()?;
        let input = own_fields(item.kind, value, item.parent.is_some())?;
        let parent = item.parent.map(|parent| id_of(parent, &passes, &fresh_at));
        let (id, seed) = match id_from(item.kind, &input, parent) {
            IdFrom::Given(id) | IdFrom::Key(id) => (id, (0, 0)),
            IdFrom::Content(seed) => {
                let hash = seed_hash(&seed);
                seeds_touched.insert(hash);
                let count = fresh_seed_counts.entry(hash).or_insert(0);
                *count += 1;
                (content_id(item.kind, &seed, *count), (hash, *count))
            }
        };
        let link = item
            .parent
            .and_then(|parent| nested_link(item.kind, Some((items[parent].kind, Uuid::nil()))));
        let key = given_key(item.kind, &input).map(|(_, key)| key_claim(item.kind, key));
        let mut refs = Vec::new();
        reference_claims(item.kind, &input, link.map(|(field, _)| field), &mut refs);
        fresh_at.insert(at, passes.len());
        passes.push(Pass {
            at,
            kind: item.kind,
            input,
            id,
            seed,
            key,
            refs,
        });
    }
    if memo.seeded || !seeds_touched.is_empty() {
        let mut counts: HashMap<u128, u32> = HashMap::new();
        for fact in hits.iter().flatten().map(|at| &memo.facts[*at as usize]) {
            if fact.seed == 0 {
                continue;
            }
            if seeds_touched.contains(&fact.seed) {
                return None;
            }
            let count = counts.entry(fact.seed).or_insert(0);
            *count += 1;
            if *count != fact.count {
                return None;
            }
        }
    }

    // Who owns the keys and ids the fresh items refer to.
    let mut owners = Owners(HashMap::default());
    for pass in &passes {
        owners.0.entry(id_claim(pass.kind, pass.id)).or_insert(pass.id);
        if let Some(key) = pass.key {
            owners.0.entry(key).or_insert(pass.id);
        }
    }
    let wanted: Claims = passes.iter().flat_map(|pass| pass.refs.iter().copied()).collect();
    if !wanted.is_empty() {
        for fact_at in hits.iter().flatten().map(|at| *at as usize) {
            let fact = &memo.facts[fact_at];
            let id = id_claim(fact.kind, fact.id);
            if wanted.contains(&id) {
                owners.0.entry(id).or_insert(fact.id);
            }
            for claim in memo.claims_of(fact_at) {
                if wanted.contains(claim) {
                    owners.0.entry(*claim).or_insert(fact.id);
                }
            }
        }
    }

    // Resolve and validate the fresh items; collect their claims.
    let mut fresh_claims = Claims::default();
    let mut fresh = Vec::with_capacity(passes.len());
    let mut entities = Vec::with_capacity(passes.len());
    for pass in passes.iter() {
        let item = &items[pass.at];
        let mut input = pass.input.clone();
        let parent = item
            .parent
            .map(|parent| (items[parent].kind, id_of(parent, &passes, &fresh_at)));
        let link = nested_link(pass.kind, parent);
        for (field, target) in foreign_fields(pass.kind) {
            if let Some((link_field, parent_id)) = link {
                if link_field == field {
                    input.insert(field.into(), json!({ "id": parent_id }));
                    continue;
                }
            }
            let Some(value) = input.get(field).filter(|v| !v.is_null()) else {
                continue;
            };
            if let Some(id) = resolve_reference(&owners, target, value).ok()? {
                input.insert(field.into(), json!({ "id": id }));
            }
        }
        let key_given = endpoint_key(pass.kind).is_some_and(|key| input.contains_key(key));
        let given = (memo.transform && transforms_on_write(pass.kind)).then(|| input.clone());
        let mut entity = validate_input(pass.kind, input, pass.id, now, flavor).ok()?;
        if let Some(given) = &given {
            transform_on_write(&mut entity, given);
        }
        let mut claims: Vec<u128> = pass.key.into_iter().collect();
        entity_claims(&entity, key_given, &mut claims);
        for claim in claims.iter().copied().chain([id_claim(pass.kind, pass.id)]) {
            if !fresh_claims.insert(claim) {
                return None;
            }
        }
        fresh.push(Fresh {
            fact: Fact::of(item, pass.id, pass.seed),
            claims,
            refs: pass.refs.clone(),
        });
        entities.push(Some(entity));
    }

    // Kept items: none may share a claim with a fresh one, and none may
    // refer to a key or id whose owner went away (or changed).
    let fresh_ids: HashSet<(EntityKind, Uuid)> = passes.iter().map(|pass| (pass.kind, pass.id)).collect();
    let mut released = Claims::default();
    for &at in &removed {
        let fact = &memo.facts[at];
        if !fresh_ids.contains(&(fact.kind, fact.id)) {
            released.insert(id_claim(fact.kind, fact.id));
        }
        for claim in memo.claims_of(at) {
            if owners.0.get(claim) != Some(&fact.id) {
                released.insert(*claim);
            }
        }
    }
    for fact_at in hits.iter().flatten().map(|at| *at as usize) {
        let fact = &memo.facts[fact_at];
        if !fresh_claims.is_empty()
            && (fresh_claims.contains(&id_claim(fact.kind, fact.id))
                || memo.claims_of(fact_at).iter().any(|claim| fresh_claims.contains(claim)))
        {
            return None;
        }
        if !released.is_empty() && memo.refs_of(fact_at).iter().any(|claim| released.contains(claim)) {
            return None;
        }
    }

    let gone = removed
        .iter()
        .map(|at| &memo.facts[*at])
        .filter(|fact| !fresh_ids.contains(&(fact.kind, fact.id)))
        .map(|fact| (fact.kind, fact.id))
        .collect();
    let sources = hits
        .iter()
        .enumerate()
        .map(|(at, hit)| match hit {
            Some(fact) => Source::Kept(*fact),
            None => Source::Fresh(fresh_at[&at] as u32),
        })
        .collect();
    Some(Changes {
        part: assemble(entities),
        gone,
        plan: Plan { items, sources, fresh },
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn document(url: &str, paths: &[&str]) -> Vec<u8> {
        let routes: Vec<Value> = paths
            .iter()
            .map(|path| json!({"name": format!("r{}", &path[1..]), "paths": [path], "plugins": [{"name": "key-auth"}]}))
            .collect();
        let consumers: Vec<Value> = (0..5).map(|n| json!({"username": format!("u{n}")})).collect();
        serde_json::to_vec(&json!({
            "_format_version": "3.0",
            "services": [{"name": "s", "url": url, "routes": routes}, {"name": "t", "url": url}],
            "consumers": consumers
        }))
        .unwrap()
    }

    fn memo_of(bytes: &[u8]) -> Memo {
        match super::super::parse_declarative_memo(
            bytes,
            super::super::DeclarativeFormat::Json,
            0,
            RouterFlavor::Expressions,
            None,
        ) {
            Ok(super::super::Parsed::Whole(_, Some(memo))) => memo,
            _ => panic!("not memorized"),
        }
    }

    /// (items taken from the memo unread, items read).
    fn taken(bytes: &[u8], memo: &Memo) -> (usize, usize) {
        let items = scan(bytes, Some(memo)).expect("scanned").items;
        let taken = items.iter().filter(|item| item.kept.is_some()).count();
        (taken, items.len() - taken)
    }

    const PATHS: [&str; 6] = ["/a", "/b", "/c", "/d", "/e", "/f"];

    #[test]
    fn unchanged_subtrees_are_taken_unread() {
        let base = document("http://x", &PATHS);
        let memo = memo_of(&base);
        // The same document: each top-level item whole (the services with
        // their routes and plugins, the consumers).
        assert_eq!(taken(&base, &memo), (memo.items(), 0));
        // One route edited: its service and that route (with its plugin)
        // are read; the other routes are taken.
        let mut paths = PATHS;
        paths[2] = "/changed";
        assert_eq!(taken(&document("http://x", &paths), &memo), (memo.items() - 3, 3));
        // A route inserted: the scan finds its place again after it.
        let inserted = ["/a", "/b", "/new", "/c", "/d", "/e", "/f"];
        let (kept, read) = taken(&document("http://x", &inserted), &memo);
        assert!(read <= 3 + 2, "read {read}, kept {kept}");
    }

    #[test]
    fn nested_items_are_not_taken_under_an_edited_parent() {
        let memo = memo_of(&document("http://x", &PATHS));
        // The service's own bytes changed: its routes' bytes did not, but
        // they are nested under another item now and must be read.
        let (kept, read) = taken(&document("http://y", &PATHS), &memo);
        assert_eq!(read, 1 + 2 * PATHS.len() + 1, "kept {kept}");
    }
}
