//! Evaluating a condition against one request.
//!
//! Values derived from the request (lower-cased host, path segments, parsed
//! query arguments) are computed lazily, once per request, and only if a
//! surviving candidate asks for them. Multi-valued fields follow Kong: by
//! default every value must pass (and there must be one); with `any()` one
//! passing value is enough. An absent field fails every operator.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::net::IpAddr;

use regex_automata::util::captures::Captures;
use strait_expr::{Op, RouteRegex};

use crate::cond::{Cond, Operand, Source, SplitRegex, Test};
use crate::RequestFacts;

/// One request as conditions see it.
pub(crate) struct RequestView<'a> {
    pub facts: &'a RequestFacts<'a>,
    /// Lower-case host.
    pub host: Cow<'a, str>,
    segments: OnceCell<Vec<&'a str>>,
    queries: OnceCell<Vec<(Cow<'a, str>, Cow<'a, str>)>>,
}

/// What the matched route's path predicates recorded (second pass only).
#[derive(Debug, Default)]
pub(crate) struct Recording {
    pub matched_path: Option<String>,
    pub captures: Vec<(String, String)>,
}

enum Value<'v> {
    Str(Cow<'v, str>),
    Int(i64),
    Ip(IpAddr),
}

impl<'a> RequestView<'a> {
    pub(crate) fn new(facts: &'a RequestFacts<'a>) -> Self {
        let host = if facts.host.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(facts.host.to_ascii_lowercase())
        } else {
            Cow::Borrowed(facts.host)
        };
        RequestView {
            facts,
            host,
            segments: OnceCell::new(),
            queries: OnceCell::new(),
        }
    }

    fn segments(&self) -> &[&'a str] {
        self.segments.get_or_init(|| {
            let trimmed = self.facts.path.trim_start_matches('/').trim_end_matches('/');
            if trimmed.is_empty() {
                Vec::new()
            } else {
                trimmed.split('/').collect()
            }
        })
    }

    fn queries(&self) -> &[(Cow<'a, str>, Cow<'a, str>)] {
        self.queries.get_or_init(|| {
            self.facts
                .query
                .split('&')
                .filter(|pair| !pair.is_empty())
                .map(|pair| match pair.split_once('=') {
                    Some((name, value)) => (percent_decode(name), percent_decode(value)),
                    None => (percent_decode(pair), Cow::Borrowed("")),
                })
                .collect()
        })
    }

    /// The value of a single-valued source; `None` when absent.
    fn single(&self, source: &Source) -> Option<Value<'_>> {
        let facts = self.facts;
        Some(match source {
            Source::Protocol => Value::Str(Cow::Borrowed(facts.protocol)),
            Source::Sni => Value::Str(Cow::Borrowed(facts.sni?)),
            Source::Method => Value::Str(Cow::Borrowed(facts.method)),
            Source::Host => Value::Str(Cow::Borrowed(&self.host)),
            Source::Path => Value::Str(Cow::Borrowed(facts.path)),
            Source::PathSegment(n) => Value::Str(Cow::Borrowed(self.segments().get(*n)?)),
            Source::PathSegmentRange(n, m) => Value::Str(Cow::Owned(self.segments().get(*n..=*m)?.join("/"))),
            Source::PathSegmentCount => Value::Int(self.segments().len() as i64),
            Source::SrcIp => Value::Ip(facts.source?.ip()),
            Source::SrcPort => Value::Int(i64::from(facts.source?.port())),
            Source::DstIp => Value::Ip(facts.destination?.ip()),
            Source::DstPort => Value::Int(i64::from(facts.destination?.port())),
            Source::RequestPort => Value::Int(i64::from(facts.port)),
            Source::Header(_) | Source::Query(_) => return None,
        })
    }
}

/// `application/x-www-form-urlencoded` decoding; bad escapes stay as written.
fn percent_decode(text: &str) -> Cow<'_, str> {
    if !text.contains(['%', '+']) {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match (
                bytes.get(i + 1).and_then(|b| hex(*b)),
                bytes.get(i + 2).and_then(|b| hex(*b)),
            ) {
                (Some(high), Some(low)) => {
                    out.push((high * 16 + low) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            other => out.push(other),
        }
        i += 1;
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

/// Evaluate `cond`; with `recording`, note the matched path and captures.
pub(crate) fn evaluate(cond: &Cond, request: &RequestView<'_>, recording: &mut Option<&mut Recording>) -> bool {
    match cond {
        Cond::And(items) => items.iter().all(|c| evaluate(c, request, recording)),
        Cond::Or(items) => items.iter().any(|c| evaluate(c, request, recording)),
        Cond::Not(inner) => !evaluate(inner, request, recording),
        Cond::Test(test) => evaluate_test(test, request, recording),
    }
}

fn evaluate_test(test: &Test, request: &RequestView<'_>, recording: &mut Option<&mut Recording>) -> bool {
    match &test.source {
        Source::Header(names) => {
            let mut values = Vec::new();
            for name in names {
                values.extend(request.facts.headers.values(name));
            }
            all_or_any(
                test,
                values.into_iter().map(|v| Value::Str(Cow::Borrowed(v))),
                recording,
            )
        }
        Source::Query(name) => {
            let values = request
                .queries()
                .iter()
                .filter(|(n, _)| n.as_ref() == name.as_ref())
                .map(|(_, v)| Value::Str(Cow::Borrowed(v.as_ref())));
            all_or_any(test, values, recording)
        }
        single => match request.single(single) {
            Some(value) => check(test, value, recording),
            None => false,
        },
    }
}

fn all_or_any<'v>(
    test: &Test,
    values: impl Iterator<Item = Value<'v>>,
    recording: &mut Option<&mut Recording>,
) -> bool {
    let mut seen = false;
    for value in values {
        seen = true;
        let passed = check(test, value, recording);
        if test.any && passed {
            return true;
        }
        if !test.any && !passed {
            return false;
        }
    }
    !test.any && seen
}

fn check(test: &Test, value: Value<'_>, recording: &mut Option<&mut Recording>) -> bool {
    match (value, &test.operand) {
        (Value::Str(s), operand) => {
            let s = if test.lower && s.chars().any(char::is_uppercase) {
                Cow::Owned(s.to_lowercase())
            } else {
                s
            };
            check_str(test, &s, operand, recording)
        }
        (Value::Int(v), Operand::Int(rhs)) => match test.op {
            Op::Equals => v == *rhs,
            Op::NotEquals => v != *rhs,
            Op::Greater => v > *rhs,
            Op::GreaterOrEqual => v >= *rhs,
            Op::Less => v < *rhs,
            Op::LessOrEqual => v <= *rhs,
            _ => false,
        },
        (Value::Ip(ip), Operand::Ip(rhs)) => match test.op {
            Op::Equals => ip == *rhs,
            Op::NotEquals => ip != *rhs,
            _ => false,
        },
        (Value::Ip(ip), Operand::Cidr(net)) => match test.op {
            Op::In => net.contains(&ip),
            Op::NotIn => !net.contains(&ip),
            _ => false,
        },
        _ => false,
    }
}

fn check_str(test: &Test, s: &str, operand: &Operand, recording: &mut Option<&mut Recording>) -> bool {
    let passed = match (test.op, operand) {
        (Op::Regex, Operand::Regex(re)) => {
            return match recording {
                Some(rec) if test.source == Source::Path => record_regex(re, s, rec),
                _ => re.is_match(s),
            }
        }
        (Op::Regex, Operand::SplitRegex(split)) => {
            return match recording {
                Some(rec) if test.source == Source::Path => record_split(split, s, rec),
                _ => split.is_match(s),
            }
        }
        (Op::Equals, Operand::Str(rhs)) => s == rhs.as_ref(),
        (Op::NotEquals, Operand::Str(rhs)) => s != rhs.as_ref(),
        (Op::Prefix, Operand::Str(rhs)) => s.starts_with(rhs.as_ref()),
        (Op::Suffix, Operand::Str(rhs)) => s.ends_with(rhs.as_ref()),
        (Op::Contains, Operand::Str(rhs)) => s.contains(rhs.as_ref()),
        _ => false,
    };
    if passed && test.source == Source::Path {
        if let Some(rec) = recording {
            match (test.op, operand) {
                (Op::Prefix, Operand::Str(rhs)) => rec.matched_path = Some(rhs.to_string()),
                (Op::Equals, _) => rec.matched_path = Some(s.to_string()),
                _ => {}
            }
        }
    }
    passed
}

fn record_regex(re: &RouteRegex, s: &str, rec: &mut Recording) -> bool {
    let Some(caps) = re.captures(s) else {
        return false;
    };
    if let Some(whole) = caps.get_group(0).filter(|m| m.start == 0) {
        rec.matched_path = Some(s[whole.range()].to_string());
    }
    record_groups(re, s, &caps, rec);
    true
}

/// [`record_regex`] for a split path regex: the whole pattern's match runs
/// from the start of the path to the end of the rest's match.
fn record_split(split: &SplitRegex, s: &str, rec: &mut Recording) -> bool {
    if !s.starts_with(split.literal.as_ref()) {
        return false;
    }
    let Some(caps) = split.rest.captures_at(s, split.literal.len()) else {
        return false;
    };
    if let Some(whole) = caps.get_group(0) {
        rec.matched_path = Some(s[..whole.end].to_string());
    }
    record_groups(&split.rest, s, &caps, rec);
    true
}

/// Named groups by name, unnamed ones by number, as Kong exposes them.
fn record_groups(re: &RouteRegex, s: &str, caps: &Captures, rec: &mut Recording) {
    rec.captures.clear();
    for (index, name) in re.group_names().enumerate().skip(1) {
        if let Some(span) = caps.get_group(index) {
            let key = name.map(str::to_string).unwrap_or_else(|| index.to_string());
            rec.captures.push((key, s[span.range()].to_string()));
        }
    }
}
