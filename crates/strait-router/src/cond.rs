//! The condition a matcher evaluates: one small tree for both route styles.
//!
//! Expression routes translate their type-checked syntax tree into it;
//! traditional routes are translated into it the way Kong's
//! `traditional_compatible` flavor writes them as expressions. Header lookup
//! names and lower-cased literals are prepared here, once, not per request.

use std::net::IpAddr;
use std::sync::Arc;

use strait_expr::{Cidr, Expr, Field, Literal, Op, RouteRegex};

#[derive(Debug)]
pub(crate) enum Cond {
    And(Vec<Cond>),
    Or(Vec<Cond>),
    Not(Box<Cond>),
    Test(Test),
}

/// Where a predicate's values come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    Protocol,
    Sni,
    Method,
    Host,
    Path,
    PathSegment(usize),
    PathSegmentRange(usize, usize),
    PathSegmentCount,
    /// Header names to look up (lower case): `x-a` and, for an expression
    /// field written `x_a`, also `x_a`.
    Header(Vec<Box<str>>),
    Query(Box<str>),
    SrcIp,
    SrcPort,
    DstIp,
    DstPort,
    /// The port the client addressed (Host header or listener): what a
    /// traditional `hosts` entry with a port compares. Not an expression field.
    RequestPort,
}

/// What a value is compared with.
#[derive(Debug, Clone)]
pub(crate) enum Operand {
    /// Shared with the index key it produces (no second copy).
    Str(Arc<str>),
    Int(i64),
    Ip(IpAddr),
    Cidr(Cidr),
    Regex(Arc<RouteRegex>),
    /// A path regex split after its leading plain text ([`SplitRegex`]).
    SplitRegex(Arc<SplitRegex>),
}

/// A traditional path regex that begins with plain text
/// (`~/users/(?<id>\d+)$`), split: `literal` (`/users/`) is compared as a
/// prefix and `rest` (`(?<id>\d+)$`) must match right after it. Routes whose
/// regexes differ only in that text share one compiled `rest`, and the text
/// is the route's index key.
#[derive(Debug)]
pub(crate) struct SplitRegex {
    pub literal: Arc<str>,
    pub rest: Arc<RouteRegex>,
}

impl SplitRegex {
    pub(crate) fn is_match(&self, s: &str) -> bool {
        s.starts_with(self.literal.as_ref()) && self.rest.is_match_at(s, self.literal.len())
    }
}

#[derive(Debug)]
pub(crate) struct Test {
    pub source: Source,
    pub op: Op,
    pub operand: Operand,
    pub lower: bool,
    pub any: bool,
}

impl Cond {
    pub(crate) fn test(source: Source, op: Op, operand: Operand) -> Cond {
        Cond::Test(Test {
            source,
            op,
            operand,
            lower: false,
            any: false,
        })
    }

    /// `And` of `items`, without a wrapper for a single item.
    pub(crate) fn all_of(mut items: Vec<Cond>) -> Cond {
        if items.len() == 1 {
            if let Some(only) = items.pop() {
                return only;
            }
        }
        Cond::And(items)
    }

    /// `Or` of the conditions `items` yields, or the first error; a single
    /// item is returned as it is (no list is allocated for it).
    pub(crate) fn any_of_results<E>(items: impl IntoIterator<Item = Result<Cond, E>>) -> Result<Cond, E> {
        let mut items = items.into_iter();
        let Some(first) = items.next().transpose()? else {
            return Ok(Cond::Or(Vec::new()));
        };
        let Some(second) = items.next().transpose()? else {
            return Ok(first);
        };
        let mut all = vec![first, second];
        for item in items {
            all.push(item?);
        }
        Ok(Cond::Or(all))
    }

    pub(crate) fn from_expr(expr: &Expr) -> Cond {
        match expr {
            Expr::And(items) => Cond::And(items.iter().map(Cond::from_expr).collect()),
            Expr::Or(items) => Cond::Or(items.iter().map(Cond::from_expr).collect()),
            Expr::Not(inner) => Cond::Not(Box::new(Cond::from_expr(inner))),
            Expr::Predicate(p) => Cond::Test(Test {
                source: source_of(&p.lhs.field),
                op: p.op,
                operand: operand_of(&p.rhs),
                lower: p.lhs.lower,
                any: p.lhs.any,
            }),
        }
    }

    /// The cache key of every regex this condition uses (to release shared
    /// regexes once no route uses them).
    pub(crate) fn regex_keys(&self, out: &mut Vec<String>) {
        match self {
            Cond::And(items) | Cond::Or(items) => items.iter().for_each(|c| c.regex_keys(out)),
            Cond::Not(inner) => inner.regex_keys(out),
            Cond::Test(test) => match &test.operand {
                Operand::Regex(re) => out.push(re.as_str().to_string()),
                Operand::SplitRegex(split) => out.push(split.rest.as_str().to_string()),
                _ => {}
            },
        }
    }
}

fn source_of(field: &Field) -> Source {
    match field {
        Field::NetProtocol => Source::Protocol,
        Field::TlsSni => Source::Sni,
        Field::HttpMethod => Source::Method,
        Field::HttpHost => Source::Host,
        Field::HttpPath => Source::Path,
        Field::PathSegment(n) => Source::PathSegment(*n),
        Field::PathSegmentRange(n, m) => Source::PathSegmentRange(*n, *m),
        Field::PathSegmentCount => Source::PathSegmentCount,
        Field::Header(name) => {
            let dashed = name.replace('_', "-");
            let mut names: Vec<Box<str>> = vec![dashed.as_str().into()];
            if dashed != *name {
                names.push(name.as_str().into());
            }
            Source::Header(names)
        }
        Field::Query(name) => Source::Query(name.as_str().into()),
        Field::NetSrcIp => Source::SrcIp,
        Field::NetSrcPort => Source::SrcPort,
        Field::NetDstIp => Source::DstIp,
        Field::NetDstPort => Source::DstPort,
    }
}

fn operand_of(literal: &Literal) -> Operand {
    match literal {
        Literal::String(s) => Operand::Str(s.clone()),
        Literal::Int(i) => Operand::Int(*i),
        Literal::Ip(ip) => Operand::Ip(*ip),
        Literal::Cidr(c) => Operand::Cidr(*c),
        Literal::Regex(r) => Operand::Regex(r.regex.clone()),
    }
}
