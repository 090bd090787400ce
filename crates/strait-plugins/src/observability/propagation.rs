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

use crate::PluginError;

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

/// What an injector writes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outgoing {
    pub trace_id: Vec<u8>,
    pub trace_id_size: Option<usize>,
    pub span_id: Vec<u8>,
    pub parent_id: Option<Vec<u8>>,
    pub should_sample: Option<bool>,
    pub flags: Option<String>,
    pub single_header: bool,
    pub baggage: Vec<(String, String)>,
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
    pub(crate) fn extract(&self, headers: &HeaderMap) -> Extracted {
        // One pass over the request's few header names spares the dozen
        // lookups of a request that carries no trace (most of them).
        if !headers.keys().any(|name| names_trace(name.as_str())) {
            return Extracted::default();
        }
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
    /// configured format (`preserve`: the one found, else the default).
    pub(crate) fn inject(&self, found: Option<Format>, outgoing: &Outgoing, headers: &mut HeaderMap) {
        for name in &self.clear {
            headers.remove(name);
        }
        for inject in &self.inject {
            let mut format = match inject {
                Inject::Format(format) => *format,
                Inject::Preserve => found.unwrap_or(self.default_format),
            };
            if *inject == Inject::Preserve && format == Format::B3 && outgoing.single_header {
                format = Format::B3Single;
            }
            for (name, value) in inject_headers(format, outgoing) {
                // The string's own buffer becomes the value (no copy).
                if let Ok(value) = HeaderValue::try_from(value) {
                    headers.insert(name, value);
                }
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
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
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
fn names_trace(name: &str) -> bool {
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
fn inject_headers(format: Format, ctx: &Outgoing) -> Vec<(HeaderName, String)> {
    let sizes = format.trace_id_sizes();
    let size = ctx.trace_id_size.filter(|s| sizes.contains(s)).unwrap_or(sizes[0]);
    let trace = sized_id(&ctx.trace_id, size);
    let span = sized_id(&ctx.span_id, 8);
    let parent = ctx.parent_id.as_ref().map(|p| sized_id(p, 8));
    let sampled = ctx.should_sample == Some(true);
    let mut out = Vec::with_capacity(4);
    match format {
        Format::B3 => {
            out.push((X_B3_TRACEID, hex(&trace)));
            out.push((X_B3_SPANID, hex(&span)));
            if let Some(parent) = &parent {
                out.push((X_B3_PARENTSPANID, hex(parent)));
            }
            match &ctx.flags {
                Some(flags) => out.push((X_B3_FLAGS, flags.clone())),
                None => out.push((X_B3_SAMPLED, if sampled { "1" } else { "0" }.into())),
            }
        }
        Format::B3Single => {
            let flag = match (ctx.flags.as_deref(), ctx.should_sample) {
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
            out.push((B3, value));
        }
        Format::W3c => out.push((
            TRACEPARENT,
            format!(
                "00-{}-{}-{}",
                hex(&trace),
                hex(&span),
                if sampled { "01" } else { "00" }
            ),
        )),
        Format::Jaeger => {
            out.push((
                UBER_TRACE_ID,
                format!(
                    "{}:{}:{}:{}",
                    hex(&trace),
                    hex(&span),
                    parent.as_deref().map_or_else(|| "0".to_string(), hex),
                    if sampled { "01" } else { "00" }
                ),
            ));
            for (key, value) in &ctx.baggage {
                if let Ok(name) = HeaderName::from_bytes(format!("uberctx-{key}").as_bytes()) {
                    out.push((name, crate::form::encode(value).into_owned()));
                }
            }
        }
        Format::Ot => {
            out.push((OT_TRACEID, hex(&trace)));
            out.push((OT_SPANID, hex(&span)));
            if let Some(sampled) = ctx.should_sample {
                out.push((OT_SAMPLED, if sampled { "1" } else { "0" }.into()));
            }
            for (key, value) in &ctx.baggage {
                if let Ok(name) = HeaderName::from_bytes(format!("ot-baggage-{key}").as_bytes()) {
                    out.push((name, crate::form::encode(value).into_owned()));
                }
            }
        }
        Format::Datadog => {
            out.push((DD_TRACE_ID, to_dec(&trace)));
            out.push((DD_PARENT_ID, to_dec(&span)));
            if let Some(sampled) = ctx.should_sample {
                out.push((DD_PRIORITY, if sampled { "1" } else { "0" }.into()));
            }
        }
        Format::Aws => {
            let trace = hex(&trace);
            out.push((
                AMZN_TRACE_ID,
                format!(
                    "Root=1-{}-{};Parent={};Sampled={}",
                    &trace[..8],
                    &trace[8..],
                    hex(&span),
                    if sampled { "1" } else { "0" }
                ),
            ));
        }
        Format::Gcp => out.push((
            GCP_TRACE,
            format!(
                "{}/{};o={}",
                hex(&trace),
                to_dec(&span),
                if sampled { "1" } else { "0" }
            ),
        )),
    }
    out
}

#[cfg(test)]
mod tests;
