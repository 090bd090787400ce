//! Regexes compiled once and shared by every route that uses the same
//! pattern, under the size limits of `strait_expr::compile_regex`.

use std::sync::{Arc, Weak};

use strait_expr::{RegexCompiler, RouteRegex, Search};

use crate::cow_map::CowMap;

/// Pattern -> compiled regex. Entries are weak: a regex lives as long as a
/// route (in this router or an older snapshot) uses it.
#[derive(Clone, Default)]
pub(crate) struct RegexCache {
    by_pattern: Compiled,
    rests: Compiled,
}

impl RegexCache {
    /// Keyed by the pattern as compiled (`RouteRegex::as_str`, Perl classes made
    /// ASCII), so [`RegexCache::release`] finds it from the regex alone.
    pub(crate) fn get(&mut self, pattern: &str) -> Result<Arc<RouteRegex>, String> {
        cached(&mut self.by_pattern, pattern, Search::Unanchored)
    }

    /// The rest of a path regex after its leading text, only ever searched
    /// anchored where that text ends ([`crate::cond::SplitRegex`]); keyed
    /// like [`RegexCache::get`], in a map of its own.
    pub(crate) fn rest(&mut self, pattern: &str) -> Result<Arc<RouteRegex>, String> {
        cached(&mut self.rests, pattern, Search::Anchored)
    }

    /// Forget `pattern` (as compiled) if no route uses it any more.
    pub(crate) fn release(&mut self, pattern: &str) {
        forget_if_unused(&mut self.by_pattern, pattern);
        forget_if_unused(&mut self.rests, pattern);
    }

    pub(crate) fn len(&self) -> usize {
        self.by_pattern.len() + self.rests.len()
    }
}

impl RegexCompiler for RegexCache {
    fn compile(&mut self, pattern: &str) -> Result<Arc<RouteRegex>, String> {
        self.get(pattern)
    }
}

type Compiled = CowMap<Arc<str>, Weak<RouteRegex>>;

/// The regex for `pattern` from `map`, compiled and recorded if absent.
fn cached(map: &mut Compiled, pattern: &str, search: Search) -> Result<Arc<RouteRegex>, String> {
    let key = strait_expr::regex_key(pattern)?;
    if let Some(regex) = map.get(key.as_ref()).and_then(Weak::upgrade) {
        return Ok(regex);
    }
    let regex = match strait_expr::compile_regex_key(&key, search) {
        Ok(regex) => Arc::new(regex),
        // The error as `compile_regex` words it (against `pattern`).
        Err(_) => return strait_expr::compile_regex(pattern, false).map(Arc::new),
    };
    map.insert(key.as_ref().into(), Arc::downgrade(&regex));
    Ok(regex)
}

fn forget_if_unused(map: &mut Compiled, pattern: &str) {
    if map.get(pattern).is_some_and(|weak| weak.strong_count() == 0) {
        map.remove(pattern);
    }
}
