//! `kafka-upstream` (Kong priority 751): turns the request into a JSON
//! message (Kong's format: `method`, `uri`/`uri_args`, `headers`,
//! `body`/`body_args`/`body_base64` as the `forward_*` fields ask) and
//! publishes it to `topic`; the upstream is not called.
//!
//! The client gets `200 {"message":"message sent"}` only once the broker
//! acknowledged the message at `producer_request_acks` (with -1: every
//! in-sync replica has it). When it could not be delivered (broker down,
//! retries spent, full buffer) the answer is `503 {"message":"could not
//! send message to topic"}` and the reason goes to the error log. Kong
//! answers 200 before the broker does when `producer_async` is on (its
//! default), and 500 on failure: Strait never reports a message it may
//! lose as sent, so `producer_async` only lets concurrent requests share
//! Produce requests, which Strait's producer always does.
//!
//! On a gRPC call the plugin publishes each message of the client's stream
//! and acknowledges it back as Kafka does (grpc.rs has the mapping).

mod grpc;
mod schema;

/// `kafka-upstream` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "kafka-upstream",
    priority: 751,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(KafkaUpstream::from_config(config)?)),
};

use std::sync::Arc;

use base64::Engine as _;
use serde_json::{json, Map, Value};
use strait_runtime::kafka::{Producer, ProducerConfig};

use crate::body::{kind_of, parse, BodyKind, ParsedBody};
use crate::config::ConfigReader;
use crate::context::RequestCtx;
use crate::phase::{AccessFuture, Flow, Plugin, PluginResponse, ServeHere};
use crate::PluginError;

/// Content types whose body is sent as text, the rest base64 (Kong's list).
const RAW_TYPES: [&str; 5] = [
    "text/plain",
    "text/html",
    "application/xml",
    "text/xml",
    "application/soap+xml",
];

#[derive(Debug)]
pub struct KafkaUpstream {
    producer: Arc<ProducerConfig>,
    topic: Arc<str>,
    forward_method: bool,
    forward_uri: bool,
    forward_headers: bool,
    forward_body: bool,
}

fn not_sent() -> Flow {
    Flow::Respond(PluginResponse::message(503, "could not send message to topic"))
}

impl KafkaUpstream {
    pub fn from_config(config: &Map<String, Value>) -> Result<KafkaUpstream, PluginError> {
        let c = ConfigReader::new(config);
        let topic = c
            .string("topic")?
            .ok_or_else(|| PluginError::invalid("topic", "required field missing"))?;
        Ok(KafkaUpstream {
            producer: crate::kafka::producer_config(config)?,
            topic: Arc::from(topic),
            forward_method: c.bool("forward_method", false)?,
            forward_uri: c.bool("forward_uri", false)?,
            forward_headers: c.bool("forward_headers", false)?,
            forward_body: c.bool("forward_body", true)?,
        })
    }

    /// Kong's message for the request, or why the body could not be read.
    fn message(&self, ctx: &RequestCtx<'_>) -> Result<Value, &'static str> {
        let mut out = Map::new();
        if self.forward_method {
            out.insert("method".into(), json!(ctx.method.as_str()));
        }
        if self.forward_headers {
            out.insert("headers".into(), Value::Object(ctx.headers_json()));
        }
        if self.forward_uri {
            let uri = match ctx.query() {
                "" => ctx.path().to_string(),
                query => format!("{}?{query}", ctx.path()),
            };
            out.insert("uri".into(), json!(uri));
            out.insert("uri_args".into(), Value::Object(crate::form::query_object(ctx.query())));
        }
        if self.forward_body {
            let raw = ctx.body.as_deref().unwrap_or_default();
            let content_type = ctx.header("content-type");
            let kind = kind_of(content_type);
            let args = match parse(kind, raw) {
                Some(ParsedBody::Json(map)) => map,
                Some(ParsedBody::Form(pairs)) => pairs.into_iter().map(|(k, v)| (k, Value::String(v))).collect(),
                // A type Kong parses whose body does not parse: not sent.
                None if kind != BodyKind::Other && !raw.is_empty() => return Err("could not parse the request body"),
                None => Map::new(),
            };
            let media = content_type
                .map(|t| t.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
                .unwrap_or_default();
            if content_type.is_some() && RAW_TYPES.contains(&media.as_str()) {
                out.insert("body".into(), json!(String::from_utf8_lossy(raw)));
            } else {
                out.insert("body".into(), json!(base64::engine::general_purpose::STANDARD.encode(raw)));
                out.insert("body_base64".into(), json!(true));
            }
            out.insert("body_args".into(), Value::Object(args));
        }
        Ok(Value::Object(out))
    }

    async fn publish(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let grpc = ctx
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/grpc"));
        if grpc {
            return self.serve_grpc(ctx);
        }
        let message = match self.message(ctx) {
            Ok(message) => message,
            Err(why) => return Flow::Respond(PluginResponse::message(400, why)),
        };
        let producer = match Producer::for_worker(&self.producer) {
            Ok(producer) => producer,
            Err(error) => {
                tracing::error!(%error, topic = %self.topic, "kafka-upstream: no producer");
                return not_sent();
            }
        };
        let value = bytes::Bytes::from(serde_json::to_vec(&message).unwrap_or_default());
        match producer.send(&self.topic, None, value).await {
            Ok(_) => Flow::Respond(PluginResponse::message(200, "message sent")),
            Err(error) => {
                tracing::error!(%error, topic = %self.topic, "kafka-upstream: could not send message to topic");
                not_sent()
            }
        }
    }
}

impl KafkaUpstream {
    /// A gRPC call: served here, streaming (grpc.rs).
    fn serve_grpc(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let producer = match Producer::for_worker(&self.producer) {
            Ok(producer) => producer,
            Err(error) => {
                tracing::error!(%error, topic = %self.topic, "kafka-upstream: no producer");
                return not_sent();
            }
        };
        let topic = self.topic.clone();
        let max_message = self.producer.bytes_per_request;
        ctx.shared.insert(ServeHere(Box::new(move |request| {
            grpc::serve(producer, topic, max_message, request)
        })));
        Flow::Continue
    }
}

impl Plugin for KafkaUpstream {
    fn name(&self) -> &'static str {
        "kafka-upstream"
    }

    fn priority(&self) -> i32 {
        751
    }

    fn reads_request_body(&self) -> bool {
        self.forward_body
    }

    fn serves_grpc_streams(&self) -> bool {
        true
    }

    fn waits(&self) -> bool {
        true
    }

    fn access_async<'a>(&'a self, ctx: &'a mut RequestCtx<'_>) -> AccessFuture<'a> {
        Box::pin(self.publish(ctx))
    }
}
