//! Scanning of right-hand-side literals: strings (`"..."` with escapes, raw
//! `r#"..."#`), integers (decimal, `0x` hex, leading-zero octal), IPv4/IPv6
//! addresses and CIDRs.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use crate::ast::Cidr;

/// A literal as written, before type checking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RawLiteral {
    /// Shared: the router keeps this very allocation as its operand.
    String(Arc<str>),
    Int(i64),
    Ip(IpAddr),
    Cidr(Cidr),
}

impl RawLiteral {
    pub(crate) fn describe(&self) -> String {
        match self {
            RawLiteral::String(s) => format!("string {s:?}"),
            RawLiteral::Int(i) => format!("integer `{i}`"),
            RawLiteral::Ip(ip) => format!("IP address `{ip}`"),
            RawLiteral::Cidr(c) => format!("CIDR `{}/{}`", c.addr, c.prefix_len),
        }
    }
}

/// Scan a quoted string starting at `"`; returns the value and the bytes used.
pub(crate) fn scan_string(input: &str) -> Result<(Arc<str>, usize), (usize, String)> {
    let body = input.get(1..).unwrap_or("");
    // Most strings have no escape: one allocation, straight from the source.
    match body.find(['"', '\\']) {
        Some(end) if body[end..].starts_with('"') => Ok((Arc::from(&body[..end]), end + 2)),
        _ => scan_escaped_string(input),
    }
}

fn scan_escaped_string(input: &str) -> Result<(Arc<str>, usize), (usize, String)> {
    let mut out = String::new();
    let mut chars = input.char_indices().skip(1);
    while let Some((at, ch)) = chars.next() {
        match ch {
            '"' => return Ok((Arc::from(out), at + 1)),
            '\\' => match chars.next() {
                Some((_, 'n')) => out.push('\n'),
                Some((_, 'r')) => out.push('\r'),
                Some((_, 't')) => out.push('\t'),
                Some((_, '"')) => out.push('"'),
                Some((_, '\\')) => out.push('\\'),
                Some((bad_at, bad)) => {
                    return Err((
                        bad_at - 1,
                        format!("invalid escape `\\{bad}`; expected one of `\\\"`, `\\\\`, `\\n`, `\\r`, `\\t`"),
                    ))
                }
                None => break,
            },
            other => out.push(other),
        }
    }
    Err((0, "unterminated string; expected a closing `\"`".to_string()))
}

/// Scan a raw string starting at `r#"`; returns the value and the bytes used.
pub(crate) fn scan_raw_string(input: &str) -> Result<(Arc<str>, usize), (usize, String)> {
    let body = &input[3..];
    match body.find("\"#") {
        Some(end) => Ok((Arc::from(&body[..end]), 3 + end + 2)),
        None => Err((0, "unterminated raw string; expected a closing `\"#`".to_string())),
    }
}

/// Characters that can make up an integer, IP or CIDR literal.
pub(crate) fn is_bare_literal_char(ch: char) -> bool {
    ch.is_ascii_hexdigit() || matches!(ch, ':' | '.' | '/' | '-' | 'x' | 'X')
}

/// Classify a run of bare-literal characters.
pub(crate) fn parse_bare(text: &str) -> Result<RawLiteral, String> {
    if text.contains(':') || (text.contains('.') && !text.starts_with('-')) {
        return parse_ip_or_cidr(text);
    }
    parse_int(text).map(RawLiteral::Int)
}

fn parse_ip_or_cidr(text: &str) -> Result<RawLiteral, String> {
    let bad = || format!("invalid IP address or CIDR `{text}`");
    let (addr, prefix) = match text.split_once('/') {
        Some((addr, prefix)) => (addr, Some(prefix)),
        None => (text, None),
    };
    let ip: IpAddr = if addr.contains(':') {
        IpAddr::V6(addr.parse::<Ipv6Addr>().map_err(|_| bad())?)
    } else {
        IpAddr::V4(addr.parse::<Ipv4Addr>().map_err(|_| bad())?)
    };
    let Some(prefix) = prefix else {
        return Ok(RawLiteral::Ip(ip));
    };
    if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let len: u8 = prefix.parse().map_err(|_| bad())?;
    Cidr::new(ip, len)
        .map(RawLiteral::Cidr)
        .ok_or_else(|| format!("CIDR prefix length {len} is too long for `{addr}`"))
}

fn parse_int(text: &str) -> Result<i64, String> {
    let bad = || format!("invalid integer `{text}`");
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (radix, digits) = if let Some(hex) = digits.strip_prefix("0x") {
        (16, hex)
    } else if digits.len() > 1 && digits.starts_with('0') && digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        (8, &digits[1..])
    } else {
        (10, digits)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(bad());
    }
    let magnitude = i128::from_str_radix(digits, radix).map_err(|_| bad())?;
    let value = if negative { -magnitude } else { magnitude };
    i64::try_from(value).map_err(|_| format!("integer `{text}` does not fit in 64 bits"))
}
