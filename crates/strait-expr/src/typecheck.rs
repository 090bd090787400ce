//! Field names and the type rules of predicates: which operators each field
//! type accepts and which literal each (field, operator) pair expects.

use crate::ast::{Field, Lhs, Literal, Op, Predicate, RegexLiteral, Type};
use crate::literal::RawLiteral;
use crate::RegexCompiler;

/// The fields an HTTP route expression can use, for error messages.
const FIELD_NAMES: &str = "`net.protocol`, `tls.sni`, `http.method`, `http.host`, `http.path`, \
`http.path.segments.<N>`, `http.path.segments.<N>_<M>`, `http.path.segments.len`, \
`http.headers.<name>`, `http.queries.<name>`, `net.src.ip`, `net.src.port`, `net.dst.ip`, `net.dst.port`";

/// Which part of a predicate an error is about.
pub(crate) enum Place {
    Lhs,
    Op,
    Rhs,
}

pub(crate) struct TypeError {
    pub place: Place,
    pub message: String,
}

fn at(place: Place, message: String) -> TypeError {
    TypeError { place, message }
}

/// Resolve a field name to a field.
pub(crate) fn resolve_field(name: &str) -> Result<Field, String> {
    Ok(match name {
        "net.protocol" => Field::NetProtocol,
        "tls.sni" => Field::TlsSni,
        "http.method" => Field::HttpMethod,
        "http.host" => Field::HttpHost,
        "http.path" => Field::HttpPath,
        "http.path.segments.len" => Field::PathSegmentCount,
        "net.src.ip" => Field::NetSrcIp,
        "net.src.port" => Field::NetSrcPort,
        "net.dst.ip" => Field::NetDstIp,
        "net.dst.port" => Field::NetDstPort,
        _ => return resolve_family(name),
    })
}

fn resolve_family(name: &str) -> Result<Field, String> {
    if let Some(segment) = name.strip_prefix("http.path.segments.") {
        return resolve_segment(name, segment);
    }
    if let Some(header) = name.strip_prefix("http.headers.") {
        if header.is_empty() {
            return Err("expected a header name after `http.headers.`".to_string());
        }
        return Ok(Field::Header(header.to_ascii_lowercase().replace('-', "_")));
    }
    if let Some(query) = name.strip_prefix("http.queries.") {
        if query.is_empty() {
            return Err("expected a query argument name after `http.queries.`".to_string());
        }
        return Ok(Field::Query(query.to_string()));
    }
    Err(format!("unknown field `{name}`; expected one of {FIELD_NAMES}"))
}

fn resolve_segment(name: &str, segment: &str) -> Result<Field, String> {
    let index = |text: &str| -> Option<usize> {
        let ok = !text.is_empty() && text.len() <= 6 && text.bytes().all(|b| b.is_ascii_digit());
        ok.then(|| text.parse().ok()).flatten()
    };
    let parsed = match segment.split_once('_') {
        None => index(segment).map(Field::PathSegment),
        Some((low, high)) => match (index(low), index(high)) {
            (Some(low), Some(high)) if low < high => Some(Field::PathSegmentRange(low, high)),
            _ => None,
        },
    };
    parsed.ok_or_else(|| {
        format!(
            "invalid field `{name}`; expected `http.path.segments.<N>`, `http.path.segments.<N>_<M>` with N < M, or `http.path.segments.len`"
        )
    })
}

fn operators_for(ty: Type) -> &'static [Op] {
    match ty {
        Type::String => &[
            Op::Equals,
            Op::NotEquals,
            Op::Regex,
            Op::Prefix,
            Op::Suffix,
            Op::Contains,
        ],
        Type::Int => &[
            Op::Equals,
            Op::NotEquals,
            Op::Greater,
            Op::GreaterOrEqual,
            Op::Less,
            Op::LessOrEqual,
        ],
        Type::IpAddr => &[Op::Equals, Op::NotEquals, Op::In, Op::NotIn],
        Type::IpCidr | Type::Regex => &[],
    }
}

fn expected_literal(ty: Type, op: Op) -> (Type, &'static str) {
    match (ty, op) {
        (Type::String, Op::Regex) => (Type::String, "a regex string literal"),
        (Type::String, _) => (Type::String, "a string literal"),
        (Type::Int, _) => (Type::Int, "an integer"),
        (Type::IpAddr, Op::In | Op::NotIn) => (Type::IpCidr, "a CIDR such as `10.0.0.0/8`"),
        _ => (Type::IpAddr, "an IP address"),
    }
}

fn raw_type(raw: &RawLiteral) -> Type {
    match raw {
        RawLiteral::String(_) => Type::String,
        RawLiteral::Int(_) => Type::Int,
        RawLiteral::Ip(_) => Type::IpAddr,
        RawLiteral::Cidr(_) => Type::IpCidr,
    }
}

/// Check a parsed predicate and build it, compiling a regex operand.
pub(crate) fn check_predicate(
    lhs: Lhs,
    op: Op,
    rhs: RawLiteral,
    regexes: &mut dyn RegexCompiler,
) -> Result<Predicate, TypeError> {
    let ty = lhs.field.ty();
    if lhs.lower && ty != Type::String {
        let message = format!("`lower()` applies to String fields; `{}` is {ty}", lhs.field);
        return Err(at(Place::Lhs, message));
    }
    let allowed = operators_for(ty);
    if !allowed.contains(&op) {
        let list: Vec<String> = allowed.iter().map(|o| format!("`{}`", o.symbol())).collect();
        let message = format!(
            "operator `{}` does not apply to `{}` ({ty}); expected one of {}",
            op.symbol(),
            lhs.field,
            list.join(", ")
        );
        return Err(at(Place::Op, message));
    }
    let (wanted, description) = expected_literal(ty, op);
    if raw_type(&rhs) != wanted {
        let message = format!(
            "`{} {}` expects {description}, found {}",
            lhs.field,
            op.symbol(),
            rhs.describe()
        );
        return Err(at(Place::Rhs, message));
    }
    let rhs = match rhs {
        RawLiteral::String(pattern) if op == Op::Regex => {
            let regex = regexes
                .compile(&pattern)
                .map_err(|reason| at(Place::Rhs, format!("invalid regex: {reason}")))?;
            Literal::Regex(RegexLiteral { pattern, regex })
        }
        RawLiteral::String(s) => Literal::String(s),
        RawLiteral::Int(i) => Literal::Int(i),
        RawLiteral::Ip(ip) => Literal::Ip(ip),
        RawLiteral::Cidr(c) => Literal::Cidr(c),
    };
    Ok(Predicate { lhs, op, rhs })
}
