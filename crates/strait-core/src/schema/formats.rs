//! String formats Kong checks with custom validators (typedefs.lua): hosts,
//! SNIs, paths, header names, tags, names, targets, PEM blocks. Each returns
//! Kong's message on failure.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostKind {
    Name,
    Ipv4,
    Ipv6,
}

/// A host with an optional port, as Kong's `normalize_ip` splits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostPort {
    pub kind: HostKind,
    pub host: String,
    pub port: Option<u16>,
}

pub(crate) const INVALID_PORT: &str = "invalid port number";

fn parse_port(text: &str) -> Result<u16, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(INVALID_PORT.to_string());
    }
    text.parse::<u16>().map_err(|_| INVALID_PORT.to_string())
}

/// Splits `host[:port]`, `[ipv6][:port]` or a bare IPv6 address.
pub(crate) fn normalize_host(address: &str) -> Result<HostPort, String> {
    if let Some(rest) = address.strip_prefix('[') {
        let (ip, after) = rest.split_once(']').ok_or_else(|| invalid_host(address))?;
        ip.parse::<Ipv6Addr>().map_err(|_| invalid_host(address))?;
        let port = match after {
            "" => None,
            _ => Some(parse_port(after.strip_prefix(':').unwrap_or("x"))?),
        };
        return Ok(host_port(HostKind::Ipv6, ip, port));
    }
    if address.matches(':').count() > 1 {
        address.parse::<Ipv6Addr>().map_err(|_| invalid_host(address))?;
        return Ok(host_port(HostKind::Ipv6, address, None));
    }
    let (host, port) = match address.split_once(':') {
        Some((host, port)) => (host, Some(parse_port(port)?)),
        None => (address, None),
    };
    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') && !host.is_empty() {
        host.parse::<Ipv4Addr>().map_err(|_| invalid_host(address))?;
        return Ok(host_port(HostKind::Ipv4, host, port));
    }
    if !is_hostname(host) {
        return Err(invalid_host(address));
    }
    Ok(host_port(HostKind::Name, host, port))
}

fn host_port(kind: HostKind, host: &str, port: Option<u16>) -> HostPort {
    HostPort {
        kind,
        host: host.to_string(),
        port,
    }
}

fn invalid_host(address: &str) -> String {
    format!("invalid hostname: {address}")
}

fn is_hostname(name: &str) -> bool {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.';
    !name.is_empty()
        && name.bytes().all(allowed)
        && name
            .split('.')
            .all(|label| !label.is_empty() && !label.starts_with('-') && !label.ends_with('-'))
}

/// typedefs.host: a host name or IP, no port.
pub fn host(value: &str) -> Result<(), String> {
    match normalize_host(value) {
        Err(e) if e == INVALID_PORT => Err("must not have a port".into()),
        Err(_) => Err(format!("invalid value: {value}")),
        Ok(parsed) if parsed.port.is_some() => Err("must not have a port".into()),
        Ok(_) => Ok(()),
    }
}

/// typedefs.host_with_optional_port.
pub fn host_with_optional_port(value: &str) -> Result<(), String> {
    normalize_host(value).map(|_| ())
}

/// typedefs.sni: a host name (not an IP), no port.
pub fn sni(value: &str) -> Result<(), String> {
    match normalize_host(value) {
        Err(e) if e == INVALID_PORT => Err("must not have a port".into()),
        Err(_) => Err(format!("invalid value: {value}")),
        Ok(parsed) if parsed.kind != HostKind::Name => Err("must not be an IP".into()),
        Ok(parsed) if parsed.port.is_some() => Err("must not have a port".into()),
        Ok(_) => Ok(()),
    }
}

/// typedefs.wildcard_host: an SNI with at most one `*`, first or last.
pub fn wildcard_host(value: &str) -> Result<(), String> {
    if let Some(at) = value.find('*') {
        if at != 0 && at != value.len() - 1 {
            return Err("wildcard must be leftmost or rightmost character".into());
        }
        if value.matches('*').count() > 1 {
            return Err("only one wildcard must be specified".into());
        }
    }
    sni(&value.replace('*', "wildcard"))
}

/// Route `hosts` elements: one wildcard label at either end, optional port.
pub fn route_host(value: &str) -> Result<(), String> {
    if value.matches('*').count() > 1 {
        return Err("invalid wildcard: must have at most one wildcard".into());
    }
    if value.contains('*') && !value.starts_with("*.") && !value.ends_with(".*") {
        return Err("invalid wildcard: must be placed at leftmost or rightmost label".into());
    }
    host_with_optional_port(&value.replace('*', "abc"))
}

/// Upstream names: a host name, no IP, no port.
pub fn upstream_name(value: &str) -> Result<(), String> {
    match normalize_host(value) {
        Err(_) => Err(format!("Invalid name ('{value}'); must be a valid hostname")),
        Ok(p) if p.kind != HostKind::Name => Err(format!("Invalid name ('{value}'); no ip addresses allowed")),
        Ok(p) if p.port.is_some() => Err(format!("Invalid name ('{value}'); no port allowed")),
        Ok(_) => Ok(()),
    }
}

/// Target addresses: host or IP with optional port.
pub fn target(value: &str) -> Result<(), String> {
    normalize_host(value)
        .map(|_| ())
        .map_err(|_| format!("Invalid target ('{value}'); not a valid hostname or ip address"))
}

/// `host:port` with Kong's default target port 8000 when none is given.
pub(crate) fn target_with_port(value: &str) -> String {
    match normalize_host(value) {
        Ok(p) => {
            let port = p.port.unwrap_or(8000);
            match p.kind {
                HostKind::Ipv6 => format!("[{}]:{port}", p.host),
                _ => format!("{}:{port}", p.host),
            }
        }
        Err(_) => value.to_string(),
    }
}

/// typedefs.path (service paths).
pub fn service_path(value: &str) -> Result<(), String> {
    if !value.starts_with('/') {
        return Err("should start with: /".into());
    }
    if value.contains("//") {
        return Err("must not have empty segments".into());
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._~/%:@!$&'()*+,;=-".contains(c);
    if !value.chars().all(allowed) {
        return Err(format!(
            "invalid path: '{value}' (characters outside of the reserved list of RFC 3986 found)"
        ));
    }
    percent_encoding(value)
}

/// Every `%` must start a `%XX` escape.
fn percent_encoding(value: &str) -> Result<(), String> {
    let bytes = value.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let escape = bytes.get(i + 1..i + 3);
            if !escape.is_some_and(|e| e.iter().all(u8::is_ascii_hexdigit)) {
                let end = (i + 3).min(bytes.len());
                let shown = String::from_utf8_lossy(&bytes[i..end]);
                return Err(format!("invalid url-encoded value: '{shown}'"));
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    Ok(())
}

/// Message for a route path that is neither a prefix nor a regex path.
pub const ROUTE_PATH_START: &str = "should start with: / (or ~ for a regex)";

/// typedefs.router_path: `/prefix` or `~regex`; regexes must compile within
/// the router's limits ([`strait_expr::validate_regex`]: a pathological
/// pattern is a validation error, not an out-of-memory at compile time).
pub fn router_path(value: &str) -> Result<(), String> {
    if !value.starts_with('/') && !value.starts_with('~') {
        return Err(ROUTE_PATH_START.into());
    }
    if value.contains("//") {
        return Err("must not have empty segments".into());
    }
    percent_encoding(value)?;
    if let Some(pattern) = value.strip_prefix('~') {
        if let Err(error) = strait_expr::validate_regex(pattern) {
            return Err(format!("invalid regex: '{pattern}' ({error})"));
        }
    }
    Ok(())
}

/// A route `expression`, parsed and type-checked by `strait-expr` (the same
/// parser the router compiles with), so an invalid one is rejected with the
/// route's field path, a column and what was expected there.
pub fn route_expression(value: &str) -> Result<(), String> {
    strait_expr::parse(value)
        .map(|_| ())
        .map_err(|error| format!("invalid expression: {error}"))
}

/// utils.validate_header_name.
pub fn header_name(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("no header name provided".into());
    }
    if value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Ok(());
    }
    Err(format!(
        "bad header name '{value}', allowed characters are A-Z, a-z, 0-9, '_', and '-'"
    ))
}

/// Route header names: a header name that is not `host`.
pub fn route_header_name(value: &str) -> Result<(), String> {
    header_name(value)?;
    if value.eq_ignore_ascii_case("host") {
        return Err("cannot contain 'host' header, which must be specified in the 'hosts' attribute".into());
    }
    Ok(())
}

/// typedefs.http_method: upper-case letters only.
pub fn http_method(value: &str) -> Result<(), String> {
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_uppercase()) {
        Ok(())
    } else {
        Err(format!("invalid value: {value}"))
    }
}

/// typedefs.utf8_name: alphanumerics, `.`, `-`, `_`, `~`, or non-ASCII.
pub(crate) fn utf8_name(value: &str) -> Result<(), String> {
    let allowed = |c: char| !c.is_ascii() || c.is_ascii_alphanumeric() || "._~-".contains(c);
    if !value.is_empty() && value.chars().all(allowed) {
        return Ok(());
    }
    Err(format!(
        "invalid value '{value}': the only accepted ascii characters are alphanumerics or ., -, _, and ~"
    ))
}

/// typedefs.tag: printable ASCII except `,` and `/` (space allowed), or non-ASCII.
pub fn tag(value: &str) -> Result<(), String> {
    let allowed = |c: char| !c.is_ascii() || (c == ' ' || c.is_ascii_graphic()) && c != ',' && c != '/';
    if !value.is_empty() && value.chars().all(allowed) {
        return Ok(());
    }
    Err(format!(
        "invalid tag '{value}': expected printable ascii (except `,` and `/`) or valid utf-8 sequences"
    ))
}

/// typedefs.ip_or_cidr.
pub fn ip_or_cidr(value: &str) -> Result<(), String> {
    let valid = match value.split_once('/') {
        None => value.parse::<IpAddr>().is_ok(),
        Some((ip, bits)) => match (ip.parse::<IpAddr>(), bits.parse::<u8>()) {
            (Ok(IpAddr::V4(_)), Ok(bits)) => bits <= 32,
            (Ok(IpAddr::V6(_)), Ok(bits)) => bits <= 128,
            _ => false,
        },
    };
    match valid {
        true => Ok(()),
        false => Err(format!("invalid ip or cidr range: '{value}'")),
    }
}

fn has_pem_block(value: &str) -> bool {
    value.contains("-----BEGIN") && value.contains("-----END")
}

/// typedefs.certificate (structure only: a PEM block).
/// A cookie name (RFC 6265 token): visible ASCII without separators.
pub fn cookie_name(value: &str) -> Result<(), String> {
    let separator = |c: char| "()<>@,;:\\\"/[]?={} \t".contains(c);
    match value.chars().all(|c| c.is_ascii_graphic() && !separator(c)) {
        true => Ok(()),
        false => Err("bad cookie name".to_string()),
    }
}

/// A URI subject alternative name (`spiffe://cluster/ns/app`, `https://x`):
/// a scheme, `:`, and no whitespace.
pub fn san_uri(value: &str) -> Result<(), String> {
    let scheme_ok = value.split_once(':').is_some_and(|(scheme, rest)| {
        !rest.is_empty()
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    match scheme_ok && !value.chars().any(char::is_whitespace) {
        true => Ok(()),
        false => Err(format!("invalid URI: {value}")),
    }
}

pub fn certificate(value: &str) -> Result<(), String> {
    match has_pem_block(value) {
        true => Ok(()),
        false => Err("invalid certificate: expected a PEM-encoded certificate".into()),
    }
}

/// typedefs.key (structure only: a PEM block).
pub fn key(value: &str) -> Result<(), String> {
    match has_pem_block(value) {
        true => Ok(()),
        false => Err("invalid key: expected a PEM-encoded key".into()),
    }
}

/// PEM labels of the keys OpenSSL's `pkey.new` reads (public and private).
const KEY_LABELS: &[&str] = &[
    "PUBLIC KEY",
    "RSA PUBLIC KEY",
    "PRIVATE KEY",
    "RSA PRIVATE KEY",
    "EC PRIVATE KEY",
];

/// Kong's jwt `validate_ssl_key`: a PEM key whose body is base64 of exactly
/// one DER `SEQUENCE` (what every key format above is). Structure only: the
/// plugin that uses the key parses it fully.
pub fn pem_key(value: &str) -> Result<(), String> {
    let invalid = || "invalid key".to_string();
    let text = value.trim();
    let label = text
        .strip_prefix("-----BEGIN ")
        .and_then(|rest| rest.split_once("-----"))
        .map(|(label, _)| label)
        .filter(|label| KEY_LABELS.contains(label))
        .ok_or_else(invalid)?;
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let body = text
        .strip_prefix(begin.as_str())
        .and_then(|rest| rest.strip_suffix(end.as_str()))
        .ok_or_else(invalid)?;
    let der = decode_base64(body).ok_or_else(invalid)?;
    match der_sequence_len(&der) {
        Some(len) if len == der.len() => Ok(()),
        _ => Err(invalid()),
    }
}

/// Standard base64 with padding; whitespace (PEM line breaks) is skipped.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let symbols: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if symbols.is_empty() || !symbols.len().is_multiple_of(4) {
        return None;
    }
    let data = symbols
        .strip_suffix(b"==")
        .or_else(|| symbols.strip_suffix(b"="))
        .unwrap_or(&symbols);
    let mut out = Vec::with_capacity(data.len() * 3 / 4);
    let (mut bits, mut count) = (0u32, 0);
    for symbol in data {
        let value = ALPHABET.iter().position(|a| a == symbol)? as u32;
        bits = (bits << 6) | value;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    Some(out)
}

/// The total length (header and content) of the DER `SEQUENCE` that starts
/// `der`, if it starts with one.
fn der_sequence_len(der: &[u8]) -> Option<usize> {
    if der.first() != Some(&0x30) {
        return None;
    }
    let first = *der.get(1)?;
    if first < 0x80 {
        return Some(2 + usize::from(first));
    }
    let octets = usize::from(first & 0x7f);
    if octets == 0 || octets > 4 {
        return None;
    }
    let length = der
        .get(2..2 + octets)?
        .iter()
        .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
    Some(2 + octets + length)
}
