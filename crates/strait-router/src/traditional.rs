//! Traditional routes (hosts, paths, methods, headers, snis, sources,
//! destinations) translated into conditions the way Kong's
//! `traditional_compatible` flavor writes them as expressions.
//!
//! A route whose paths mix regexes and prefixes of different lengths is
//! split into parts, one per group (all regexes; each prefix length), each
//! with its own priority, as Kong does: `/a` and `~/b/\d+` on one route rank
//! as two routes would.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;

use strait_core::{CidrPort, Route};
use strait_expr::{Cidr, Op};

use crate::analysis::leading_literal;
use crate::cond::{Cond, Operand, Source, SplitRegex, Test};
use crate::priority::{traditional_priority, TraditionalShape};
use crate::regex_cache::RegexCache;

/// One part of a traditional route: its priority and its condition.
pub(crate) struct Part {
    pub priority: u64,
    pub cond: Cond,
}

/// Why a traditional route does not compile.
pub(crate) enum TraditionalError {
    Regex { pattern: String, reason: String },
    Address { value: String },
}

/// Kong's grouping of a route's paths: all regexes together, prefixes by length.
fn path_groups(paths: &[String]) -> Vec<Vec<String>> {
    if paths.len() <= 1 {
        return vec![paths.to_vec()];
    }
    let mut groups: Vec<(Option<usize>, Vec<String>)> = Vec::new();
    for path in paths {
        let key = (!path.starts_with('~')).then_some(path.len());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, group)) => group.push(path.clone()),
            None => groups.push((key, vec![path.clone()])),
        }
    }
    if groups.is_empty() {
        groups.push((None, Vec::new()));
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

pub(crate) fn translate(route: &Route, regexes: &mut RegexCache) -> Result<Vec<Part>, TraditionalError> {
    let paths = route.paths.as_deref().unwrap_or_default();
    if paths.len() <= 1 {
        return Ok(vec![part(route, paths, regexes)?]);
    }
    path_groups(paths)
        .iter()
        .map(|group| part(route, group, regexes))
        .collect()
}

fn part(route: &Route, paths: &[String], regexes: &mut RegexCache) -> Result<Part, TraditionalError> {
    let mut all = common_conditions(route, usize::from(!paths.is_empty()), regexes)?;
    if !paths.is_empty() {
        all.push(Cond::any_of_results(paths.iter().map(|p| path_condition(p, regexes)))?);
    }
    Ok(Part {
        priority: traditional_priority(&TraditionalShape { route, paths }),
        cond: Cond::all_of(all),
    })
}

fn path_condition(path: &str, regexes: &mut RegexCache) -> Result<Cond, TraditionalError> {
    Ok(match path.strip_prefix('~') {
        Some(pattern) => {
            let full = anchored(pattern);
            Cond::test(Source::Path, Op::Regex, split_regex(&full, pattern, regexes)?)
        }
        None => Cond::test(Source::Path, Op::Prefix, Operand::Str(path.into())),
    })
}

/// `pattern` anchored at the start of the path. `^X` is `^(?:X)` when `X`
/// has no alternation; the plain form lets the index read the literal
/// prefix without parsing ([`crate::analysis::leading_literal`]).
fn anchored(pattern: &str) -> String {
    let starts_with_quantifier = pattern.starts_with(['*', '+', '?', '{']);
    if pattern.contains('|') || starts_with_quantifier {
        format!("^(?:{pattern})")
    } else {
        format!("^{pattern}")
    }
}

/// `full` (`^` + pattern) as its leading plain text plus the regex for the
/// rest ([`SplitRegex`]), or whole when it does not begin with text.
fn split_regex(full: &str, shown: &str, regexes: &mut RegexCache) -> Result<Operand, TraditionalError> {
    if let Some(literal) = leading_literal(full) {
        if let Ok(rest) = regexes.rest(&full[1 + literal.len()..]) {
            return Ok(Operand::SplitRegex(Arc::new(SplitRegex {
                literal: literal.into(),
                rest,
            })));
        }
        // The rest does not compile, so neither does the whole pattern:
        // compiling it below reports the error against what was written.
    }
    compile(full, shown, regexes).map(Operand::Regex)
}

fn compile(
    full: &str,
    shown: &str,
    regexes: &mut RegexCache,
) -> Result<Arc<strait_expr::RouteRegex>, TraditionalError> {
    regexes.get(full).map_err(|reason| TraditionalError::Regex {
        pattern: shown.to_string(),
        reason,
    })
}

/// Every condition but the paths; `room` more are pushed after these.
fn common_conditions(route: &Route, room: usize, regexes: &mut RegexCache) -> Result<Vec<Cond>, TraditionalError> {
    let count = usize::from(route.methods.as_ref().is_some_and(|m| !m.is_empty()))
        + usize::from(route.hosts.as_ref().is_some_and(|h| !h.is_empty()))
        + route.headers.as_ref().map_or(0, |h| h.len())
        + usize::from(route.snis.as_ref().is_some_and(|s| !s.is_empty()))
        + usize::from(route.sources.as_ref().is_some_and(|s| !s.is_empty()))
        + usize::from(route.destinations.as_ref().is_some_and(|d| !d.is_empty()));
    // Exactly sized: the list is kept for the route's lifetime.
    let mut all = Vec::with_capacity(count + room);
    if let Some(methods) = route.methods.as_ref().filter(|m| !m.is_empty()) {
        let tests = methods
            .iter()
            .map(|m| Ok(Cond::test(Source::Method, Op::Equals, Operand::Str(m.as_str().into()))));
        all.push(Cond::any_of_results(tests)?);
    }
    if let Some(hosts) = route.hosts.as_ref().filter(|h| !h.is_empty()) {
        all.push(Cond::any_of_results(hosts.iter().map(|h| Ok(host_condition(h))))?);
    }
    for (name, values) in route.headers.iter().flatten() {
        all.push(Cond::any_of_results(
            values.iter().map(|v| header_condition(name, v, regexes)),
        )?);
    }
    if let Some(snis) = route.snis.as_ref().filter(|s| !s.is_empty()) {
        // Kong: `(net.protocol != "https" || tls.sni == ...)`: snis only bind TLS requests.
        let mut options = vec![Cond::test(
            Source::Protocol,
            Op::NotEquals,
            Operand::Str("https".into()),
        )];
        options.extend(
            snis.iter()
                .map(|s| Cond::test(Source::Sni, Op::Equals, Operand::Str(s.to_ascii_lowercase().into()))),
        );
        all.push(Cond::Or(options));
    }
    for (entries, ip, port) in [
        (&route.sources, Source::SrcIp, Source::SrcPort),
        (&route.destinations, Source::DstIp, Source::DstPort),
    ] {
        if let Some(entries) = entries.as_ref().filter(|e| !e.is_empty()) {
            all.push(Cond::any_of_results(
                entries.iter().map(|e| address_condition(e, &ip, &port)),
            )?);
        }
    }
    Ok(all)
}

/// `example.com`, `*.example.com`, `example.*`, each optionally `:port`.
fn host_condition(host: &str) -> Cond {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) if !name.is_empty() => match port.parse::<u16>() {
            Ok(port) => (name, Some(port)),
            Err(_) => (host, None),
        },
        _ => (host, None),
    };
    let name = ascii_lowercase(name);
    let test = if let Some(suffix) = name.strip_prefix('*') {
        Cond::test(Source::Host, Op::Suffix, Operand::Str(suffix.into()))
    } else if let Some(prefix) = name.strip_suffix('*') {
        Cond::test(Source::Host, Op::Prefix, Operand::Str(prefix.into()))
    } else {
        Cond::test(Source::Host, Op::Equals, Operand::Str(name.as_ref().into()))
    };
    match port {
        Some(port) => Cond::And(vec![
            test,
            Cond::test(Source::RequestPort, Op::Equals, Operand::Int(i64::from(port))),
        ]),
        None => test,
    }
}

/// `text` in ASCII lower case, copied only when it has upper-case letters.
fn ascii_lowercase(text: &str) -> Cow<'_, str> {
    if text.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(text.to_ascii_lowercase())
    } else {
        Cow::Borrowed(text)
    }
}

/// A plain value compares case-insensitively; `~*re` is a case-insensitive regex.
fn header_condition(name: &str, value: &str, regexes: &mut RegexCache) -> Result<Cond, TraditionalError> {
    let source = Source::Header(vec![name.to_ascii_lowercase().into()]);
    let (op, operand, lower) = match value.strip_prefix("~*") {
        Some(pattern) => (
            Op::Regex,
            Operand::Regex(compile(&format!("(?i){pattern}"), pattern, regexes)?),
            false,
        ),
        None => (Op::Equals, Operand::Str(value.to_lowercase().into()), true),
    };
    Ok(Cond::Test(Test {
        source,
        op,
        operand,
        lower,
        any: true,
    }))
}

fn address_condition(entry: &CidrPort, ip: &Source, port: &Source) -> Result<Cond, TraditionalError> {
    let mut both = Vec::new();
    if let Some(text) = &entry.ip {
        let cidr = parse_cidr(text).ok_or_else(|| TraditionalError::Address { value: text.clone() })?;
        both.push(Cond::test(ip.clone(), Op::In, Operand::Cidr(cidr)));
    }
    if let Some(p) = entry.port {
        both.push(Cond::test(port.clone(), Op::Equals, Operand::Int(p)));
    }
    Ok(Cond::And(both))
}

/// `10.0.0.0/8`, `fd00::/8`, or a single address.
fn parse_cidr(text: &str) -> Option<Cidr> {
    let (addr, len) = match text.split_once('/') {
        Some((addr, len)) => (addr, Some(len.parse::<u8>().ok()?)),
        None => (text, None),
    };
    let addr: IpAddr = addr.parse().ok()?;
    let full = if addr.is_ipv4() { 32 } else { 128 };
    Cidr::new(addr, len.unwrap_or(full))
}
