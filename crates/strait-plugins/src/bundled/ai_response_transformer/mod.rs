//! `ai-response-transformer` (Kong 3.9, priority 768): the upstream's
//! answer, rewritten by the configured LLM with the configured prompt,
//! goes to the client instead (ai/transformer.rs). With
//! `parse_llm_response_json_instructions`, the LLM's answer is read as
//! `{"status", "headers", "body"}`. The proxy reaches the upstream as for
//! any request (Kong calls it from the plugin) and hands the whole answer
//! to the plugin ([`crate::RewriteResponse`]).

pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "ai-response-transformer",
    priority: 768,
    schema: || crate::ai::transformer::schema(true),
    build: |config, scope| Ok(std::sync::Arc::new(AiResponseTransformer::from_config(config, scope.plugin)?)),
};

use std::io::Read;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use serde_json::{Map, Value};

use crate::ai::request::refusal;
use crate::ai::transformer::Transformer;
use crate::ai::Analytics;
use crate::config::ConfigReader;
use crate::context::RequestCtx;
use crate::phase::{Flow, Plugin, ResponseRewriter, RewriteFuture, RewriteResponse, UpstreamResponse};
use crate::PluginError;

#[derive(Debug)]
pub struct AiResponseTransformer {
    transformer: Arc<Transformer>,
    instructions: bool,
}

impl AiResponseTransformer {
    pub fn from_config(config: &Map<String, Value>, plugin_id: Option<uuid::Uuid>) -> Result<Self, PluginError> {
        Ok(AiResponseTransformer {
            transformer: Arc::new(Transformer::read(config, "ai-response-transformer", plugin_id)?),
            instructions: ConfigReader::new(config).bool("parse_llm_response_json_instructions", false)?,
        })
    }
}

/// One request's rewrite: the transformer, and where its accounting goes
/// for the log phase.
#[derive(Debug)]
struct Rewrite {
    transformer: Arc<Transformer>,
    instructions: bool,
    calls: Arc<Mutex<Option<Analytics>>>,
}

/// The LLM call's accounting, kept for the log (the rewrite runs outside
/// the plugin phases, so it is handed over here).
#[derive(Debug)]
struct PendingCall(Arc<Mutex<Option<Analytics>>>);

impl Rewrite {
    async fn run(&self, response: UpstreamResponse) -> Result<UpstreamResponse, crate::PluginResponse> {
        let UpstreamResponse {
            status,
            mut headers,
            body,
        } = response;
        let compressed = headers
            .get(header::CONTENT_ENCODING)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
        let body = match compressed {
            true => {
                let mut out = Vec::new();
                let read = flate2::read::MultiGzDecoder::new(&body[..])
                    .take(16 << 20)
                    .read_to_end(&mut out);
                read.map(|_| Bytes::from(out)).unwrap_or(body)
            }
            false => body,
        };
        for name in [header::CONTENT_LENGTH, header::CONTENT_ENCODING, header::TRANSFER_ENCODING] {
            headers.remove(name);
        }
        let input = String::from_utf8_lossy(&body[..body.len().min(self.transformer.max_body)]).into_owned();
        let (text, analytics) = self
            .transformer
            .introspect(&input)
            .await
            .map_err(|message| refusal(400, &message))?;
        *self.calls.lock().unwrap_or_else(|p| p.into_inner()) = Some(analytics);
        if !self.instructions {
            return Ok(UpstreamResponse {
                status,
                headers,
                body: Bytes::from(text),
            });
        }
        let failed = |why: String| {
            refusal(
                500,
                &format!("failed to parse JSON response instructions from AI backend: {why}"),
            )
        };
        let instructions: Value = serde_json::from_str(&text).map_err(|e| failed(e.to_string()))?;
        let Value::Object(instructions) = instructions else {
            return Err(failed("input not table or string".into()));
        };
        let status = match instructions.get("status") {
            None | Some(Value::Null) => 200,
            Some(value) => value
                .as_u64()
                .filter(|s| (100..=599).contains(s))
                .ok_or_else(|| failed(format!("invalid status {value}")))? as u16,
        };
        if let Some(Value::Object(set)) = instructions.get("headers") {
            for (name, value) in set {
                let value = match value {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                if let (Ok(name), Ok(value)) = (HeaderName::try_from(name.as_str()), HeaderValue::try_from(value)) {
                    headers.insert(name, value);
                }
            }
        }
        let body = match instructions.get("body") {
            Some(Value::String(text)) => Bytes::from(text.clone()),
            Some(Value::Null) | None => {
                headers
                    .entry(header::CONTENT_TYPE)
                    .or_insert(HeaderValue::from_static("application/json; charset=utf-8"));
                Bytes::from(Value::Object(instructions.clone()).to_string())
            }
            Some(other) => {
                headers
                    .entry(header::CONTENT_TYPE)
                    .or_insert(HeaderValue::from_static("application/json; charset=utf-8"));
                Bytes::from(other.to_string())
            }
        };
        Ok(UpstreamResponse { status, headers, body })
    }
}

impl ResponseRewriter for Rewrite {
    fn rewrite(&self, response: UpstreamResponse) -> RewriteFuture<'_> {
        Box::pin(self.run(response))
    }
}

impl Plugin for AiResponseTransformer {
    fn name(&self) -> &'static str {
        "ai-response-transformer"
    }

    fn priority(&self) -> i32 {
        768
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let calls = Arc::new(Mutex::new(None));
        ctx.shared.insert(PendingCall(calls.clone()));
        ctx.shared.insert(RewriteResponse(Box::new(Rewrite {
            transformer: self.transformer.clone(),
            instructions: self.instructions,
            calls,
        })));
        Flow::Continue
    }

    fn filters_headers(&self) -> bool {
        true
    }

    /// The LLM call's accounting moves where the log serializer reads it.
    fn header_filter(&self, ctx: &mut crate::context::ResponseCtx<'_>) {
        let Some(PendingCall(calls)) = ctx.shared.remove::<PendingCall>() else {
            return;
        };
        let analytics = calls.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(analytics) = analytics {
            crate::ai::transformer::TransformerCalls::record(ctx.shared, self.transformer.name, analytics);
        }
    }
}
