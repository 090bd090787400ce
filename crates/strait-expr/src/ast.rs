//! The typed syntax tree of a Kong expression, produced by the parser and
//! already type-checked: every predicate's field, operator and literal agree.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use crate::RouteRegex;

/// A whole expression. `And`/`Or` hold two or more operands, in source order.
#[derive(Debug, Clone)]
pub enum Expr {
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Not(Box<Expr>),
    Predicate(Predicate),
}

/// `lhs op rhs`, e.g. `lower(http.host) == "example.com"`.
#[derive(Debug, Clone)]
pub struct Predicate {
    pub lhs: Lhs,
    pub op: Op,
    pub rhs: Literal,
}

/// A field with its transformations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lhs {
    pub field: Field,
    /// `lower(...)`: compare the lower-cased value (String fields only).
    pub lower: bool,
    /// `any(...)`: a multi-valued field matches when any value matches
    /// (default: every value must match, and there must be at least one).
    pub any: bool,
}

/// The request fields an expression can read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Field {
    NetProtocol,
    TlsSni,
    HttpMethod,
    HttpHost,
    HttpPath,
    /// `http.path.segments.N`: the N-th (0-based) segment.
    PathSegment(usize),
    /// `http.path.segments.N_M`: segments N..=M joined by `/`.
    PathSegmentRange(usize, usize),
    /// `http.path.segments.len`.
    PathSegmentCount,
    /// `http.headers.<name>`, name lower case with `_` for `-`.
    Header(String),
    /// `http.queries.<name>`.
    Query(String),
    NetSrcIp,
    NetSrcPort,
    NetDstIp,
    NetDstPort,
}

/// The type of a field or literal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    String,
    Int,
    IpAddr,
    IpCidr,
    Regex,
}

impl Field {
    pub fn ty(&self) -> Type {
        match self {
            Field::PathSegmentCount | Field::NetSrcPort | Field::NetDstPort => Type::Int,
            Field::NetSrcIp | Field::NetDstIp => Type::IpAddr,
            _ => Type::String,
        }
    }

    /// Headers and query arguments can have several values.
    pub fn is_multi_valued(&self) -> bool {
        matches!(self, Field::Header(_) | Field::Query(_))
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::NetProtocol => f.write_str("net.protocol"),
            Field::TlsSni => f.write_str("tls.sni"),
            Field::HttpMethod => f.write_str("http.method"),
            Field::HttpHost => f.write_str("http.host"),
            Field::HttpPath => f.write_str("http.path"),
            Field::PathSegment(n) => write!(f, "http.path.segments.{n}"),
            Field::PathSegmentRange(n, m) => write!(f, "http.path.segments.{n}_{m}"),
            Field::PathSegmentCount => f.write_str("http.path.segments.len"),
            Field::Header(name) => write!(f, "http.headers.{name}"),
            Field::Query(name) => write!(f, "http.queries.{name}"),
            Field::NetSrcIp => f.write_str("net.src.ip"),
            Field::NetSrcPort => f.write_str("net.src.port"),
            Field::NetDstIp => f.write_str("net.dst.ip"),
            Field::NetDstPort => f.write_str("net.dst.port"),
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Type::String => "String",
            Type::Int => "Int",
            Type::IpAddr => "IpAddr",
            Type::IpCidr => "IpCidr",
            Type::Regex => "Regex",
        })
    }
}

/// Binary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Equals,
    NotEquals,
    Regex,
    Prefix,
    Suffix,
    Greater,
    GreaterOrEqual,
    Less,
    LessOrEqual,
    In,
    NotIn,
    Contains,
}

impl Op {
    pub fn symbol(self) -> &'static str {
        match self {
            Op::Equals => "==",
            Op::NotEquals => "!=",
            Op::Regex => "~",
            Op::Prefix => "^=",
            Op::Suffix => "=^",
            Op::Greater => ">",
            Op::GreaterOrEqual => ">=",
            Op::Less => "<",
            Op::LessOrEqual => "<=",
            Op::In => "in",
            Op::NotIn => "not in",
            Op::Contains => "contains",
        }
    }
}

/// An IP network, `addr/prefix_len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix_len: u8,
}

impl Cidr {
    /// A network; `None` when the prefix is longer than the address.
    pub fn new(addr: IpAddr, prefix_len: u8) -> Option<Cidr> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        (prefix_len <= max).then_some(Cidr { addr, prefix_len })
    }

    pub fn contains(&self, ip: &IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix_len)).unwrap_or(0);
                u32::from(net) & mask == u32::from(*ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix_len)).unwrap_or(0);
                u128::from(net) & mask == u128::from(*ip) & mask
            }
            _ => false,
        }
    }
}

/// A compiled regex literal with its source pattern.
#[derive(Debug, Clone)]
pub struct RegexLiteral {
    pub pattern: Arc<str>,
    pub regex: Arc<RouteRegex>,
}

/// Right-hand side values.
#[derive(Debug, Clone)]
pub enum Literal {
    String(Arc<str>),
    Int(i64),
    Ip(IpAddr),
    Cidr(Cidr),
    Regex(RegexLiteral),
}

impl Literal {
    pub fn ty(&self) -> Type {
        match self {
            Literal::String(_) => Type::String,
            Literal::Int(_) => Type::Int,
            Literal::Ip(_) => Type::IpAddr,
            Literal::Cidr(_) => Type::IpCidr,
            Literal::Regex(_) => Type::Regex,
        }
    }
}

impl Expr {
    /// Every predicate, depth first, in source order.
    pub fn predicates(&self) -> Vec<&Predicate> {
        let mut out = Vec::new();
        self.collect_predicates(&mut out);
        out
    }

    fn collect_predicates<'a>(&'a self, out: &mut Vec<&'a Predicate>) {
        match self {
            Expr::And(items) | Expr::Or(items) => items.iter().for_each(|e| e.collect_predicates(out)),
            Expr::Not(inner) => inner.collect_predicates(out),
            Expr::Predicate(p) => out.push(p),
        }
    }
}
