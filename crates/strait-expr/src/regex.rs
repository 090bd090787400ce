//! Route regexes: compiled with regex-automata's meta engine under explicit
//! engine choices and size limits, the same wherever they are compiled.
//!
//! The `regex` crate decides some engines by Cargo features, which any
//! dependency can switch on for the whole binary (`tracing-subscriber`
//! turns on regex-automata's full DFA); a full DFA per route regex made
//! compiling one about 3.5x slower (about 47 µs vs 13 µs) for no gain on
//! paths a few dozen bytes long. Here the choice is in the code: no full
//! DFA, no one-pass DFA; the lazy DFA finds matches and the bounded
//! backtracker (or PikeVM) reports groups.

use std::borrow::Cow;
use std::fmt;

use regex_automata::nfa::thompson;
use regex_automata::util::captures::Captures;
use regex_automata::util::syntax;
use regex_automata::{meta, Anchored, Input, PatternID};

use crate::pattern::ascii_perl_classes;
use crate::{MAX_NESTING, MAX_REGEX_LEN, REGEX_SIZE_LIMIT};

/// How a regex will be searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Search {
    /// Anywhere in the value (the pattern anchors itself with `^` if it wants).
    Unanchored,
    /// Only from a given offset ([`RouteRegex::is_match_at`]): no prefilter,
    /// unanchored strategy or lazy DFA is built (compiling is about four
    /// times cheaper); the bounded backtracker answers, which on a short
    /// path is as fast.
    Anchored,
}

/// A compiled route regex and the pattern it was compiled from.
pub struct RouteRegex {
    pattern: Box<str>,
    regex: meta::Regex,
}

impl fmt::Debug for RouteRegex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RouteRegex").field(&self.pattern).finish()
    }
}

impl RouteRegex {
    /// The pattern as compiled (Perl classes made ASCII).
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    pub fn is_match(&self, s: &str) -> bool {
        self.regex.is_match(s)
    }

    /// Whether a match starts exactly at `at` (a char boundary of `s`); the
    /// text before `at` is still look-behind context (`\b`).
    pub fn is_match_at(&self, s: &str, at: usize) -> bool {
        self.regex.is_match(Self::anchored(s, at))
    }

    /// The groups of the leftmost match.
    pub fn captures(&self, s: &str) -> Option<Captures> {
        let mut caps = self.regex.create_captures();
        self.regex.captures(s, &mut caps);
        caps.is_match().then_some(caps)
    }

    /// The groups of a match starting exactly at `at`.
    pub fn captures_at(&self, s: &str, at: usize) -> Option<Captures> {
        let mut caps = self.regex.create_captures();
        self.regex.search_captures(&Self::anchored(s, at), &mut caps);
        caps.is_match().then_some(caps)
    }

    /// Group names by index, group 0 first (`None` for unnamed groups).
    pub fn group_names(&self) -> impl Iterator<Item = Option<&str>> {
        self.regex.group_info().pattern_names(PatternID::ZERO)
    }

    fn anchored(s: &str, at: usize) -> Input<'_> {
        Input::new(s).range(at..).anchored(Anchored::Yes)
    }
}

/// Compile a route regex under Strait's limits: a pattern too long or too
/// large once compiled is an error, never an unbounded allocation. `\d`,
/// `\w` and `\s` are ASCII, as in Kong's PCRE ([`ascii_perl_classes`]).
pub fn compile_regex(pattern: &str, case_insensitive: bool) -> Result<RouteRegex, String> {
    let key = regex_key(pattern)?;
    build(&key, case_insensitive, Search::Unanchored).map_err(|error| match &key {
        // Report the error against the pattern as written, not the rewrite.
        Cow::Owned(_) => build(pattern, case_insensitive, Search::Unanchored)
            .err()
            .unwrap_or(error),
        Cow::Borrowed(_) => error,
    })
}

/// The pattern [`compile_regex`] compiles: length-checked, Perl classes made
/// ASCII. A regex cache keys compiled regexes by it and compiles it with
/// [`compile_regex_key`], so the pattern is rewritten only once.
pub fn regex_key(pattern: &str) -> Result<Cow<'_, str>, String> {
    if pattern.len() > MAX_REGEX_LEN {
        return Err(format!("regex is longer than {MAX_REGEX_LEN} bytes"));
    }
    Ok(ascii_perl_classes(pattern))
}

/// Compile a key from [`regex_key`] (case-sensitive, under the size limits).
pub fn compile_regex_key(key: &str, search: Search) -> Result<RouteRegex, String> {
    build(key, false, search)
}

/// Whether `pattern` compiles as a route regex within the limits, without
/// building the matching engines (configuration validation).
pub fn validate_regex(pattern: &str) -> Result<(), String> {
    let key = regex_key(pattern)?;
    thompson::Compiler::new()
        .syntax(syntax_config(false))
        .configure(thompson::Config::new().nfa_size_limit(Some(REGEX_SIZE_LIMIT)))
        .build(&key)
        .map(drop)
        .map_err(|_| match compile_regex(pattern, false) {
            Err(error) => error,
            Ok(_) => format!("compiled regex exceeds size limit of {REGEX_SIZE_LIMIT} bytes"),
        })
}

fn syntax_config(case_insensitive: bool) -> syntax::Config {
    syntax::Config::new()
        .case_insensitive(case_insensitive)
        .nest_limit(MAX_NESTING as u32)
}

fn build(pattern: &str, case_insensitive: bool, search: Search) -> Result<RouteRegex, String> {
    let config = meta::Config::new()
        .dfa(false)
        .onepass(false)
        .auto_prefilter(search == Search::Unanchored)
        .hybrid(search == Search::Unanchored)
        .nfa_size_limit(Some(REGEX_SIZE_LIMIT))
        .hybrid_cache_capacity(REGEX_SIZE_LIMIT);
    let regex = meta::Builder::new()
        .configure(config)
        .syntax(syntax_config(case_insensitive))
        .build(pattern)
        .map_err(|error| match (error.size_limit(), error.syntax_error()) {
            (Some(limit), _) => format!("compiled regex exceeds size limit of {limit} bytes"),
            (None, Some(syntax)) => syntax.to_string(),
            (None, None) => error.to_string(),
        })?;
    Ok(RouteRegex {
        pattern: pattern.into(),
        regex,
    })
}
