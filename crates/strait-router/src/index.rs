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

use std::sync::Arc;

use crate::analysis::HostKey;
use crate::cow_map::CowMap;
use crate::matcher::Matcher;

/// Matchers sorted by rank (best first). A `Vec` behind an `Arc`: shared
/// between router versions, changed in place when not shared (bulk build).
pub(crate) type Candidates = Arc<Vec<Arc<Matcher>>>;

/// A map keyed by strings that is searched with every prefix (or suffix) of
/// a request value. Up to [`SMALL`] entries sit in a short list that is
/// scanned (most hosts have one or two path keys: no hash table, three
/// fewer allocations each); past that, a [`CowMap`] where only the key
/// lengths present are tried.
#[derive(Clone, Default)]
pub(crate) struct LengthMap<V> {
    small: Vec<(Arc<str>, V)>,
    map: CowMap<Arc<str>, V>,
    /// (length, number of keys of that length) in `map`, sorted by length.
    lengths: Vec<(usize, usize)>,
}

/// Entries a [`LengthMap`] keeps in its list before it moves to a table.
const SMALL: usize = 4;

fn count_length(lengths: &mut Vec<(usize, usize)>, len: usize) {
    match lengths.binary_search_by_key(&len, |(l, _)| *l) {
        Ok(at) => lengths[at].1 += 1,
        Err(at) => lengths.insert(at, (len, 1)),
    }
}

impl<V: Clone + Default> LengthMap<V> {
    fn is_empty(&self) -> bool {
        self.small.is_empty() && self.map.is_empty()
    }

    fn entry(&mut self, key: &Arc<str>) -> &mut V {
        if self.map.is_empty() {
            if let Some(at) = self.small.iter().position(|(k, _)| k == key) {
                return &mut self.small[at].1;
            }
            if self.small.len() < SMALL {
                self.small.push((key.clone(), V::default()));
                let last = self.small.len() - 1;
                return &mut self.small[last].1;
            }
            self.map.reserve(SMALL + 1);
            for (k, v) in std::mem::take(&mut self.small) {
                count_length(&mut self.lengths, k.len());
                self.map.insert(k, v);
            }
        }
        let lengths = &mut self.lengths;
        self.map.get_or_insert_with(key, || {
            count_length(lengths, key.len());
            V::default()
        })
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        match self.small.iter_mut().find(|(k, _)| k.as_ref() == key) {
            Some((_, value)) => Some(value),
            None => self.map.get_mut(key),
        }
    }

    fn remove(&mut self, key: &str) {
        if let Some(at) = self.small.iter().position(|(k, _)| k.as_ref() == key) {
            self.small.swap_remove(at);
            return;
        }
        if self.map.remove(key).is_none() {
            return;
        }
        if let Ok(at) = self.lengths.binary_search_by_key(&key.len(), |(len, _)| *len) {
            self.lengths[at].1 -= 1;
            if self.lengths[at].1 == 0 {
                self.lengths.remove(at);
            }
        }
    }

    /// Values whose key is a prefix of `text` (in no particular order).
    fn prefixes_of<'s>(&'s self, text: &str, mut found: impl FnMut(&'s V)) {
        for (key, value) in &self.small {
            if text.starts_with(key.as_ref()) {
                found(value);
            }
        }
        for &(len, _) in self.lengths.iter() {
            if len > text.len() {
                break;
            }
            if let Some(value) = text.get(..len).and_then(|key| self.map.get(key)) {
                found(value);
            }
        }
    }

    /// Values whose key is a suffix of `text` (in no particular order).
    fn suffixes_of<'s>(&'s self, text: &str, mut found: impl FnMut(&'s V)) {
        for (key, value) in &self.small {
            if text.ends_with(key.as_ref()) {
                found(value);
            }
        }
        for &(len, _) in self.lengths.iter() {
            if len > text.len() {
                break;
            }
            if let Some(value) = text.get(text.len() - len..).and_then(|key| self.map.get(key)) {
                found(value);
            }
        }
    }
}

/// The path level under one host key.
#[derive(Clone, Default)]
pub(crate) struct PathIndex {
    prefixes: LengthMap<Candidates>,
    /// `None` when empty (most path indexes have no such matcher).
    any_path: Option<Candidates>,
}

/// Insert by rank; appending (the bulk build inserts in rank order) is O(1)
/// when the list is not shared.
fn insert_sorted(list: &mut Candidates, matcher: &Arc<Matcher>) {
    let at = list.partition_point(|m| m.rank < matcher.rank);
    Arc::make_mut(list).insert(at, matcher.clone());
}

fn remove_from(list: &mut Candidates, matcher: &Arc<Matcher>) {
    if list.iter().any(|m| Arc::ptr_eq(m, matcher)) {
        Arc::make_mut(list).retain(|m| !Arc::ptr_eq(m, matcher));
    }
}

impl PathIndex {
    fn is_empty(&self) -> bool {
        self.prefixes.is_empty() && self.any_path.is_none()
    }

    fn insert(&mut self, path: Option<&Arc<str>>, matcher: &Arc<Matcher>) {
        match path {
            Some(prefix) => insert_sorted(self.prefixes.entry(prefix), matcher),
            None => insert_sorted(self.any_path.get_or_insert_with(Candidates::default), matcher),
        }
    }

    fn remove(&mut self, path: Option<&Arc<str>>, matcher: &Arc<Matcher>) {
        match path {
            Some(prefix) => {
                if let Some(list) = self.prefixes.get_mut(prefix) {
                    remove_from(list, matcher);
                    if list.is_empty() {
                        self.prefixes.remove(prefix);
                    }
                }
            }
            None => {
                if let Some(list) = &mut self.any_path {
                    remove_from(list, matcher);
                    if list.is_empty() {
                        self.any_path = None;
                    }
                }
            }
        }
    }

    fn collect<'s>(&'s self, path: &str, out: &mut CandidateLists<'s>) {
        self.prefixes.prefixes_of(path, |list| out.push(list));
        if let Some(list) = &self.any_path {
            out.push(list);
        }
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
type Slot<'m> = (Option<&'m HostKey>, Option<&'m Arc<str>>);

/// `Some(key)` for each key, or a single `None` ("any") when unkeyed.
fn keys_or_any<K>(keys: Option<&[K]>) -> impl Iterator<Item = Option<&K>> + Clone {
    keys.into_iter()
        .flatten()
        .map(Some)
        .chain(keys.is_none().then_some(None))
}

/// Every slot a matcher occupies.
fn slots(matcher: &Matcher) -> impl Iterator<Item = Slot<'_>> {
    let paths = keys_or_any(matcher.keys.paths.as_deref());
    keys_or_any(matcher.keys.hosts.as_deref()).flat_map(move |host| paths.clone().map(move |path| (host, path)))
}

impl Index {
    pub(crate) fn insert(&mut self, matcher: &Arc<Matcher>) {
        for (host, path) in slots(matcher) {
            Arc::make_mut(self.path_index(host)).insert(path, matcher);
        }
    }

    pub(crate) fn remove(&mut self, matcher: &Arc<Matcher>) {
        for (host, path) in slots(matcher) {
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

    /// The candidate lists a request with this (lower-case) host and path hits.
    pub(crate) fn collect<'s>(&'s self, host: &str, path: &str, out: &mut CandidateLists<'s>) {
        if let Some(index) = self.exact.get(host) {
            index.collect(path, out);
        }
        self.suffix.suffixes_of(host, |index| index.collect(path, out));
        self.prefix.prefixes_of(host, |index| index.collect(path, out));
        self.any_host.collect(path, out);
    }

    /// Bulk load: matchers go in in rank order, so every candidate list
    /// grows by appending.
    pub(crate) fn from_matchers(mut matchers: Vec<Arc<Matcher>>) -> Index {
        matchers.sort_unstable_by_key(|m| m.rank);
        let mut index = Index::default();
        let exact_hosts = matchers
            .iter()
            .flat_map(|m| m.keys.hosts.iter().flatten())
            .filter(|key| matches!(key, HostKey::Exact(_)))
            .count();
        index.exact.reserve(exact_hosts);
        for matcher in &matchers {
            index.insert(matcher);
        }
        index
    }
}

/// Inline room for the candidate lists of one request; more spill to a Vec.
const INLINE_LISTS: usize = 16;

/// The candidate lists one request hit, walked merged by rank.
pub(crate) struct CandidateLists<'s> {
    inline: [(&'s [Arc<Matcher>], usize); INLINE_LISTS],
    len: usize,
    spill: Vec<(&'s [Arc<Matcher>], usize)>,
}

impl<'s> CandidateLists<'s> {
    pub(crate) fn new() -> Self {
        CandidateLists {
            inline: [(&[], 0); INLINE_LISTS],
            len: 0,
            spill: Vec::new(),
        }
    }

    fn push(&mut self, list: &'s Candidates) {
        if self.len < INLINE_LISTS {
            self.inline[self.len] = (list, 0);
            self.len += 1;
        } else {
            self.spill.push((list, 0));
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
