//! Regexes compiled once and shared by every route that uses the same
//! pattern, under the size limits of `strait_expr::compile_regex`.

use std::sync::{Arc, Weak};

use regex::Regex;
use strait_expr::RegexCompiler;

use crate::cow_map::CowMap;

/// Pattern -> compiled regex. Entries are weak: a regex lives as long as a
/// route (in this router or an older snapshot) uses it.
#[derive(Clone, Default)]
pub(crate) struct RegexCache {
    by_pattern: CowMap<Arc<str>, Weak<Regex>>,
}

impl RegexCache {
    /// Keyed by the pattern as compiled (`Regex::as_str`, Perl classes made
    /// ASCII), so [`RegexCache::release`] finds it from the regex alone.
    pub(crate) fn get(&mut self, pattern: &str) -> Result<Arc<Regex>, String> {
        let key = strait_expr::ascii_perl_classes(pattern);
        if let Some(regex) = self.by_pattern.get(key.as_ref()).and_then(Weak::upgrade) {
            return Ok(regex);
        }
        let regex = Arc::new(strait_expr::compile_regex(&key, false)?);
        self.by_pattern.insert(key.as_ref().into(), Arc::downgrade(&regex));
        Ok(regex)
    }

    /// Forget `pattern` (as compiled) if no route uses it any more.
    pub(crate) fn release(&mut self, pattern: &str) {
        let dead = self
            .by_pattern
            .get(pattern)
            .is_some_and(|weak| weak.strong_count() == 0);
        if dead {
            self.by_pattern.remove(pattern);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.by_pattern.len()
    }
}

impl RegexCompiler for RegexCache {
    fn compile(&mut self, pattern: &str) -> Result<Arc<Regex>, String> {
        self.get(pattern)
    }
}
