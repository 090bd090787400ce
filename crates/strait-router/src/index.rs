//! The route index: which matchers a request could satisfy, without visiting
//! the others.
//!
//! ```text
//! host:  exact (hash) | suffix (hash per length) | prefix (hash per length) | any
//!          └─> PathIndex: path prefix (hash per length) | any path
//!                └─> candidates: matchers sorted by rank
//! ```
//!
//! A request collects the candidate lists its host and path hit (a handful)
//! and walks them merged in rank order, evaluating each candidate's full
//! condition until one passes. Regex paths are keyed by their literal prefix
//! (`~/users/\d+` sits under `/users/`); regexes without one sit in "any
//! path". Every level is a [`CowMap`], so a change copies only what it touches.

use std::collections::HashSet;
use std::sync::Arc;

use crate::analysis::{HostKey, IndexKeys};
use crate::cow_map::CowMap;
use crate::matcher::{Hot, Matcher};

/// Matchers sorted by rank (best first). Most lists hold one matcher, kept
/// without an allocation of its own, together with a copy of what a request
/// reads of it ([`Hot`]): a lone candidate whose condition is its key is
/// matched from the table slot alone, without reading the matcher (with
/// many routes, a cache miss). Longer lists are a `Vec` behind an `Arc`,
/// shared between router versions and changed in place when not shared
/// (bulk build).
#[derive(Clone, Default)]
pub(crate) enum Candidates {
    #[default]
    Empty,
    One(Arc<Matcher>, Hot),
    Many(Arc<Vec<Arc<Matcher>>>),
}
impl Candidates {
    fn one(matcher: &Arc<Matcher>) -> Candidates {
        Candidates::One(matcher.clone(), matcher.hot())
    }

    pub(crate) fn as_slice(&self) -> &[Arc<Matcher>] {
        match self {
            Candidates::Empty => &[],
            Candidates::One(matcher, _) => std::slice::from_ref(matcher),
            Candidates::Many(list) => list,
        }
    }

    fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    /// Insert by rank.
    fn insert(&mut self, matcher: &Arc<Matcher>) {
        match self {
            Candidates::Many(list) => {
                let at = list.partition_point(|m| m.rank < matcher.rank);
                Arc::make_mut(list).insert(at, matcher.clone());
            }
            _ => {
                if !self.push(matcher) {
                    self.sort();
                }
            }
        }
    }

    /// Append, out of order or not; `false` when the list is out of order
    /// now (the bulk build appends, then sorts the lists this reports).
    fn push(&mut self, matcher: &Arc<Matcher>) -> bool {
        match self {
            Candidates::Empty => {
                *self = Candidates::one(matcher);
                true
            }
            Candidates::One(first, _) => {
                let in_order = first.rank < matcher.rank;
                *self = Candidates::Many(Arc::new(vec![first.clone(), matcher.clone()]));
                in_order
            }
            Candidates::Many(list) => {
                let in_order = list.last().is_none_or(|last| last.rank < matcher.rank);
                Arc::make_mut(list).push(matcher.clone());
                in_order
            }
        }
    }

    fn sort(&mut self) {
        if let Candidates::Many(list) = self {
            Arc::make_mut(list).sort_unstable_by_key(|m| m.rank);
        }
    }

    fn remove(&mut self, matcher: &Arc<Matcher>) {
        match self {
            Candidates::One(only, _) if Arc::ptr_eq(only, matcher) => *self = Candidates::Empty,
            Candidates::Many(list) if list.iter().any(|m| Arc::ptr_eq(m, matcher)) => {
                let list = Arc::make_mut(list);
                list.retain(|m| !Arc::ptr_eq(m, matcher));
                match list.as_slice() {
                    [] => *self = Candidates::Empty,
                    [only] => *self = Candidates::one(only),
                    _ => {}
                }
            }
            _ => {}
        }
    }
}

/// A map keyed by strings that is searched with every prefix (or suffix) of
/// a request value. Up to [`SMALL`] entries sit in a short list that is
/// scanned (most hosts have one or two path keys: no hash table, no
/// allocation beyond the list); past that, a [`CowMap`] where only the key
/// lengths present are tried.
#[derive(Clone, Default)]
pub(crate) struct LengthMap<V> {
    small: Vec<(Arc<str>, V)>,
    large: Option<Box<Large<V>>>,
}

#[derive(Clone, Default)]
struct Large<V> {
    map: CowMap<AffixKey, V>,
    /// (length, number of keys of that length) in `map`, sorted by length.
    lengths: Vec<(usize, usize)>,
}

/// Bytes of a key a table slot holds itself.
const INLINE_KEY: usize = 22;

/// A [`LengthMap`] table key: short keys (most paths and hosts) sit in the
/// slot itself, so a lookup compares them without following a pointer (with
/// many routes, that pointer's target is a cache miss on every request).
/// Hashed and compared as bytes, as lookups are.
#[derive(Clone)]
enum AffixKey {
    Inline { len: u8, bytes: [u8; INLINE_KEY] },
    Shared(Arc<str>),
}

impl AffixKey {
    fn new(key: &Arc<str>) -> AffixKey {
        match key.len() {
            len @ ..=INLINE_KEY => {
                let mut bytes = [0; INLINE_KEY];
                bytes[..len].copy_from_slice(key.as_bytes());
                AffixKey::Inline { len: len as u8, bytes }
            }
            _ => AffixKey::Shared(key.clone()),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            AffixKey::Inline { len, bytes } => &bytes[..usize::from(*len)],
            AffixKey::Shared(key) => key.as_bytes(),
        }
    }
}

impl PartialEq for AffixKey {
    fn eq(&self, other: &AffixKey) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for AffixKey {}

impl std::hash::Hash for AffixKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl std::borrow::Borrow<[u8]> for AffixKey {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// Entries a [`LengthMap`] keeps in its list before it moves to a table.
const SMALL: usize = 4;

fn count_length(lengths: &mut Vec<(usize, usize)>, len: usize) {
    match lengths.binary_search_by_key(&len, |(l, _)| *l) {
        Ok(at) => lengths[at].1 += 1,
        Err(at) => lengths.insert(at, (len, 1)),
    }
}

impl<V: Clone + Default> Large<V> {
    fn from_small(small: Vec<(Arc<str>, V)>) -> Large<V> {
        let mut large = Large::default();
        large.map.reserve(small.len() + 1);
        for (key, value) in small {
            count_length(&mut large.lengths, key.len());
            large.map.insert(AffixKey::new(&key), value);
        }
        large
    }

    fn entry(&mut self, key: &Arc<str>) -> &mut V {
        let lengths = &mut self.lengths;
        self.map.get_or_insert_with(&AffixKey::new(key), || {
            count_length(lengths, key.len());
            V::default()
        })
    }

    fn remove(&mut self, key: &str) {
        if self.map.remove(key.as_bytes()).is_none() {
            return;
        }
        if let Ok(at) = self.lengths.binary_search_by_key(&key.len(), |(len, _)| *len) {
            self.lengths[at].1 -= 1;
            if self.lengths[at].1 == 0 {
                self.lengths.remove(at);
            }
        }
    }
}

impl<V: Clone + Default> LengthMap<V> {
    fn is_empty(&self) -> bool {
        self.small.is_empty() && self.large.as_ref().is_none_or(|large| large.map.is_empty())
    }

    fn entry(&mut self, key: &Arc<str>) -> &mut V {
        if self.large.is_none() {
            if let Some(at) = self.small.iter().position(|(k, _)| k == key) {
                return &mut self.small[at].1;
            }
            if self.small.len() < SMALL {
                // Most lists never grow past one entry.
                self.small.reserve_exact(if self.small.is_empty() {
                    1
                } else {
                    SMALL - self.small.len()
                });
                self.small.push((key.clone(), V::default()));
                let last = self.small.len() - 1;
                return &mut self.small[last].1;
            }
        }
        let small = &mut self.small;
        let large = self
            .large
            .get_or_insert_with(|| Box::new(Large::from_small(std::mem::take(small))));
        large.entry(key)
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        match self.small.iter_mut().find(|(k, _)| k.as_ref() == key) {
            Some((_, value)) => Some(value),
            None => self.large.as_mut()?.map.get_mut(key.as_bytes()),
        }
    }

    fn remove(&mut self, key: &str) {
        if let Some(at) = self.small.iter().position(|(k, _)| k.as_ref() == key) {
            self.small.swap_remove(at);
        } else if let Some(large) = &mut self.large {
            large.remove(key);
        }
    }

    /// The table slots a search for keys that are prefixes of `text` reads
    /// first (see [`CowMap::first_slot`]); none from the short list, which
    /// sits beside the map.
    fn first_slots_of_prefixes(&self, text: &[u8], found: &mut impl FnMut(*const u8, usize)) {
        let Some(large) = &self.large else {
            return;
        };
        for &(len, _) in large.lengths.iter() {
            let Some(key) = text.get(..len) else {
                break;
            };
            if let Some((slot, size)) = large.map.first_slot(key) {
                found(slot, size);
            }
        }
    }

    /// Values whose key is a prefix of `text` (in no particular order).
    fn prefixes_of<'s>(&'s self, text: &str, found: impl FnMut(&'s V)) {
        self.affixes_of(text, Side::Start, found);
    }

    /// Values whose key is a suffix of `text` (in no particular order).
    fn suffixes_of<'s>(&'s self, text: &str, found: impl FnMut(&'s V)) {
        self.affixes_of(text, Side::End, found);
    }

    fn affixes_of<'s>(&'s self, text: &str, side: Side, mut found: impl FnMut(&'s V)) {
        for (key, value) in &self.small {
            if side.has(text, key) {
                found(value);
            }
        }
        let Some(large) = &self.large else {
            return;
        };
        for &(len, _) in large.lengths.iter() {
            if len > text.len() {
                break;
            }
            if let Some(value) = side.cut(text, len).and_then(|key| large.map.get(key.as_bytes())) {
                found(value);
            }
        }
    }
}

/// Which end of a value a [`LengthMap`] key is compared with.
#[derive(Clone, Copy)]
enum Side {
    Start,
    End,
}

impl Side {
    fn has(self, text: &str, key: &str) -> bool {
        match self {
            Side::Start => text.starts_with(key),
            Side::End => text.ends_with(key),
        }
    }

    /// The first (last) `len` bytes of `text`, if that is a char boundary.
    fn cut(self, text: &str, len: usize) -> Option<&str> {
        match self {
            Side::Start => text.get(..len),
            Side::End => text.get(text.len().checked_sub(len)?..),
        }
    }
}

/// The path level under one host key.
#[derive(Clone, Default)]
pub(crate) struct PathIndex {
    prefixes: LengthMap<Candidates>,
    any_path: Candidates,
}

impl PathIndex {
    fn is_empty(&self) -> bool {
        self.prefixes.is_empty() && self.any_path.is_empty()
    }

    fn list(&mut self, path: Option<&Arc<str>>) -> &mut Candidates {
        match path {
            Some(prefix) => self.prefixes.entry(prefix),
            None => &mut self.any_path,
        }
    }

    fn existing_list(&mut self, path: Option<&Arc<str>>) -> Option<&mut Candidates> {
        match path {
            Some(prefix) => self.prefixes.get_mut(prefix),
            None => Some(&mut self.any_path),
        }
    }

    fn remove(&mut self, path: Option<&Arc<str>>, matcher: &Arc<Matcher>) {
        let Some(list) = self.existing_list(path) else {
            return;
        };
        list.remove(matcher);
        if let (true, Some(prefix)) = (list.is_empty(), path) {
            self.prefixes.remove(prefix);
        }
    }

    fn collect<'s>(&'s self, path: &str, out: &mut CandidateLists<'s>) {
        self.prefixes.prefixes_of(path, |list| out.push(list));
        out.push(&self.any_path);
    }
}

/// The whole index: host level, then path level.
#[derive(Clone, Default)]
pub(crate) struct Index {
    exact: CowMap<Arc<str>, Arc<PathIndex>>,
    suffix: LengthMap<Arc<PathIndex>>,
    prefix: LengthMap<Arc<PathIndex>>,
    any_host: Arc<PathIndex>,
}

/// A (host key, path prefix) pair; `None` is "any".
type Slot<'k> = (Option<&'k HostKey>, Option<&'k Arc<str>>);

/// `Some(key)` for each key, or a single `None` ("any") when unkeyed.
fn keys_or_any<K>(keys: Option<&[K]>) -> impl Iterator<Item = Option<&K>> + Clone {
    keys.into_iter()
        .flatten()
        .map(Some)
        .chain(keys.is_none().then_some(None))
}

/// Every slot a matcher with these keys occupies.
fn slots(keys: &IndexKeys) -> impl Iterator<Item = Slot<'_>> {
    let paths = keys_or_any(keys.paths.as_deref());
    keys_or_any(keys.hosts.as_deref()).flat_map(move |host| paths.clone().map(move |path| (host, path)))
}

/// Slots whose list a bulk build appended to out of rank order.
type Unsorted = HashSet<(Option<HostKey>, Option<Arc<str>>), foldhash::fast::RandomState>;

impl Index {
    /// Insert by rank. The keys are computed from the condition, here and
    /// in [`Index::remove`], rather than kept on every matcher.
    pub(crate) fn insert(&mut self, matcher: &Arc<Matcher>) {
        let keys = IndexKeys::of(&matcher.cond);
        for (host, path) in slots(&keys) {
            Arc::make_mut(self.path_index(host)).list(path).insert(matcher);
        }
    }

    /// Append for a bulk build; [`Index::sort_lists`] puts what this left
    /// out of order right.
    fn push(&mut self, matcher: &Arc<Matcher>, unsorted: &mut Unsorted) {
        let keys = IndexKeys::of(&matcher.cond);
        for (host, path) in slots(&keys) {
            if !Arc::make_mut(self.path_index(host)).list(path).push(matcher) {
                unsorted.insert((host.cloned(), path.cloned()));
            }
        }
    }

    fn sort_lists(&mut self, unsorted: Unsorted) {
        for (host, path) in unsorted {
            if let Some(list) = self
                .existing_path_index(host.as_ref())
                .and_then(|index| Arc::make_mut(index).existing_list(path.as_ref()))
            {
                list.sort();
            }
        }
    }

    pub(crate) fn remove(&mut self, matcher: &Arc<Matcher>) {
        let keys = IndexKeys::of(&matcher.cond);
        for (host, path) in slots(&keys) {
            let emptied = match self.existing_path_index(host) {
                Some(index) => {
                    let index = Arc::make_mut(index);
                    index.remove(path, matcher);
                    index.is_empty()
                }
                None => false,
            };
            if emptied {
                match host {
                    Some(HostKey::Exact(key)) => drop(self.exact.remove(key.as_ref())),
                    Some(HostKey::Suffix(key)) => self.suffix.remove(key),
                    Some(HostKey::Prefix(key)) => self.prefix.remove(key),
                    None => {}
                }
            }
        }
    }

    fn path_index(&mut self, host: Option<&HostKey>) -> &mut Arc<PathIndex> {
        match host {
            Some(HostKey::Exact(key)) => self.exact.get_or_insert_with(key, Arc::default),
            Some(HostKey::Suffix(key)) => self.suffix.entry(key),
            Some(HostKey::Prefix(key)) => self.prefix.entry(key),
            None => &mut self.any_host,
        }
    }

    fn existing_path_index(&mut self, host: Option<&HostKey>) -> Option<&mut Arc<PathIndex>> {
        match host {
            Some(HostKey::Exact(key)) => self.exact.get_mut(key.as_ref()),
            Some(HostKey::Suffix(key)) => self.suffix.get_mut(key),
            Some(HostKey::Prefix(key)) => self.prefix.get_mut(key),
            None => Some(&mut self.any_host),
        }
    }

    /// The table slots a lookup of `path` under "any host" reads first.
    pub(crate) fn first_slots(&self, path: &[u8], found: &mut impl FnMut(*const u8, usize)) {
        self.any_host.prefixes.first_slots_of_prefixes(path, found);
    }

    /// The candidate lists a request with this (lower-case) host and path hits.
    pub(crate) fn collect<'s>(&'s self, host: &str, path: &str, out: &mut CandidateLists<'s>) {
        if let Some(index) = self.exact.get(host) {
            index.collect(path, out);
        }
        self.suffix.suffixes_of(host, |index| index.collect(path, out));
        self.prefix.prefixes_of(host, |index| index.collect(path, out));
        self.any_host.collect(path, out);
    }
}

/// Builds an index from many matchers: each is appended while it is still
/// in cache, in any order, and only the lists that came out of rank order
/// are sorted at the end (most lists hold one matcher).
pub(crate) struct BulkIndex {
    index: Index,
    unsorted: Unsorted,
}

impl BulkIndex {
    /// `exact_hosts`: about how many distinct exact hosts to expect.
    pub(crate) fn with_capacity(exact_hosts: usize) -> BulkIndex {
        let mut index = Index::default();
        index.exact.reserve(exact_hosts);
        BulkIndex {
            index,
            unsorted: Unsorted::default(),
        }
    }

    pub(crate) fn push(&mut self, matcher: &Arc<Matcher>) {
        self.index.push(matcher, &mut self.unsorted);
    }

    pub(crate) fn finish(mut self) -> Index {
        self.index.sort_lists(self.unsorted);
        self.index
    }
}

/// Inline room for the candidate lists of one request; more spill to a Vec.
const INLINE_LISTS: usize = 16;

/// The candidate lists one request hit, walked merged by rank.
pub(crate) struct CandidateLists<'s> {
    inline: [(&'s [Arc<Matcher>], usize); INLINE_LISTS],
    len: usize,
    spill: Vec<(&'s [Arc<Matcher>], usize)>,
    /// The first list, as stored.
    first: Option<&'s Candidates>,
}

impl<'s> CandidateLists<'s> {
    pub(crate) fn new() -> Self {
        CandidateLists {
            inline: [(&[], 0); INLINE_LISTS],
            len: 0,
            spill: Vec::new(),
            first: None,
        }
    }

    fn push(&mut self, candidates: &'s Candidates) {
        let list = candidates.as_slice();
        if list.is_empty() {
            return;
        }
        if self.first.is_none() {
            self.first = Some(candidates);
        }
        if self.len < INLINE_LISTS {
            self.inline[self.len] = (list, 0);
            self.len += 1;
        } else {
            self.spill.push((list, 0));
        }
    }

    /// The one candidate the request hit, when it is alone and its
    /// condition is its index key (so it holds), with its [`Hot`] copy.
    pub(crate) fn lone_keyed(&self) -> Option<(&'s Arc<Matcher>, &'s Hot)> {
        match (self.len, self.first) {
            (1, Some(Candidates::One(matcher, hot))) if hot.key_is_cond.is_some() => Some((matcher, hot)),
            _ => None,
        }
    }

    /// The best-ranked candidate `accept` takes, each candidate tried once.
    pub(crate) fn first_accepted(&mut self, mut accept: impl FnMut(&Matcher) -> bool) -> Option<&'s Arc<Matcher>> {
        let mut last: Option<&Arc<Matcher>> = None;
        loop {
            let mut best: Option<(usize, &'s Arc<Matcher>)> = None;
            for (i, (list, cursor)) in self.inline[..self.len].iter().chain(self.spill.iter()).enumerate() {
                if let Some(candidate) = list.get(*cursor) {
                    if best.is_none_or(|(_, b)| candidate.rank < b.rank) {
                        best = Some((i, candidate));
                    }
                }
            }
            let (i, candidate) = best?;
            if i < self.len {
                self.inline[i].1 += 1;
            } else {
                self.spill[i - self.len].1 += 1;
            }
            // A matcher keyed under several hit slots appears once per slot.
            if last.is_some_and(|l| Arc::ptr_eq(l, candidate)) {
                continue;
            }
            last = Some(candidate);
            if accept(candidate) {
                return Some(candidate);
            }
        }
    }
}
