//! `grpc-web`: gRPC-Web clients (browsers, over HTTP/1.1 or HTTP/2) to a
//! gRPC upstream.
//!
//! `application/grpc-web[+proto]` carries gRPC's own frames; the `-text`
//! forms carry them in base64. With `config.proto`, `+json` forms carry JSON
//! messages, transcoded by the method's types. The upstream's trailers come
//! back as the body's last frame (flag `0x80`), as gRPC-Web has no trailers.

mod schema;

/// `grpc-web` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "grpc-web",
    priority: 3,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(GrpcWeb::from_config(config)?)),
};

use std::sync::Arc;

use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, HeaderValue, Method};
use prost_reflect::MessageDescriptor;
use serde_json::{Map, Value};

use crate::grpc::proto::{self, Protos};
use crate::grpc::Unframer;
use crate::config::ConfigReader;
use crate::context::{BodyChunk, RequestCtx, ResponseCtx, SharedStore};
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::PluginError;

#[derive(Debug)]
pub struct GrpcWeb {
    protos: Option<Arc<Protos>>,
    pass_stripped_path: bool,
    allow_origin: HeaderValue,
}

/// One call's state, from access to the body's end.
#[derive(Debug)]
struct Call {
    mimetype: HeaderValue,
    text: bool,
    /// The response message type, for JSON messages.
    json_output: Option<MessageDescriptor>,
    transcoding: bool,
    unframer: Unframer,
    /// Status of a trailers-only answer (in its head).
    head_status: Vec<(String, String)>,
}

impl GrpcWeb {
    pub fn from_config(config: &Map<String, Value>) -> Result<GrpcWeb, PluginError> {
        let reader = ConfigReader::new(config);
        let protos = proto::configured(&reader)?;
        let origin = reader.string("allow_origin_header")?.unwrap_or_else(|| "*".into());
        let allow_origin = HeaderValue::from_str(&origin)
            .map_err(|_| PluginError::invalid("allow_origin_header", "not a valid header value"))?;
        Ok(GrpcWeb {
            protos,
            pass_stripped_path: reader.bool("pass_stripped_path", false)?,
            allow_origin,
        })
    }
}

fn bad_request(message: impl Into<String>) -> Flow {
    Flow::Respond(PluginResponse::message(400, &message.into()))
}

/// Base64 that may be several padded pieces one after another (a client
/// may encode each message on its own).
fn decode_base64_pieces(text: &[u8]) -> Result<Vec<u8>, String> {
    let text: Vec<u8> = text.iter().copied().filter(|b| !b.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    for piece in text.split_inclusive(|b| *b == b'=').filter(|p| *p != b"=") {
        let piece: &[u8] = piece;
        // A piece ending in "=" may be followed by the second "=" of its padding.
        let trimmed: Vec<u8> = piece.iter().copied().filter(|b| *b != b'=').collect();
        base64::engine::general_purpose::STANDARD_NO_PAD
            .decode_vec(&trimmed, &mut out)
            .map_err(|error| format!("request body: invalid base64: {error}"))?;
    }
    Ok(out)
}

fn base64(data: &[u8]) -> Bytes {
    Bytes::from(base64::engine::general_purpose::STANDARD.encode(data))
}

impl Plugin for GrpcWeb {
    fn name(&self) -> &'static str {
        "grpc-web"
    }

    fn priority(&self) -> i32 {
        3
    }

    fn reads_request_body(&self) -> bool {
        true
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        ctx.response_headers
            .push(&header::ACCESS_CONTROL_ALLOW_ORIGIN, &self.allow_origin);
        if *ctx.method == Method::OPTIONS {
            let origin = self.allow_origin.to_str().unwrap_or("*").to_string();
            return Flow::Respond(PluginResponse {
                status: 200,
                headers: vec![
                    ("content-type".into(), "application/grpc-web-text+proto".into()),
                    ("access-control-allow-origin".into(), origin),
                    ("access-control-allow-methods".into(), "POST".into()),
                    (
                        "access-control-allow-headers".into(),
                        "content-type,x-grpc-web,x-user-agent".into(),
                    ),
                ],
                body: Bytes::from_static(b"OK"),
            });
        }
        let Some(mimetype) = ctx.headers.get(header::CONTENT_TYPE).cloned() else {
            return bad_request("a gRPC-Web request needs a content-type");
        };
        let essence = mimetype
            .to_str()
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let (text, json) = match essence.as_str() {
            "application/grpc-web" | "application/grpc-web+proto" => (false, false),
            "application/grpc-web-text" | "application/grpc-web-text+proto" => (true, false),
            "application/grpc-web+json" => (false, true),
            "application/grpc-web-text+json" => (true, true),
            other => return bad_request(format!("content-type '{other}' is not gRPC-Web")),
        };
        let mut body = ctx.body.take().unwrap_or_default();
        if text {
            match decode_base64_pieces(&body) {
                Ok(decoded) => body = Bytes::from(decoded),
                Err(error) => return bad_request(error),
            }
        }
        let mut json_output = None;
        if json {
            let Some(protos) = &self.protos else {
                return bad_request("transcoding requests require a .proto file defining the service");
            };
            let Some(method) = protos.method_for_path(ctx.path()) else {
                return bad_request(format!("unknown gRPC method '{}'", ctx.path()));
            };
            let mut unframer = Unframer::default();
            unframer.push(&body);
            let mut framed = BytesMut::new();
            while let Some((_, message)) = unframer.next_frame() {
                let value: Value = match serde_json::from_slice(&message) {
                    Ok(value) => value,
                    Err(error) => return bad_request(format!("request message: invalid JSON: {error}")),
                };
                match proto::encode_json(&method.input(), value) {
                    Ok(wire) => framed.extend_from_slice(&crate::grpc::frame(0, &wire)),
                    Err(error) => return bad_request(format!("request message: {error}")),
                }
            }
            if unframer.pending() != 0 {
                return bad_request("request body: a message frame is cut short");
            }
            body = framed.freeze();
            json_output = Some(method.output());
        }
        ctx.exact_path = !self.pass_stripped_path;
        ctx.headers
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        ctx.headers.insert(header::TE, HeaderValue::from_static("trailers"));
        ctx.body = Some(body);
        ctx.shared.insert(Call {
            mimetype,
            text,
            json_output,
            transcoding: false,
            unframer: Unframer::default(),
            head_status: Vec::new(),
        });
        Flow::Continue
    }

    fn filters_headers(&self) -> bool {
        true
    }

    fn header_filter(&self, ctx: &mut ResponseCtx<'_>) {
        let Some(call) = ctx.shared.get_mut::<Call>() else {
            return;
        };
        if !crate::grpc::is_grpc_answer(ctx.headers) {
            return;
        }
        call.transcoding = true;
        ctx.headers.insert(header::CONTENT_TYPE, call.mimetype.clone());
        ctx.headers.remove(header::CONTENT_LENGTH);
        for name in ["grpc-status", "grpc-message"] {
            if let Some(value) = ctx.headers.get(name).and_then(|v| v.to_str().ok()) {
                call.head_status.push((name.to_string(), value.to_string()));
            }
        }
    }

    fn filters_body(&self) -> bool {
        true
    }

    fn body_filter(&self, shared: &mut SharedStore, chunk: &mut BodyChunk) {
        let Some(call) = shared.get_mut::<Call>().filter(|call| call.transcoding) else {
            return;
        };
        let mut out = match &call.json_output {
            Some(output) => {
                call.unframer.push(&chunk.data);
                let mut out = BytesMut::new();
                while let Some((_, message)) = call.unframer.next_frame() {
                    match proto::decode_to_json(output, &message) {
                        Ok(json) => out.extend_from_slice(&crate::grpc::frame(0, json.to_string().as_bytes())),
                        Err(error) => tracing::warn!(%error, "grpc-web: undecodable response message"),
                    }
                }
                out
            }
            None => BytesMut::from(&chunk.data[..]),
        };
        if chunk.end {
            let trailers = chunk.trailers.take();
            out.extend_from_slice(&crate::grpc::frame(
                0x80,
                &trailer_block(trailers.as_ref(), &call.head_status),
            ));
        }
        chunk.data = if call.text { base64(&out) } else { out.freeze() };
    }
}

/// The trailers as gRPC-Web's last frame: `name:value\r\n` lines. Without
/// trailers (a trailers-only answer), the status its head carried.
fn trailer_block(trailers: Option<&HeaderMap>, head_status: &[(String, String)]) -> Vec<u8> {
    let mut block = Vec::new();
    match trailers.filter(|t| !t.is_empty()) {
        Some(trailers) => {
            for (name, value) in trailers {
                block.extend_from_slice(name.as_str().as_bytes());
                block.push(b':');
                block.extend_from_slice(value.as_bytes());
                block.extend_from_slice(b"\r\n");
            }
        }
        None if !head_status.is_empty() => {
            for (name, value) in head_status {
                block.extend_from_slice(format!("{name}:{value}\r\n").as_bytes());
            }
        }
        None => block.extend_from_slice(b"grpc-status:0\r\ngrpc-message:\r\n"),
    }
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_in_padded_pieces_decodes_whole() {
        let one = base64::engine::general_purpose::STANDARD.encode(b"ab");
        let two = base64::engine::general_purpose::STANDARD.encode(b"cde");
        let three = base64::engine::general_purpose::STANDARD.encode(b"f");
        let joined = format!("{one}{two}{three}");
        assert_eq!(decode_base64_pieces(joined.as_bytes()).expect("decodes"), b"abcdef");
        assert!(decode_base64_pieces(b"!!!!").is_err());
    }

    #[test]
    fn trailers_become_the_last_frame_body() {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("5"));
        trailers.insert("grpc-message", HeaderValue::from_static("gone"));
        assert_eq!(
            trailer_block(Some(&trailers), &[]),
            b"grpc-status:5\r\ngrpc-message:gone\r\n"
        );
        let head = vec![("grpc-status".to_string(), "16".to_string())];
        assert_eq!(trailer_block(None, &head), b"grpc-status:16\r\n");
    }
}
