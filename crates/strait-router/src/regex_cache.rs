//! Regexes compiled once and shared by every route that uses the same
//! pattern, under the size limits of `strait_expr::compile_regex`.

use std::sync::{Arc, Weak};

use strait_expr::{RegexCompiler, RouteRegex, Search};

use crate::cow_map::CowMap;

/// Pattern -> compiled regex. Entries are weak: a regex lives as long as a
/// route (in this router or an older snapshot) uses it.
#[derive(Clone, Default)]
pub(crate) struct RegexCache {
    by_pattern: CowMap<Arc<str>, Weak<RouteRegex>>,
    rests: CowMap<Arc<str>, Weak<RouteRegex>>,
}

impl RegexCache {
    /// Keyed by the pattern as compiled (`RouteRegex::as_str`, Perl classes made
    /// ASCII), so [`RegexCache::release`] finds it from the regex alone.
    pub(crate) fn get(&mut self, pattern: &str) -> Result<Arc<RouteRegex>, String> {
        let key = strait_expr::regex_key(pattern)?;
        if let Some(regex) = self.by_pattern.get(key.as_ref()).and_then(Weak::upgrade) {
            return Ok(regex);
        }
        let regex = match strait_expr::compile_regex_key(&key, Search::Unanchored) {
            Ok(regex) => Arc::new(regex),
            // The error as `compile_regex` words it (against `pattern`).
            Err(_) => return strait_expr::compile_regex(pattern, false).map(Arc::new),
        };
        self.by_pattern.insert(key.as_ref().into(), Arc::downgrade(&regex));
        Ok(regex)
    }

    /// The rest of a path regex after its leading text, only ever searched
    /// anchored where that text ends ([`crate::cond::SplitRegex`]); keyed
    /// like [`RegexCache::get`], in a map of its own.
    pub(crate) fn rest(&mut self, pattern: &str) -> Result<Arc<RouteRegex>, String> {
        let key = strait_expr::regex_key(pattern)?;
        if let Some(rest) = self.rests.get(key.as_ref()).and_then(Weak::upgrade) {
            return Ok(rest);
        }
        let rest = Arc::new(strait_expr::compile_regex_key(&key, Search::Anchored)?);
        self.rests.insert(key.as_ref().into(), Arc::downgrade(&rest));
        Ok(rest)
    }

    /// Forget `pattern` (as compiled) if no route uses it any more.
    pub(crate) fn release(&mut self, pattern: &str) {
        if self
            .by_pattern
            .get(pattern)
            .is_some_and(|weak| weak.strong_count() == 0)
        {
            self.by_pattern.remove(pattern);
        }
        if self.rests.get(pattern).is_some_and(|weak| weak.strong_count() == 0) {
            self.rests.remove(pattern);
        }
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
