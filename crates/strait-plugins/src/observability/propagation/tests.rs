use super::*;
use serde_json::json;

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).expect("name"),
            HeaderValue::from_str(value).expect("value"),
        );
    }
    map
}

fn legacy(header_type: &str) -> Propagation {
    Propagation::from_config(json!({"header_type": header_type}).as_object().expect("object")).expect("valid")
}

const TRACE: &str = "463ac35c9f6413ad48485a3953bb6124";
const SPAN: &str = "0020000000000001";

#[test]
fn each_format_is_found_in_kongs_order() {
    let p = legacy("preserve");
    let b3 = p.extract(&headers(&[
        ("x-b3-traceid", TRACE),
        ("x-b3-spanid", SPAN),
        ("x-b3-sampled", "1"),
        ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
    ]));
    assert_eq!(b3.format, Some(Format::B3), "b3 comes first");
    assert_eq!(b3.trace_id.as_deref().map(hex).as_deref(), Some(TRACE));
    assert_eq!(b3.span_id.as_deref().map(hex).as_deref(), Some(SPAN));
    assert!(b3.reuse_span_id);
    assert_eq!(b3.should_sample, Some(true));

    let w3c = p.extract(&headers(&[(
        "traceparent",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
    )]));
    assert_eq!(w3c.format, Some(Format::W3c));
    assert_eq!(w3c.should_sample, Some(false));
    assert!(!w3c.reuse_span_id);

    // A 64-bit trace id is kept as 16 bytes, and its size remembered.
    let short = p.extract(&headers(&[(
        "b3",
        "a3ce929d0e0e4736-00f067aa0ba902b7-1-05e3ac9a4f6e3b90",
    )]));
    assert_eq!(short.trace_id_size, Some(8));
    assert_eq!(
        short.trace_id.as_deref().map(hex).as_deref(),
        Some("0000000000000000a3ce929d0e0e4736")
    );
    assert_eq!(short.parent_id.as_deref().map(hex).as_deref(), Some("05e3ac9a4f6e3b90"));
    assert!(short.single_header);

    let jaeger = p.extract(&headers(&[
        ("uber-trace-id", "abc:def:0:1"),
        ("uberctx-user", "ada%20l"),
    ]));
    assert_eq!(jaeger.format, Some(Format::Jaeger));
    assert_eq!(jaeger.baggage, vec![("user".to_string(), "ada l".to_string())]);

    let dd = p.extract(&headers(&[
        ("x-datadog-trace-id", "1234"),
        ("x-datadog-parent-id", "5678"),
        ("x-datadog-sampling-priority", "2"),
    ]));
    assert_eq!(
        dd.trace_id.as_deref().map(hex).as_deref(),
        Some("000000000000000000000000000004d2")
    );
    assert_eq!(dd.span_id.as_deref().map(hex).as_deref(), Some("000000000000162e"));

    let aws = p.extract(&headers(&[(
        "x-amzn-trace-id",
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
    )]));
    assert_eq!(
        aws.trace_id.as_deref().map(hex).as_deref(),
        Some("5759e988bd862e3fe1be46a994272793")
    );

    let gcp = p.extract(&headers(&[(
        "x-cloud-trace-context",
        "105445aa7843bc8bf206b12000100000/1;o=1",
    )]));
    assert_eq!(gcp.span_id.as_deref().map(hex).as_deref(), Some("0000000000000001"));
    assert_eq!(gcp.should_sample, Some(true));

    // Nothing valid: nothing found.
    assert_eq!(p.extract(&headers(&[("traceparent", "01-xyz")])), Extracted::default());
}

#[test]
fn preserve_answers_in_the_format_that_came_and_header_types_add_theirs() {
    let (trace, span) = (from_hex(TRACE).expect("hex"), from_hex(SPAN).expect("hex"));
    let outgoing = Outgoing {
        trace_id: &trace,
        trace_id_size: Some(16),
        span_id: &span,
        parent_id: Some(&[0, 0, 0, 0, 0, 0, 0, 9]),
        should_sample: Some(true),
        ..Outgoing::default()
    };
    let mut out = HeaderMap::new();
    legacy("preserve").inject(Some(Format::W3c), &outgoing, &mut out, None);
    assert_eq!(
        out.get("traceparent").and_then(|v| v.to_str().ok()),
        Some(format!("00-{TRACE}-{SPAN}-01").as_str())
    );
    assert_eq!(out.len(), 1);

    let mut out = HeaderMap::new();
    legacy("jaeger").inject(None, &outgoing, &mut out, None);
    // Nothing came: preserve falls back to the default (b3), and jaeger is added.
    assert_eq!(out.get("x-b3-traceid").and_then(|v| v.to_str().ok()), Some(TRACE));
    assert_eq!(
        out.get("x-b3-parentspanid").and_then(|v| v.to_str().ok()),
        Some("0000000000000009")
    );
    assert_eq!(
        out.get("uber-trace-id").and_then(|v| v.to_str().ok()),
        Some(format!("{TRACE}:{SPAN}:0000000000000009:01").as_str())
    );

    let config = json!({"propagation": {"extract": ["w3c"], "inject": ["datadog", "aws", "gcp", "b3-single", "ot"],
                                         "clear": ["x-drop"], "default_format": "w3c"}});
    let p = Propagation::from_config(config.as_object().expect("object")).expect("valid");
    let mut out = headers(&[("x-drop", "1")]);
    p.inject(None, &outgoing, &mut out, None);
    let get = |name: &str| out.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    assert_eq!(get("x-drop"), None);
    assert_eq!(
        get("x-datadog-trace-id").as_deref(),
        Some("5208512171318403364"),
        "the low 8 bytes, in decimal"
    );
    assert_eq!(
        get("x-amzn-trace-id").as_deref(),
        Some(format!("Root=1-463ac35c-9f6413ad48485a3953bb6124;Parent={SPAN};Sampled=1").as_str())
    );
    assert_eq!(
        get("x-cloud-trace-context").as_deref(),
        Some(format!("{TRACE}/9007199254740993;o=1").as_str())
    );
    assert_eq!(
        get("b3").as_deref(),
        Some(format!("{TRACE}-{SPAN}-1-0000000000000009").as_str())
    );
    assert_eq!(get("ot-tracer-traceid").as_deref(), Some(TRACE), "the size that came");
    // A trace of our own: ot writes its preferred 8 bytes.
    let mut out = HeaderMap::new();
    let own = Outgoing {
        trace_id_size: None,
        ..outgoing
    };
    p.inject(None, &own, &mut out, None);
    assert_eq!(
        out.get("ot-tracer-traceid").and_then(|v| v.to_str().ok()),
        Some("48485a3953bb6124")
    );
}

/// Beside the map, the fields are the lines a map's encoder would have
/// written: b3's template (a 16-byte trace with a parent) and the field by
/// field path (an 8-byte trace, no parent, flags) agree with the map.
#[test]
fn fields_beside_the_map_are_the_maps_fields_as_lines() {
    let (trace, span) = (from_hex(TRACE).expect("hex"), from_hex(SPAN).expect("hex"));
    let short = from_hex("48485a3953bb6124").expect("hex");
    let parent = [0, 0, 0, 0, 0, 0, 0, 9];
    let cases = [
        Outgoing {
            trace_id: &trace,
            span_id: &span,
            parent_id: Some(&parent),
            should_sample: Some(true),
            ..Outgoing::default()
        },
        Outgoing {
            trace_id: &short,
            trace_id_size: Some(8),
            span_id: &span,
            should_sample: Some(false),
            ..Outgoing::default()
        },
        Outgoing {
            trace_id: &trace,
            span_id: &span,
            parent_id: Some(&parent),
            flags: Some("1"),
            ..Outgoing::default()
        },
    ];
    for (at, outgoing) in cases.iter().enumerate() {
        for p in [legacy("preserve"), legacy("w3c"), legacy("jaeger")] {
            let mut in_map = HeaderMap::new();
            p.inject(None, outgoing, &mut in_map, None);
            let mut fields = IdentityFields::beside();
            let mut map = HeaderMap::new();
            p.inject(None, outgoing, &mut map, Some(&mut fields));
            assert!(map.is_empty(), "{map:?}");
            let mut beside = HeaderMap::new();
            fields.move_into(&mut beside);
            assert_eq!(beside, in_map, "case {at}");
            let lines = String::from_utf8(in_map.iter().fold(Vec::new(), |mut out, (name, value)| {
                out.extend_from_slice(format!("{name}: {}\r\n", value.to_str().expect("ascii")).as_bytes());
                out
            }))
            .expect("ascii");
            let mut fields = IdentityFields::beside();
            p.inject(None, outgoing, &mut HeaderMap::new(), Some(&mut fields));
            let mut got: Vec<&str> = std::str::from_utf8(fields.added_lines())
                .expect("ascii")
                .split_inclusive("\r\n")
                .collect();
            let mut want: Vec<&str> = lines.split_inclusive("\r\n").collect();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "case {at}");
        }
    }
    // The template's fields, as b3 writes them.
    let mut fields = IdentityFields::beside();
    legacy("preserve").inject(None, &cases[0], &mut HeaderMap::new(), Some(&mut fields));
    assert_eq!(
        std::str::from_utf8(fields.added_lines()).expect("ascii"),
        format!(
            "x-b3-traceid: {TRACE}\r\nx-b3-spanid: {SPAN}\r\nx-b3-parentspanid: 0000000000000009\r\nx-b3-sampled: 1\r\n"
        )
    );
}
