//! OTLP/HTTP protobuf encoding of spans (opentelemetry-proto v1:
//! `ExportTraceServiceRequest` > `ResourceSpans` > `ScopeSpans` > `Span`),
//! written by hand: the messages are small and fixed, and a protobuf
//! toolchain would be a build dependency for five message types.
//!
//! Repeated fields concatenate on the wire, so each request's spans are
//! encoded once (as `ScopeSpans.spans` fields) and a batch is those bytes
//! joined inside one envelope.

/// A span attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(String),
    Int(i64),
    Bool(bool),
}

/// One finished span.
#[derive(Debug, Clone)]
pub struct Span {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent_span_id: Option<[u8; 8]>,
    pub name: String,
    /// 1 internal, 2 server, 3 client.
    pub kind: u32,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    pub attributes: Vec<(&'static str, AttrValue)>,
    /// 2 (error) for a failed span; 0 (unset) otherwise.
    pub status_code: u32,
}

pub const KIND_INTERNAL: u32 = 1;
pub const KIND_SERVER: u32 = 2;
pub const KIND_CLIENT: u32 = 3;
pub const STATUS_ERROR: u32 = 2;

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, u64::from(field << 3 | u32::from(wire)));
}

fn bytes_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    tag(out, field, 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn varint_field(out: &mut Vec<u8>, field: u32, value: u64) {
    tag(out, field, 0);
    varint(out, value);
}

fn fixed64_field(out: &mut Vec<u8>, field: u32, value: u64) {
    tag(out, field, 1);
    out.extend_from_slice(&value.to_le_bytes());
}

/// `KeyValue { key = 1; AnyValue value = 2 }`,
/// `AnyValue { string_value = 1; bool_value = 2; int_value = 3 }`.
fn key_value(key: &str, value: &AttrValue) -> Vec<u8> {
    let mut any = Vec::new();
    match value {
        AttrValue::Str(text) => bytes_field(&mut any, 1, text.as_bytes()),
        AttrValue::Bool(flag) => varint_field(&mut any, 2, u64::from(*flag)),
        AttrValue::Int(number) => varint_field(&mut any, 3, *number as u64),
    }
    let mut out = Vec::with_capacity(key.len() + any.len() + 4);
    bytes_field(&mut out, 1, key.as_bytes());
    bytes_field(&mut out, 2, &any);
    out
}

/// The span as a `ScopeSpans.spans` field (field 2).
pub fn encode_span_field(out: &mut Vec<u8>, span: &Span) {
    let mut body = Vec::with_capacity(128);
    bytes_field(&mut body, 1, &span.trace_id);
    bytes_field(&mut body, 2, &span.span_id);
    if let Some(parent) = &span.parent_span_id {
        bytes_field(&mut body, 4, parent);
    }
    bytes_field(&mut body, 5, span.name.as_bytes());
    varint_field(&mut body, 6, u64::from(span.kind));
    fixed64_field(&mut body, 7, span.start_unix_nano);
    fixed64_field(&mut body, 8, span.end_unix_nano);
    for (key, value) in &span.attributes {
        bytes_field(&mut body, 9, &key_value(key, value));
    }
    if span.status_code != 0 {
        // Status { message = 2; code = 3 }
        let mut status = Vec::new();
        varint_field(&mut status, 3, u64::from(span.status_code));
        bytes_field(&mut body, 15, &status);
    }
    bytes_field(out, 2, &body);
}

/// The `ExportTraceServiceRequest` around `spans` (already encoded span
/// fields), with the resource's attributes and Strait's scope.
pub fn export_request(resource: &[(String, String)], spans: &[Vec<u8>]) -> Vec<u8> {
    let mut resource_body = Vec::new();
    for (key, value) in resource {
        bytes_field(&mut resource_body, 1, &key_value(key, &AttrValue::Str(value.clone())));
    }
    let mut scope = Vec::new();
    bytes_field(&mut scope, 1, b"kong-internal");
    bytes_field(&mut scope, 2, env!("CARGO_PKG_VERSION").as_bytes());
    let span_bytes: usize = spans.iter().map(Vec::len).sum();
    let mut scope_spans = Vec::with_capacity(span_bytes + scope.len() + 8);
    bytes_field(&mut scope_spans, 1, &scope);
    for encoded in spans {
        scope_spans.extend_from_slice(encoded);
    }
    let mut resource_spans = Vec::with_capacity(scope_spans.len() + resource_body.len() + 16);
    bytes_field(&mut resource_spans, 1, &resource_body);
    bytes_field(&mut resource_spans, 2, &scope_spans);
    let mut out = Vec::with_capacity(resource_spans.len() + 8);
    bytes_field(&mut out, 1, &resource_spans);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_tags_follow_the_wire_format() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        let mut out = Vec::new();
        fixed64_field(&mut out, 7, 1);
        assert_eq!(out, [0x39, 1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            key_value("a", &AttrValue::Int(-1))[..6],
            [0x0a, 1, b'a', 0x12, 11, 0x18]
        );
    }
}
