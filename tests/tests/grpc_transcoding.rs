//! Kong's gRPC transcoding plugins against the real gRPC upstream (tonic):
//! `grpc-web` (binary, base64 text and JSON messages, over HTTP/1.1 as
//! browsers send them) and `grpc-gateway` (REST/JSON by the `google.api.http`
//! bindings of `tests/proto/stream.proto`).

use base64::Engine as _;
use bytes::Bytes;
use serde_json::{json, Value};
use strait_e2e::declarative::config;
use strait_e2e::grpc::{frame, GrpcUpstream, Msg, SERVICE};
use strait_e2e::{request, Gateway, GatewayOptions};

fn proto_path() -> String {
    format!("{}/proto/stream.proto", env!("CARGO_MANIFEST_DIR"))
}

/// A grpc:// service behind HTTP routes: `/web` (stripped) with `grpc-web`
/// configured by `web_config`, `/raw` with `grpc-web`'s defaults, and `/v1`
/// with `grpc-gateway`.
async fn gateway(upstream: &GrpcUpstream, web_config: Value) -> Gateway {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let mut cfg = config(vec![]);
    cfg["services"] = json!([{ "name": "grpc", "url": upstream.url(),
        "routes": [
            { "name": "web", "paths": ["/web"], "protocols": ["http", "https"], "strip_path": true,
              "plugins": [{ "name": "grpc-web", "config": web_config }] },
            { "name": "raw", "paths": ["/raw"], "protocols": ["http", "https"], "strip_path": true,
              "plugins": [{ "name": "grpc-web" }] },
            { "name": "rest", "paths": ["/v1"], "protocols": ["http", "https"], "strip_path": false,
              "plugins": [{ "name": "grpc-gateway", "config": { "proto": proto_path() } }] },
        ] }]);
    gw.apply(&cfg).await;
    gw
}

/// The frames of a gRPC-Web body: (flags, payload).
fn frames(mut body: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while body.len() >= 5 {
        let length = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        out.push((body[0], body[5..5 + length].to_vec()));
        body = &body[5 + length..];
    }
    assert!(body.is_empty(), "a frame is cut short");
    out
}

fn msg(seq: u64, payload: &'static [u8]) -> Msg {
    Msg {
        seq,
        payload: Bytes::from_static(payload),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_web_binary_and_text_round_trip_over_http1() {
    let upstream = GrpcUpstream::start().await;
    let gw = gateway(&upstream, json!({ "pass_stripped_path": true })).await;
    let path = format!("/web/{SERVICE}/Unary");

    let reply = gw
        .proxy(request(
            "POST",
            &path,
            &[("content-type", "application/grpc-web+proto"), ("x-grpc-web", "1")],
            frame(&msg(41, b"binary")),
        ))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.header("content-type").as_deref(),
        Some("application/grpc-web+proto")
    );
    assert_eq!(reply.header("access-control-allow-origin").as_deref(), Some("*"));
    let got = frames(&reply.body);
    assert_eq!(got.len(), 2, "a message and the trailer frame: {got:?}");
    assert_eq!(got[0].0, 0);
    let echoed: Msg = prost::Message::decode(&got[0].1[..]).expect("a Msg");
    assert_eq!((echoed.seq, &echoed.payload[..]), (41, &b"binary"[..]));
    assert_eq!(got[1].0, 0x80);
    let trailer = String::from_utf8_lossy(&got[1].1).to_string();
    assert!(trailer.contains("grpc-status:0\r\n"), "{trailer:?}");

    // Text: base64 both ways, across a server stream of three messages.
    let b64 = base64::engine::general_purpose::STANDARD;
    let emit = strait_e2e::grpc::emit_request(3, 4, false);
    let reply = gw
        .proxy(request(
            "POST",
            &format!("/web/{SERVICE}/Emit"),
            &[("content-type", "application/grpc-web-text")],
            b64.encode(&emit),
        ))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.header("content-type").as_deref(),
        Some("application/grpc-web-text")
    );
    let text = reply.text();
    let mut decoded = Vec::new();
    for piece in text.split_inclusive('=').filter(|p| *p != "=") {
        let piece = piece.trim_end_matches('=');
        base64::engine::general_purpose::STANDARD_NO_PAD
            .decode_vec(piece, &mut decoded)
            .expect("base64 pieces");
    }
    let got = frames(&decoded);
    let seqs: Vec<u64> = got
        .iter()
        .filter(|(flags, _)| *flags == 0)
        .map(|(_, m)| <Msg as prost::Message>::decode(&m[..]).expect("a Msg").seq)
        .collect();
    assert_eq!(seqs, vec![0, 1, 2]);
    assert_eq!(got.last().map(|f| f.0), Some(0x80));

    // A call the upstream refuses: its status is in the trailer frame (or head).
    let reply = gw
        .proxy(request(
            "POST",
            &format!("/web/{SERVICE}/Nope"),
            &[("content-type", "application/grpc-web+proto")],
            frame(&msg(1, b"")),
        ))
        .await;
    let in_head = reply.header("grpc-status");
    let in_body = frames(&reply.body)
        .into_iter()
        .find(|(flags, _)| *flags == 0x80)
        .map(|(_, block)| String::from_utf8_lossy(&block).to_string());
    assert!(
        in_head.as_deref() == Some("12") || in_body.as_deref().is_some_and(|b| b.contains("grpc-status:12")),
        "UNIMPLEMENTED reaches the client: head {in_head:?}, body {in_body:?}"
    );

    // CORS preflight, answered by the plugin.
    let reply = gw.proxy(request("OPTIONS", &path, &[], "")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("access-control-allow-methods").as_deref(), Some("POST"));
    assert_eq!(upstream.calls(), 3, "preflight never reaches the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_web_json_messages_are_transcoded_by_the_proto() {
    let upstream = GrpcUpstream::start().await;
    let gw = gateway(
        &upstream,
        json!({ "proto": proto_path(), "allow_origin_header": "https://app.example", "pass_stripped_path": true }),
    )
    .await;
    let gw_path = format!("/web/{SERVICE}/Unary");
    let json_frame = |value: Value| {
        let text = value.to_string();
        let mut framed = vec![0u8];
        framed.extend_from_slice(&(text.len() as u32).to_be_bytes());
        framed.extend_from_slice(text.as_bytes());
        framed
    };
    let reply = gw
        .proxy(request(
            "POST",
            &gw_path,
            &[("content-type", "application/grpc-web+json")],
            json_frame(json!({ "seq": 9, "payload": "aGk=" })),
        ))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.header("access-control-allow-origin").as_deref(),
        Some("https://app.example")
    );
    let got = frames(&reply.body);
    let answer: Value = serde_json::from_slice(&got[0].1)
        .unwrap_or_else(|e| panic!("a JSON message ({e}): {got:?} {:?}", reply.headers));
    assert_eq!(answer, json!({ "seq": 9, "payload": "aGk=" }));

    let reply = gw
        .proxy(request(
            "POST",
            &gw_path,
            &[("content-type", "application/grpc-web+json")],
            json_frame(json!({ "seq": "not a number" })),
        ))
        .await;
    // The plugin's 400 reaches a gRPC-Web client as a gRPC status it can read.
    assert_eq!(
        reply.header("grpc-status").as_deref(),
        Some("3"),
        "INVALID_ARGUMENT: {:?}",
        reply.headers
    );
    let message = reply.header("grpc-message").unwrap_or_default();
    assert!(message.contains("strait.test.Msg"), "{message}");

    // Kong's default (`pass_stripped_path` off) sends the client's path as it came:
    // the upstream sees /raw/strait.test.Stream/Unary, a method it does not have.
    let reply = gw
        .proxy(request(
            "POST",
            &format!("/raw/{SERVICE}/Unary"),
            &[("content-type", "application/grpc-web+proto")],
            frame(&msg(1, b"")),
        ))
        .await;
    assert_eq!(
        reply.header("grpc-status").as_deref(),
        Some("12"),
        "{:?}",
        reply.headers
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_gateway_maps_rest_calls_to_grpc_and_back() {
    let upstream = GrpcUpstream::start().await;
    let gw = gateway(&upstream, json!({})).await;

    // POST with body "*".
    let reply = gw
        .proxy(request(
            "POST",
            "/v1/unary",
            &[("content-type", "application/json")],
            json!({ "seq": 5, "payload": "aGVsbG8=" }).to_string(),
        ))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("content-type").as_deref(), Some("application/json"));
    assert_eq!(reply.json(), json!({ "seq": 5, "payload": "aGVsbG8=" }));

    // GET with a path variable (an additional binding); defaults are written out.
    let reply = gw.proxy(strait_e2e::get("/v1/unary/77?unknown=1")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json(), json!({ "seq": 77, "payload": "" }));

    // Query arguments fill the fields the path leaves; a server stream comes back
    // as one JSON object per message.
    let reply = gw.proxy(strait_e2e::get("/v1/emit/2?size=3&spaced=false")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let objects: Vec<Value> = serde_json::Deserializer::from_slice(&reply.body)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .expect("JSON objects");
    assert_eq!(
        objects,
        vec![
            json!({ "seq": 0, "payload": "ZWVl" }),
            json!({ "seq": 1, "payload": "ZWVl" })
        ]
    );

    // A gRPC status becomes Kong's HTTP status, with the status as JSON.
    let reply = gw.proxy(strait_e2e::get("/v1/missing/1")).await;
    assert_eq!(reply.status, 500, "UNIMPLEMENTED: {}", reply.text());
    assert_eq!(reply.header("grpc-status").as_deref(), Some("12"));
    assert_eq!(reply.json()["code"], 12);

    // Bad input: a clear 400 that names what and where; nothing reaches the upstream.
    let before = upstream.calls();
    let reply = gw
        .proxy(request(
            "POST",
            "/v1/unary",
            &[("content-type", "application/json")],
            r#"{"seq": 1, "nope": true}"#,
        ))
        .await;
    assert_eq!(reply.status, 400);
    assert!(reply.message().unwrap_or_default().contains("nope"), "{}", reply.text());
    let reply = gw
        .proxy(request(
            "POST",
            "/v1/unary",
            &[("content-type", "application/json")],
            r#"{"seq": "#,
        ))
        .await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.message().unwrap_or_default().contains("invalid JSON"),
        "{}",
        reply.text()
    );
    let reply = gw.proxy(strait_e2e::get("/v1/nothing/here")).await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.message().unwrap_or_default().contains("/v1/nothing/here"),
        "{}",
        reply.text()
    );
    assert_eq!(upstream.calls(), before, "refused calls never reach the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proto_that_does_not_compile_is_refused_with_its_error() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let dir = std::env::temp_dir().join(format!("strait-bad-proto-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let bad = dir.join("bad.proto");
    std::fs::write(&bad, "syntax = \"proto3\";\nmessage M { strng x = 1; }\n").expect("write");
    let reply = gw
        .admin(
            "POST",
            "/plugins",
            &[("content-type", "application/json")],
            json!({ "name": "grpc-gateway", "config": { "proto": bad.display().to_string() } }).to_string(),
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(
        reply.text().contains("config.proto") || reply.text().contains("proto"),
        "{}",
        reply.text()
    );
    assert!(reply.text().contains("strng"), "the compiler's error: {}", reply.text());
    let missing = gw
        .admin(
            "POST",
            "/plugins",
            &[("content-type", "application/json")],
            json!({ "name": "grpc-web", "config": { "proto": "/nonexistent/x.proto" } }).to_string(),
        )
        .await;
    assert_eq!(missing.status, 400, "{}", missing.text());
    let _ = std::fs::remove_dir_all(&dir);
}
