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
use scan::{scan, Scanned};
pub use scan::{top_level_member, Member};

mod scan;
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
mod tests;
