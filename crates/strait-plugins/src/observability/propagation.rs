//! Trace context in request headers, as Kong 3.9's propagation module reads
//! and writes it (`kong/observability/tracing/propagation`): extractors for
//! b3 (multi and single header), w3c, jaeger, ot, datadog, aws and gcp, tried
//! in the configured order until one finds a context; headers to clear; and
//! injectors for the same formats (plus `preserve`: the format found).
//!
//! Ids are kept as Kong keeps them: trace ids normalized to 16 bytes and
//! span ids to 8 (zero-padded on the left, or cut to their last bytes), and
//! each injector writes them at the sizes its format allows, preferring the
//! size the incoming trace id had.

use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};

use crate::{IdentityFields, PluginError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    W3c,
    B3,
    B3Single,
    Jaeger,
    Ot,
    Datadog,
    Aws,
    Gcp,
}

impl Format {
    pub(crate) fn of(name: &str) -> Option<Format> {
        Some(match name {
            "w3c" => Format::W3c,
            "b3" => Format::B3,
            "b3-single" => Format::B3Single,
            "jaeger" => Format::Jaeger,
            "ot" => Format::Ot,
            "datadog" => Format::Datadog,
            "aws" => Format::Aws,
            "gcp" => Format::Gcp,
            _ => return None,
        })
    }

    /// The trace id sizes (bytes) the format writes, preferred first.
    fn trace_id_sizes(self) -> &'static [usize] {
        match self {
            Format::B3 | Format::B3Single | Format::Jaeger => &[16, 8],
            Format::Ot => &[8, 16],
            Format::Datadog => &[8],
            Format::W3c | Format::Aws | Format::Gcp => &[16],
        }
    }
}

/// What an extractor found (Kong's extracted context).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Extracted {
    /// 16 bytes.
    pub trace_id: Option<Vec<u8>>,
    /// The incoming trace id's size in bytes.
    pub trace_id_size: Option<usize>,
    /// 8 bytes.
    pub span_id: Option<Vec<u8>>,
    pub parent_id: Option<Vec<u8>>,
    /// The incoming span is shared with the server span (b3, jaeger).
    pub reuse_span_id: bool,
    pub should_sample: Option<bool>,
    /// b3's debug flag (`x-b3-flags: 1`, `d`).
    pub flags: Option<String>,
    /// b3 came in one `b3` header.
    pub single_header: bool,
    pub baggage: Vec<(String, String)>,
    /// The format it was found in.
    pub format: Option<Format>,
}

/// What an injector writes, borrowed from where the plugin keeps it (no
/// id copied to be written).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Outgoing<'a> {
    pub trace_id: &'a [u8],
    pub trace_id_size: Option<usize>,
    pub span_id: &'a [u8],
    pub parent_id: Option<&'a [u8]>,
    pub should_sample: Option<bool>,
    pub flags: Option<&'a str>,
    pub single_header: bool,
    pub baggage: &'a [(String, String)],
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Inject {
    Preserve,
    Format(Format),
}

/// A plugin's propagation settings (Kong's `propagation` record, with the
/// deprecated `header_type` / `default_header_type` translated).
#[derive(Debug, Clone)]
pub(crate) struct Propagation {
    extract: Vec<Format>,
    clear: Vec<HeaderName>,
    inject: Vec<Inject>,
    default_format: Format,
}

/// Kong's order of extraction for the deprecated `header_type`.
const LEGACY_EXTRACT: [Format; 7] = [
    Format::B3,
    Format::W3c,
    Format::Jaeger,
    Format::Ot,
    Format::Datadog,
    Format::Aws,
    Format::Gcp,
];

fn strings(value: Option<&Value>) -> Vec<&str> {
    value
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

impl Propagation {
    /// Kong's `get_plugin_params`: the `propagation` record as it is when
    /// it sets anything but `default_format`; else the deprecated fields.
    pub(crate) fn from_config(config: &Map<String, Value>) -> Result<Propagation, PluginError> {
        let record = config.get("propagation").and_then(Value::as_object);
        let format = |name: &str, at: &str| {
            Format::of(name).ok_or_else(|| PluginError::invalid(at, format!("unknown format '{name}'")))
        };
        let set = |field: &str| record.and_then(|r| r.get(field)).is_some_and(|v| !v.is_null());
        let mut default_format = match record.and_then(|r| r.get("default_format")).and_then(Value::as_str) {
            Some(name) => format(name, "propagation.default_format")?,
            None => Format::B3,
        };
        if set("extract") || set("clear") || set("inject") {
            let record = record.cloned().unwrap_or_default();
            return Ok(Propagation {
                extract: strings(record.get("extract"))
                    .into_iter()
                    .map(|f| format(f, "propagation.extract"))
                    .collect::<Result<_, _>>()?,
                clear: strings(record.get("clear"))
                    .into_iter()
                    .filter_map(|h| HeaderName::from_bytes(h.as_bytes()).ok())
                    .collect(),
                inject: strings(record.get("inject"))
                    .into_iter()
                    .map(|f| match f {
                        "preserve" => Ok(Inject::Preserve),
                        f => format(f, "propagation.inject").map(Inject::Format),
                    })
                    .collect::<Result<_, _>>()?,
                default_format,
            });
        }
        if let Some(name) = config.get("default_header_type").and_then(Value::as_str) {
            default_format = format(name, "default_header_type")?;
        }
        let (extract, inject) = match config.get("header_type").and_then(Value::as_str) {
            None => (Vec::new(), Vec::new()),
            Some("preserve") => (LEGACY_EXTRACT.to_vec(), vec![Inject::Preserve]),
            Some("ignore") => (Vec::new(), vec![Inject::Format(default_format)]),
            Some(other) => (
                LEGACY_EXTRACT.to_vec(),
                vec![Inject::Preserve, Inject::Format(format(other, "header_type")?)],
            ),
        };
        Ok(Propagation {
            extract,
            clear: Vec::new(),
            inject,
            default_format,
        })
    }

    /// The first context an extractor finds, in the configured order.
    #[cfg(test)]
    pub(crate) fn extract(&self, headers: &HeaderMap) -> Extracted {
        self.extract_named(headers).0
    }

    /// [`Propagation::extract`], and whether the request names any field
    /// a format reads or writes ([`names_any_trace`]).
    pub(crate) fn extract_named(&self, headers: &HeaderMap) -> (Extracted, bool) {
        // One pass over the request's few header names spares the dozen
        // lookups of a request that carries no trace (most of them).
        if !names_any_trace(headers) {
            return (Extracted::default(), false);
        }
        (self.extract_found(headers), true)
    }

    fn extract_found(&self, headers: &HeaderMap) -> Extracted {
        for format in &self.extract {
            if let Some(mut found) = extract(*format, headers) {
                found.format = Some(*format);
                found.trace_id_size = found.trace_id.as_ref().map(Vec::len);
                found.trace_id = found.trace_id.map(|id| sized(&id, 16));
                found.span_id = found.span_id.map(|id| sized(&id, 8));
                found.parent_id = found.parent_id.map(|id| sized(&id, 8));
                return found;
            }
        }
        Extracted::default()
    }

    /// Clears the configured headers, then writes `outgoing` in each
    /// configured format (`preserve`: the one found, else the default),
    /// each format once. With `beside` (the request names no trace field,
    /// [`names_any_trace`]), the fields are added beside the map
    /// ([`IdentityFields::add_absent`]), else set in it.
    pub(crate) fn inject(
        &self,
        found: Option<Format>,
        outgoing: &Outgoing<'_>,
        headers: &mut HeaderMap,
        beside: Option<&mut IdentityFields>,
    ) {
        for name in &self.clear {
            headers.remove(name);
        }
        let mut target = Target {
            headers,
            beside,
            lines: [0; LINES],
            len: 0,
        };
        let mut written = 0u16;
        for inject in &self.inject {
            let mut format = match inject {
                Inject::Format(format) => *format,
                Inject::Preserve => found.unwrap_or(self.default_format),
            };
            if *inject == Inject::Preserve && format == Format::B3 && outgoing.single_header {
                format = Format::B3Single;
            }
            // A format named twice writes the same fields again: once is
            // what a map's replacing insert would have left.
            if written & (1 << format as u16) == 0 {
                written |= 1 << format as u16;
                inject_headers(format, outgoing, &mut target);
            }
        }
        target.flush();
    }
}

/// True when the request has a field of a name some format reads or
/// writes: without one, an injector's fields can be added beside the map.
pub(crate) fn names_any_trace(headers: &HeaderMap) -> bool {
    headers.keys().any(|name| names_trace(name.as_str()))
}

/// The bytes of header lines an injector gathers on the stack before they
/// go beside the map at once (b3's four take 133).
const LINES: usize = 256;

/// Where an injector's fields go: the request's map, or beside it (as
/// lines gathered on the stack, added with one copy).
struct Target<'a> {
    headers: &'a mut HeaderMap,
    beside: Option<&'a mut IdentityFields>,
    lines: [u8; LINES],
    len: usize,
}

impl Target<'_> {
    /// `value`: bytes a valid header value holds (digits, letters and the
    /// punctuation of the formats, or a checked value).
    fn put(&mut self, name: &HeaderName, value: &[u8]) {
        let Some(fields) = &mut self.beside else {
            if let Ok(value) = HeaderValue::from_bytes(value) {
                self.headers.insert(name, value);
            }
            return;
        };
        let name = name.as_str().as_bytes();
        let need = name.len() + value.len() + 4;
        if self.len + need > LINES {
            fields.add_absent_lines(self.headers, &self.lines[..self.len]);
            self.len = 0;
        }
        if need > LINES {
            fields.add_absent_lines(self.headers, &[name, b": ", value, b"\r\n"].concat());
            return;
        }
        let mut at = self.len;
        for part in [name, b": ", value, b"\r\n"] {
            self.lines[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        self.len = at;
    }

    fn flush(&mut self) {
        if let Some(fields) = &mut self.beside {
            if self.len > 0 {
                fields.add_absent_lines(self.headers, &self.lines[..self.len]);
                self.len = 0;
            }
        }
    }
}

/// An id of up to 16 bytes, on the stack.
struct Id {
    bytes: [u8; 16],
    len: usize,
}

impl std::ops::Deref for Id {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// [`sized`] without an allocation, for the ids an injector writes (16 bytes at most).
fn sized_id(id: &[u8], size: usize) -> Id {
    let size = size.min(16);
    let mut bytes = [0u8; 16];
    let kept = id.len().min(size);
    bytes[size - kept..size].copy_from_slice(&id[id.len() - kept..]);
    Id { bytes, len: size }
}

/// Kong's `to_id_size`: the last `size` bytes, or zeros on the left.
pub(crate) fn sized(id: &[u8], size: usize) -> Vec<u8> {
    match id.len() {
        len if len > size => id[len - size..].to_vec(),
        len => {
            let mut out = vec![0u8; size - len];
            out.extend_from_slice(id);
            out
        }
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for chunk in bytes.chunks(16) {
        let (digits, len) = hex_id(chunk);
        // Only ASCII digits and letters.
        out.push_str(std::str::from_utf8(&digits[..len]).unwrap_or_default());
    }
    out
}

/// b3's fields for a 16-byte trace with a parent and no flags, each digit
/// a placeholder, and where each value starts.
const B3_LINES: &[u8] = b"x-b3-traceid: 00000000000000000000000000000000\r\n\
x-b3-spanid: 0000000000000000\r\n\
x-b3-parentspanid: 0000000000000000\r\n\
x-b3-sampled: 0\r\n";
const B3_TRACE: usize = "x-b3-traceid: ".len();
const B3_SPAN: usize = B3_TRACE + 32 + "\r\nx-b3-spanid: ".len();
const B3_PARENT: usize = B3_SPAN + 16 + "\r\nx-b3-parentspanid: ".len();
const B3_SAMPLED: usize = B3_PARENT + 16 + "\r\nx-b3-sampled: ".len();

/// `id` in lowercase hex into `out` (twice its length).
fn put_hex_at(out: &mut [u8], id: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut at = 0;
    while at < id.len() && 2 * at + 1 < out.len() {
        out[2 * at] = DIGITS[(id[at] >> 4) as usize];
        out[2 * at + 1] = DIGITS[(id[at] & 15) as usize];
        at += 1;
    }
}

/// b3's multi-header fields, one at a time, the ids' digits on the stack:
/// `x-b3-flags` when the caller's came with it, else `x-b3-sampled`.
fn b3_fields(
    trace: &[u8],
    span: &[u8],
    parent: Option<&Id>,
    flags: Option<&str>,
    sampled: bool,
    target: &mut Target<'_>,
) {
    let (digits, len) = hex_id(trace);
    target.put(&X_B3_TRACEID, &digits[..len]);
    let (digits, len) = hex_id(span);
    target.put(&X_B3_SPANID, &digits[..len]);
    if let Some(parent) = parent {
        let (digits, len) = hex_id(parent);
        target.put(&X_B3_PARENTSPANID, &digits[..len]);
    }
    match flags {
        Some(flags) => target.put(&X_B3_FLAGS, flags.as_bytes()),
        None => target.put(&X_B3_SAMPLED, sampled_digit(sampled)),
    }
}

/// An id of up to 16 bytes in lowercase hex, on the stack.
fn hex_id(id: &[u8]) -> ([u8; 32], usize) {
    let mut digits = [0u8; 32];
    let id = &id[..id.len().min(16)];
    put_hex_at(&mut digits, id);
    (digits, id.len() * 2)
}

fn sampled_digit(sampled: bool) -> &'static [u8] {
    if sampled {
        b"1"
    } else {
        b"0"
    }
}

/// Kong's `from_hex`: an odd length gets a leading zero.
fn from_hex(text: &str) -> Option<Vec<u8>> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let padded;
    let text = match text.len() % 2 {
        1 => {
            padded = format!("0{text}");
            padded.as_str()
        }
        _ => text,
    };
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).ok())
        .collect()
}

/// A decimal number (up to 128 bits) as big-endian bytes without leading zeros.
fn from_dec(text: &str) -> Option<Vec<u8>> {
    let value: u128 = text.parse().ok()?;
    let bytes = value.to_be_bytes();
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(15);
    Some(bytes[first..].to_vec())
}

fn to_dec(bytes: &[u8]) -> String {
    let value = bytes.iter().fold(0u128, |acc, b| (acc << 8) | u128::from(*b));
    value.to_string()
}

// The fields each format reads and writes, named once (a lookup by a
// `&str` parses and hashes the name on every request).
const B3: HeaderName = HeaderName::from_static("b3");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
const X_B3_TRACEID: HeaderName = HeaderName::from_static("x-b3-traceid");
const X_B3_SPANID: HeaderName = HeaderName::from_static("x-b3-spanid");
const X_B3_PARENTSPANID: HeaderName = HeaderName::from_static("x-b3-parentspanid");
const X_B3_SAMPLED: HeaderName = HeaderName::from_static("x-b3-sampled");
const X_B3_FLAGS: HeaderName = HeaderName::from_static("x-b3-flags");
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const UBER_TRACE_ID: HeaderName = HeaderName::from_static("uber-trace-id");
const OT_SAMPLED: HeaderName = HeaderName::from_static("ot-tracer-sampled");
const OT_TRACEID: HeaderName = HeaderName::from_static("ot-tracer-traceid");
const OT_SPANID: HeaderName = HeaderName::from_static("ot-tracer-spanid");
const DD_TRACE_ID: HeaderName = HeaderName::from_static("x-datadog-trace-id");
const DD_PARENT_ID: HeaderName = HeaderName::from_static("x-datadog-parent-id");
const DD_PRIORITY: HeaderName = HeaderName::from_static("x-datadog-sampling-priority");
const AMZN_TRACE_ID: HeaderName = HeaderName::from_static("x-amzn-trace-id");
const GCP_TRACE: HeaderName = HeaderName::from_static("x-cloud-trace-context");

/// Whether any format reads a header of this name: a request without one
/// extracts nothing in any format.
pub(crate) fn names_trace(name: &str) -> bool {
    matches!(
        name,
        "b3" | "tracestate" | "traceparent" | "uber-trace-id" | "x-amzn-trace-id" | "x-cloud-trace-context"
    ) || name.starts_with("x-b3-")
        || name.starts_with("ot-tracer-")
        || name.starts_with("x-datadog-")
}

fn header<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn is_hex_of(text: &str, lens: &[usize]) -> bool {
    lens.contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

fn baggage(headers: &HeaderMap, prefix: &str) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(name, value)| {
            let key = name.as_str().strip_prefix(prefix)?;
            let value = crate::form::decode(value.to_str().ok()?);
            Some((key.to_string(), value.into_owned()))
        })
        .collect()
}

fn extract(format: Format, headers: &HeaderMap) -> Option<Extracted> {
    match format {
        Format::B3 | Format::B3Single => extract_b3(headers),
        Format::W3c => extract_w3c(headers),
        Format::Jaeger => extract_jaeger(headers),
        Format::Ot => extract_ot(headers),
        Format::Datadog => extract_datadog(headers),
        Format::Aws => extract_aws(headers),
        Format::Gcp => extract_gcp(headers),
    }
}

/// b3: the single `b3` header (or `tracestate: b3=...`), then the
/// `x-b3-*` headers for what it did not give.
fn extract_b3(headers: &HeaderMap) -> Option<Extracted> {
    let any = [
        &B3,
        &TRACESTATE,
        &X_B3_TRACEID,
        &X_B3_SPANID,
        &X_B3_PARENTSPANID,
        &X_B3_SAMPLED,
        &X_B3_FLAGS,
    ];
    if !any.iter().any(|h| headers.contains_key(*h)) {
        return None;
    }
    let mut out = Extracted {
        reuse_span_id: true,
        ..Extracted::default()
    };
    let single = header(headers, &B3).map(str::to_string).or_else(|| {
        headers
            .get_all(&TRACESTATE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| v.strip_prefix("b3=").map(str::to_string))
    });
    let (mut trace_id, mut span_id, mut parent_id) = (None, None, None);
    if let Some(single) = single {
        out.single_header = true;
        match single.as_str() {
            "1" => out.should_sample = Some(true),
            "d" => {
                out.should_sample = Some(true);
                out.flags = Some("1".into());
            }
            "0" => out.should_sample = Some(false),
            value => {
                let parts: Vec<&str> = value.split('-').collect();
                let valid = parts.len() >= 2
                    && parts.len() <= 4
                    && is_hex_of(parts[0], &[16, 32])
                    && is_hex_of(parts[1], &[16])
                    && parts.get(2).is_none_or(|s| matches!(*s, "0" | "1" | "d" | ""))
                    && parts.get(3).is_none_or(|p| p.is_empty() || is_hex_of(p, &[16]));
                if valid {
                    match parts.get(2).copied() {
                        Some("1") => out.should_sample = Some(true),
                        Some("d") => {
                            out.should_sample = Some(true);
                            out.flags = Some("1".into());
                        }
                        Some("0") => out.should_sample = Some(false),
                        _ => {}
                    }
                    trace_id = Some(parts[0].to_string());
                    span_id = Some(parts[1].to_string());
                    parent_id = parts.get(3).filter(|p| !p.is_empty()).map(|p| p.to_string());
                }
            }
        }
    }
    let sampled = match header(headers, &X_B3_SAMPLED) {
        Some("1" | "true") => Some(true),
        Some("0" | "false") => Some(false),
        _ => None,
    };
    let flags = header(headers, &X_B3_FLAGS);
    let multi_sampled = match flags {
        Some("1") => Some(true),
        _ => sampled,
    };
    if out.should_sample.is_none() {
        out.should_sample = multi_sampled;
    }
    if out.flags.is_none() {
        out.flags = flags.map(str::to_string);
    }
    let multi_trace = header(headers, &X_B3_TRACEID);
    let multi_span = header(headers, &X_B3_SPANID);
    let multi_parent = header(headers, &X_B3_PARENTSPANID);
    let multi_valid = multi_trace.is_none_or(|t| is_hex_of(t, &[16, 32]))
        && multi_span.is_none_or(|s| is_hex_of(s, &[16]))
        && multi_parent.is_none_or(|p| is_hex_of(p, &[16]));
    if multi_valid {
        trace_id = trace_id.or(multi_trace.map(str::to_string));
        span_id = span_id.or(multi_span.map(str::to_string));
        parent_id = parent_id.or(multi_parent.map(str::to_string));
    }
    if let Some(trace) = trace_id {
        out.trace_id = from_hex(&trace);
        out.span_id = span_id.and_then(|s| from_hex(&s));
        out.parent_id = parent_id.and_then(|p| from_hex(&p));
    }
    Some(out)
}

fn extract_w3c(headers: &HeaderMap) -> Option<Extracted> {
    let value = header(headers, &TRACEPARENT)?;
    let parts: Vec<&str> = value.split('-').collect();
    let [version, trace, parent, flags] = parts.as_slice() else {
        return None;
    };
    let zero = |t: &str| t.bytes().all(|b| b == b'0');
    if *version != "00"
        || !is_hex_of(trace, &[32])
        || zero(trace)
        || !is_hex_of(parent, &[16])
        || zero(parent)
        || !is_hex_of(flags, &[2])
    {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some(Extracted {
        trace_id: from_hex(trace),
        span_id: from_hex(parent),
        should_sample: Some(flags & 1 == 1),
        ..Extracted::default()
    })
}

fn extract_jaeger(headers: &HeaderMap) -> Option<Extracted> {
    let value = header(headers, &UBER_TRACE_ID)?;
    let parts: Vec<&str> = value.split(':').collect();
    let [trace, span, parent, flags] = parts.as_slice() else {
        return None;
    };
    let hex = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_hexdigit());
    let zero = |t: &str| t.bytes().all(|b| b == b'0');
    if !(hex(trace) && hex(span) && hex(parent) && hex(flags))
        || trace.len() > 32
        || zero(trace)
        || span.len() > 16
        || zero(span)
        || !(1..=2).contains(&flags.len())
    {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some(Extracted {
        trace_id: from_hex(trace),
        span_id: from_hex(span),
        parent_id: from_hex(parent),
        reuse_span_id: true,
        should_sample: Some(flags & 1 == 1),
        baggage: baggage(headers, "uberctx-"),
        ..Extracted::default()
    })
}

fn extract_ot(headers: &HeaderMap) -> Option<Extracted> {
    if ![&OT_SAMPLED, &OT_TRACEID, &OT_SPANID]
        .iter()
        .any(|h| headers.contains_key(*h))
    {
        return None;
    }
    let should_sample = match header(headers, &OT_SAMPLED) {
        Some("1" | "true") => Some(true),
        Some("0" | "false") => Some(false),
        _ => None,
    };
    let trace = header(headers, &OT_TRACEID);
    let span = header(headers, &OT_SPANID);
    let valid = trace.is_none_or(|t| is_hex_of(t, &[16, 32])) && span.is_none_or(|s| is_hex_of(s, &[16]));
    let (trace_id, span_id) = match (valid, trace) {
        (true, Some(trace)) => (from_hex(trace), span.and_then(from_hex)),
        _ => (None, None),
    };
    Some(Extracted {
        trace_id,
        span_id,
        should_sample,
        baggage: baggage(headers, "ot-baggage-"),
        ..Extracted::default()
    })
}

fn extract_datadog(headers: &HeaderMap) -> Option<Extracted> {
    let any = [
        "x-datadog-trace-id",
        "x-datadog-parent-id",
        "x-datadog-sampling-priority",
    ];
    if !any.iter().any(|h| headers.contains_key(*h)) {
        return None;
    }
    let should_sample = match header(headers, &DD_PRIORITY) {
        Some("1" | "2") => Some(true),
        Some("0" | "-1") => Some(false),
        Some(_) => return None,
        None => None,
    };
    let decimal = |name: &HeaderName| {
        header(headers, name)
            .map(str::trim)
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .and_then(from_dec)
    };
    let trace_id = decimal(&DD_TRACE_ID);
    let span_id = trace_id.as_ref().and_then(|_| decimal(&DD_PARENT_ID));
    Some(Extracted {
        trace_id,
        span_id,
        should_sample,
        ..Extracted::default()
    })
}

fn extract_aws(headers: &HeaderMap) -> Option<Extracted> {
    let value = header(headers, &AMZN_TRACE_ID)?;
    let mut out = Extracted::default();
    for pair in value.split(';') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match (key.trim(), value.trim()) {
            ("Root", root) => {
                let parts: Vec<&str> = root.split('-').collect();
                match parts.as_slice() {
                    ["1", time, unique] if root.len() == 35 && is_hex_of(time, &[8]) && is_hex_of(unique, &[24]) => {
                        out.trace_id = from_hex(&format!("{time}{unique}"));
                    }
                    _ => return None,
                }
            }
            ("Parent", parent) => {
                if !is_hex_of(parent, &[16]) {
                    return None;
                }
                out.span_id = from_hex(parent);
            }
            ("Sampled", sampled) => match sampled {
                "0" => out.should_sample = Some(false),
                "1" => out.should_sample = Some(true),
                _ => return None,
            },
            _ => {}
        }
    }
    Some(out)
}

fn extract_gcp(headers: &HeaderMap) -> Option<Extracted> {
    let value = header(headers, &GCP_TRACE)?;
    let (trace, rest) = value.split_once('/')?;
    let (span, options) = match rest.split_once(";o=") {
        Some((span, flag)) if flag.len() == 1 && flag.bytes().all(|b| b.is_ascii_digit()) => (span, Some(flag)),
        Some(_) => return None,
        None => (rest, None),
    };
    let lower_hex = trace.len() == 32 && trace.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !lower_hex || span.is_empty() || span.len() > 20 || !span.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Extracted {
        trace_id: from_hex(trace),
        span_id: from_dec(span),
        should_sample: Some(options == Some("1")),
        ..Extracted::default()
    })
}

/// The headers `format` writes for `ctx`, ids at the format's sizes.
fn inject_headers(format: Format, ctx: &Outgoing<'_>, target: &mut Target<'_>) {
    let sizes = format.trace_id_sizes();
    let size = ctx.trace_id_size.filter(|s| sizes.contains(s)).unwrap_or(sizes[0]);
    let trace = sized_id(ctx.trace_id, size);
    let span = sized_id(ctx.span_id, 8);
    let parent = ctx.parent_id.map(|p| sized_id(p, 8));
    let sampled = ctx.should_sample == Some(true);
    match format {
        Format::B3 if trace.len() == 16 && ctx.flags.is_none() => {
            let Some(parent) = &parent else {
                return b3_fields(&trace, &span, None, None, sampled, target);
            };
            if target.beside.is_none() || target.len + B3_LINES.len() > LINES {
                return b3_fields(&trace, &span, Some(parent), None, sampled, target);
            }
            // The usual request's four fields: a template's copy with the
            // digits written into it.
            let lines = &mut target.lines[target.len..target.len + B3_LINES.len()];
            lines.copy_from_slice(B3_LINES);
            put_hex_at(&mut lines[B3_TRACE..B3_TRACE + 32], &trace);
            put_hex_at(&mut lines[B3_SPAN..B3_SPAN + 16], &span);
            put_hex_at(&mut lines[B3_PARENT..B3_PARENT + 16], parent);
            lines[B3_SAMPLED] = sampled_digit(sampled)[0];
            target.len += B3_LINES.len();
        }
        Format::B3 => b3_fields(&trace, &span, parent.as_ref(), ctx.flags, sampled, target),
        Format::B3Single => {
            let flag = match (ctx.flags, ctx.should_sample) {
                (Some("1"), _) => Some("d"),
                (_, Some(true)) => Some("1"),
                (_, Some(false)) => Some("0"),
                _ => None,
            };
            let mut value = format!("{}-{}", hex(&trace), hex(&span));
            if let Some(flag) = flag {
                value.push('-');
                value.push_str(flag);
            }
            if let Some(parent) = &parent {
                value.push('-');
                value.push_str(&hex(parent));
            }
            target.put(&B3, value.as_bytes());
        }
        Format::W3c => {
            let value = format!(
                "00-{}-{}-{}",
                hex(&trace),
                hex(&span),
                if sampled { "01" } else { "00" }
            );
            target.put(&TRACEPARENT, value.as_bytes());
        }
        Format::Jaeger => {
            let value = format!(
                "{}:{}:{}:{}",
                hex(&trace),
                hex(&span),
                parent.as_deref().map_or_else(|| "0".to_string(), hex),
                if sampled { "01" } else { "00" }
            );
            target.put(&UBER_TRACE_ID, value.as_bytes());
            for (key, value) in ctx.baggage {
                if let Ok(name) = HeaderName::from_bytes(format!("uberctx-{key}").as_bytes()) {
                    target.put(&name, crate::form::encode(value).as_bytes());
                }
            }
        }
        Format::Ot => {
            target.put(&OT_TRACEID, hex(&trace).as_bytes());
            target.put(&OT_SPANID, hex(&span).as_bytes());
            if let Some(sampled) = ctx.should_sample {
                target.put(&OT_SAMPLED, sampled_digit(sampled));
            }
            for (key, value) in ctx.baggage {
                if let Ok(name) = HeaderName::from_bytes(format!("ot-baggage-{key}").as_bytes()) {
                    target.put(&name, crate::form::encode(value).as_bytes());
                }
            }
        }
        Format::Datadog => {
            target.put(&DD_TRACE_ID, to_dec(&trace).as_bytes());
            target.put(&DD_PARENT_ID, to_dec(&span).as_bytes());
            if let Some(sampled) = ctx.should_sample {
                target.put(&DD_PRIORITY, sampled_digit(sampled));
            }
        }
        Format::Aws => {
            let trace = hex(&trace);
            let value = format!(
                "Root=1-{}-{};Parent={};Sampled={}",
                &trace[..8],
                &trace[8..],
                hex(&span),
                if sampled { "1" } else { "0" }
            );
            target.put(&AMZN_TRACE_ID, value.as_bytes());
        }
        Format::Gcp => {
            let value = format!(
                "{}/{};o={}",
                hex(&trace),
                to_dec(&span),
                if sampled { "1" } else { "0" }
            );
            target.put(&GCP_TRACE, value.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests;
