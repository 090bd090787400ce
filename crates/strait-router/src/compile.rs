//! One route compiled for matching: lower-cased hosts, compiled regexes and
//! the priority key that orders it among the others.

use std::sync::Arc;

use regex::{Regex, RegexBuilder};
use strait_core::Route;
use uuid::Uuid;

use crate::{RequestFacts, RouteMatch};

/// Largest compiled size a route regex may take.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    #[error("route {route}: invalid regex {pattern:?}: {reason}")]
    InvalidRegex {
        route: Uuid,
        pattern: String,
        reason: String,
    },
}

#[derive(Debug)]
enum HostMatcher {
    Exact {
        host: String,
        port: Option<u16>,
    },
    /// `*.example.com` — any host ending with `.example.com`.
    Suffix {
        suffix: String,
        port: Option<u16>,
    },
    /// `example.*` — any host starting with `example.`.
    Prefix {
        prefix: String,
        port: Option<u16>,
    },
}

#[derive(Debug)]
enum PathMatcher {
    Prefix(String),
    Regex(Regex),
}

#[derive(Debug)]
enum HeaderValueMatcher {
    Exact(String),
    Regex(Regex),
}

#[derive(Debug)]
pub(crate) struct CompiledRoute {
    pub(crate) route: Arc<Route>,
    pub(crate) priority: (u8, u8, usize, bool, i64, usize, std::cmp::Reverse<i64>),
    methods: Vec<String>,
    hosts: Vec<HostMatcher>,
    paths: Vec<PathMatcher>,
    headers: Vec<(String, Vec<HeaderValueMatcher>)>,
    snis: Vec<String>,
}

fn split_port(host: &str) -> (String, Option<u16>) {
    match host.rsplit_once(':') {
        Some((name, port)) if !name.is_empty() => match port.parse() {
            Ok(port) => (name.to_ascii_lowercase(), Some(port)),
            Err(_) => (host.to_ascii_lowercase(), None),
        },
        _ => (host.to_ascii_lowercase(), None),
    }
}

fn compile_regex(route: Uuid, pattern: &str, case_insensitive: bool) -> Result<Regex, RouterError> {
    RegexBuilder::new(pattern)
        .case_insensitive(case_insensitive)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|err| RouterError::InvalidRegex {
            route,
            pattern: pattern.to_string(),
            reason: err.to_string(),
        })
}

fn compile_host(host: &str) -> HostMatcher {
    let (name, port) = split_port(host);
    if let Some(suffix) = name.strip_prefix('*') {
        HostMatcher::Suffix {
            suffix: suffix.to_string(),
            port,
        }
    } else if let Some(prefix) = name.strip_suffix('*') {
        HostMatcher::Prefix {
            prefix: prefix.to_string(),
            port,
        }
    } else {
        HostMatcher::Exact { host: name, port }
    }
}

impl CompiledRoute {
    pub(crate) fn new(route: Arc<Route>) -> Result<CompiledRoute, RouterError> {
        let id = route.id;
        let hosts: Vec<HostMatcher> = route.hosts.iter().flatten().map(|h| compile_host(h)).collect();
        let mut paths = Vec::new();
        for path in route.paths.iter().flatten() {
            paths.push(match path.strip_prefix('~') {
                Some(pattern) => PathMatcher::Regex(compile_regex(id, &format!("^(?:{pattern})"), false)?),
                None => PathMatcher::Prefix(path.clone()),
            });
        }
        let mut headers = Vec::new();
        for (name, values) in route.headers.iter().flatten() {
            let mut matchers = Vec::new();
            for value in values {
                matchers.push(match value.strip_prefix("~*") {
                    Some(pattern) => HeaderValueMatcher::Regex(compile_regex(id, pattern, true)?),
                    None => HeaderValueMatcher::Exact(value.to_ascii_lowercase()),
                });
            }
            headers.push((name.to_ascii_lowercase(), matchers));
        }
        let priority = priority_of(&route, &hosts, &paths, headers.len());
        Ok(CompiledRoute {
            methods: route.methods.clone().unwrap_or_default(),
            snis: route.snis.iter().flatten().map(|s| s.to_ascii_lowercase()).collect(),
            route,
            priority,
            hosts,
            paths,
            headers,
        })
    }

    pub(crate) fn matches(&self, facts: &RequestFacts<'_>) -> Option<RouteMatch> {
        if !self.methods.is_empty() && !self.methods.iter().any(|m| m == facts.method) {
            return None;
        }
        if !self.hosts.is_empty() && !self.hosts.iter().any(|h| host_matches(h, facts)) {
            return None;
        }
        if !self.snis.is_empty() {
            let sni = facts.sni?;
            if !self.snis.iter().any(|s| s.eq_ignore_ascii_case(sni)) {
                return None;
            }
        }
        if !self
            .headers
            .iter()
            .all(|(name, values)| header_matches(facts, name, values))
        {
            return None;
        }
        if self.paths.is_empty() {
            return Some(self.matched(None, Vec::new()));
        }
        self.paths.iter().find_map(|p| match p {
            PathMatcher::Prefix(prefix) => facts
                .path
                .starts_with(prefix.as_str())
                .then(|| self.matched(Some(prefix.clone()), Vec::new())),
            PathMatcher::Regex(re) => re.captures(facts.path).map(|caps| {
                let whole = caps.get(0).map(|m| m.as_str().to_string());
                self.matched(whole, captures_of(re, &caps))
            }),
        })
    }

    fn matched(&self, matched_path: Option<String>, captures: Vec<(String, String)>) -> RouteMatch {
        RouteMatch {
            route: self.route.clone(),
            matched_path,
            captures,
        }
    }
}

fn captures_of(re: &Regex, caps: &regex::Captures<'_>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (index, name) in re.capture_names().enumerate().skip(1) {
        if let Some(m) = caps.get(index) {
            let key = name.map(str::to_string).unwrap_or_else(|| index.to_string());
            out.push((key, m.as_str().to_string()));
        }
    }
    out
}

fn port_ok(port: Option<u16>, facts: &RequestFacts<'_>) -> bool {
    port.is_none_or(|p| p == facts.port)
}

fn host_matches(matcher: &HostMatcher, facts: &RequestFacts<'_>) -> bool {
    let host = facts.host;
    match matcher {
        HostMatcher::Exact { host: h, port } => h.eq_ignore_ascii_case(host) && port_ok(*port, facts),
        HostMatcher::Suffix { suffix, port } => {
            host.len() > suffix.len() && host.to_ascii_lowercase().ends_with(suffix.as_str()) && port_ok(*port, facts)
        }
        HostMatcher::Prefix { prefix, port } => {
            host.len() > prefix.len() && host.to_ascii_lowercase().starts_with(prefix.as_str()) && port_ok(*port, facts)
        }
    }
}

fn header_matches(facts: &RequestFacts<'_>, name: &str, accepted: &[HeaderValueMatcher]) -> bool {
    facts.headers.values(name).iter().any(|value| {
        accepted.iter().any(|m| match m {
            HeaderValueMatcher::Exact(expected) => value.eq_ignore_ascii_case(expected),
            HeaderValueMatcher::Regex(re) => re.is_match(value),
        })
    })
}

/// Kong's `traditional_compatible` ordering, most significant first: number
/// of fields set, plain (non-wildcard) hosts only, header count, has a regex
/// path then its `regex_priority`, longest plain path, and older routes first.
fn priority_of(
    route: &Route,
    hosts: &[HostMatcher],
    paths: &[PathMatcher],
    header_count: usize,
) -> (u8, u8, usize, bool, i64, usize, std::cmp::Reverse<i64>) {
    let set = |present: bool| u8::from(present);
    let fields = set(route.methods.as_ref().is_some_and(|m| !m.is_empty()))
        + set(!hosts.is_empty())
        + set(!paths.is_empty())
        + set(header_count > 0)
        + set(route.snis.as_ref().is_some_and(|s| !s.is_empty()))
        + set(route.sources.as_ref().is_some_and(|s| !s.is_empty()))
        + set(route.destinations.as_ref().is_some_and(|s| !s.is_empty()));
    let plain_hosts = set(!hosts.is_empty() && hosts.iter().all(|h| matches!(h, HostMatcher::Exact { .. })));
    let has_regex = paths.iter().any(|p| matches!(p, PathMatcher::Regex(_)));
    let longest_prefix = paths
        .iter()
        .map(|p| match p {
            PathMatcher::Prefix(prefix) => prefix.len(),
            PathMatcher::Regex(_) => 0,
        })
        .max()
        .unwrap_or(0);
    let regex_priority = if has_regex { route.regex_priority } else { 0 };
    (
        fields,
        plain_hosts,
        header_count,
        has_regex,
        regex_priority,
        longest_prefix,
        std::cmp::Reverse(route.created_at),
    )
}
