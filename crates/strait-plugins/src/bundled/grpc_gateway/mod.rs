//! `grpc-gateway`: REST/JSON clients to a gRPC upstream, by the
//! `google.api.http` annotations of the `.proto` file in `config.proto`.
//!
//! The request's method and path pick a binding; the JSON body (`body: "*"`
//! or one field), the query string (when the binding takes no whole body)
//! and the path's variables make the request message, sent as a gRPC call
//! (`POST /package.Service/Method`). Each response message comes back as
//! JSON; a gRPC status in the response head becomes Kong's HTTP status, with
//! a `{"code", "message"}` body.

mod schema;

/// `grpc-gateway` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "grpc-gateway",
    priority: 998,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(GrpcGateway::from_config(config)?)),
};

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::{header, HeaderValue, Method, StatusCode};
use prost_reflect::MessageDescriptor;
use serde_json::{json, Map, Value};

use crate::grpc::proto::{self, Protos};
use crate::grpc::Unframer;
use crate::config::ConfigReader;
use crate::context::{BodyChunk, RequestCtx, ResponseCtx, SharedStore};
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::PluginError;

#[derive(Debug)]
pub struct GrpcGateway {
    protos: Option<Arc<Protos>>,
}

/// One call's state, from access to the body's end.
#[derive(Debug)]
struct Call {
    output: MessageDescriptor,
    response_body: Option<String>,
    /// Set by header_filter when the upstream answered gRPC.
    transcoding: bool,
    unframer: Unframer,
    messages: usize,
    /// A trailers-only answer's status and message.
    status: Option<(u32, String)>,
}

impl GrpcGateway {
    pub fn from_config(config: &Map<String, Value>) -> Result<GrpcGateway, PluginError> {
        let reader = ConfigReader::new(config);
        let protos = proto::configured(&reader)?;
        Ok(GrpcGateway { protos })
    }
}

fn bad_request(message: impl Into<String>) -> Flow {
    Flow::Respond(PluginResponse::message(400, &message.into()))
}

impl Plugin for GrpcGateway {
    fn name(&self) -> &'static str {
        "grpc-gateway"
    }

    fn priority(&self) -> i32 {
        998
    }

    fn reads_request_body(&self) -> bool {
        true
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        ctx.response_headers
            .push(&header::ACCESS_CONTROL_ALLOW_ORIGIN, &HeaderValue::from_static("*"));
        if *ctx.method == Method::OPTIONS {
            return Flow::Respond(PluginResponse {
                status: 200,
                headers: vec![
                    ("content-type".into(), "application/json".into()),
                    ("access-control-allow-methods".into(), "GET,POST,PATCH,DELETE".into()),
                    ("access-control-allow-headers".into(), "content-type".into()),
                ],
                body: Bytes::from_static(b"OK"),
            });
        }
        let Some(protos) = &self.protos else {
            return bad_request("transcoding requests require a .proto file defining the service");
        };
        let path = ctx.path().to_string();
        let Some((binding, vars)) = protos.binding_for(ctx.method, &path) else {
            return bad_request(format!("no gRPC method is bound to {} {path}", ctx.method));
        };
        let input = binding.method.input();
        let mut payload = Map::new();
        let body = ctx.body.take().unwrap_or_default();
        if let Some(field) = &binding.body {
            if !body.is_empty() {
                let decoded: Value = match serde_json::from_slice(&body) {
                    Ok(value) => value,
                    Err(error) => return bad_request(format!("request body: invalid JSON: {error}")),
                };
                if field == "*" {
                    match decoded {
                        Value::Object(fields) => payload = fields,
                        _ => return bad_request("request body: expected a JSON object"),
                    }
                } else {
                    payload.insert(field.clone(), decoded);
                }
            }
        }
        if binding.body.as_deref() != Some("*") {
            let mut args: Vec<(String, Vec<String>)> = Vec::new();
            for (name, value) in crate::form::pairs(ctx.query()) {
                match args.iter_mut().find(|(known, _)| *known == name) {
                    Some((_, values)) => values.push(value.into_owned()),
                    None => args.push((name.into_owned(), vec![value.into_owned()])),
                }
            }
            for (name, values) in args {
                let bound = vars.iter().any(|(var, _)| *var == name);
                let in_body = binding
                    .body
                    .as_ref()
                    .is_some_and(|field| name.split('.').next() == Some(field));
                if bound || in_body {
                    continue;
                }
                if let Err(error) = proto::set_text_field(&mut payload, &input, &name, &values) {
                    return bad_request(format!("query argument '{name}': {error}"));
                }
            }
        }
        for (field, value) in &vars {
            if let Err(error) = proto::set_text_field(&mut payload, &input, field, std::slice::from_ref(value)) {
                return bad_request(format!("path variable '{field}': {error}"));
            }
        }
        let message = match proto::encode_json(&input, Value::Object(payload)) {
            Ok(message) => message,
            Err(error) => return bad_request(format!("request: {error}")),
        };
        let rpc = format!(
            "/{}/{}",
            binding.method.parent_service().full_name(),
            binding.method.name()
        );
        if ctx.set_path_and_query(&rpc, "").is_err() {
            return bad_request(format!("cannot call {rpc}"));
        }
        ctx.exact_path = true;
        *ctx.method = Method::POST;
        ctx.headers
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        ctx.headers.insert(header::TE, HeaderValue::from_static("trailers"));
        ctx.headers.remove(header::ACCEPT_ENCODING);
        ctx.body = Some(crate::grpc::frame(0, &message));
        ctx.shared.insert(Call {
            output: binding.method.output(),
            response_body: binding.response_body.clone(),
            transcoding: false,
            unframer: Unframer::default(),
            messages: 0,
            status: None,
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
        ctx.headers
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        ctx.headers.remove(header::CONTENT_LENGTH);
        let status = ctx
            .headers
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u32>().ok());
        if let Some(status) = status {
            *ctx.status =
                StatusCode::from_u16(crate::grpc::http_status_of(status)).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let message = ctx
                .headers
                .get("grpc-message")
                .map(|v| crate::form::decode(&String::from_utf8_lossy(v.as_bytes())).into_owned())
                .unwrap_or_default();
            call.status = Some((status, message));
        }
    }

    fn filters_body(&self) -> bool {
        true
    }

    fn body_filter(&self, shared: &mut SharedStore, chunk: &mut BodyChunk) {
        let Some(call) = shared.get_mut::<Call>().filter(|call| call.transcoding) else {
            return;
        };
        call.unframer.push(&chunk.data);
        let mut out = BytesMut::new();
        while let Some((flags, message)) = call.unframer.next_frame() {
            if flags & 0x80 != 0 {
                continue;
            }
            match proto::decode_to_json(&call.output, &message) {
                Ok(mut json) => {
                    if let Some(field) = &call.response_body {
                        json = json.get(field).cloned().unwrap_or(Value::Null);
                    }
                    out.extend_from_slice(json.to_string().as_bytes());
                    call.messages += 1;
                }
                Err(error) => tracing::warn!(%error, "grpc-gateway: undecodable response message"),
            }
        }
        if chunk.end && call.messages == 0 {
            if let Some((code, message)) = call.status.as_ref().filter(|(code, _)| *code != 0) {
                out.extend_from_slice(
                    json!({ "code": code, "message": message, "details": [] })
                        .to_string()
                        .as_bytes(),
                );
            }
        }
        chunk.data = out.freeze();
    }
}
