//! `ai-request-transformer` (Kong 3.9, priority 777): the request body,
//! rewritten by the configured LLM with the configured prompt, goes
//! upstream instead (ai/transformer.rs). A failed call answers 400 with
//! Kong's `{"error":{"message":...}}`.

pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "ai-request-transformer",
    priority: 777,
    schema: || crate::ai::transformer::schema(false),
    build: |config, scope| Ok(std::sync::Arc::new(AiRequestTransformer::from_config(config, scope.plugin)?)),
};

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::ai::request::refusal;
use crate::ai::transformer::{Transformer, TransformerCalls};
use crate::context::RequestCtx;
use crate::phase::{AccessFuture, Flow, Plugin};
use crate::PluginError;

#[derive(Debug)]
pub struct AiRequestTransformer {
    transformer: Transformer,
}

impl AiRequestTransformer {
    pub fn from_config(config: &Map<String, Value>, plugin_id: Option<uuid::Uuid>) -> Result<Self, PluginError> {
        Ok(AiRequestTransformer {
            transformer: Transformer::read(config, "ai-request-transformer", plugin_id)?,
        })
    }

    async fn transform(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let body = ctx.body.clone().unwrap_or_default();
        let input = String::from_utf8_lossy(&body[..body.len().min(self.transformer.max_body)]).into_owned();
        match self.transformer.introspect(&input).await {
            Ok((text, analytics)) => {
                TransformerCalls::record(&mut ctx.shared, self.transformer.name, analytics);
                ctx.body = Some(Bytes::from(text));
                Flow::Continue
            }
            Err(message) => Flow::Respond(refusal(400, &message)),
        }
    }
}

impl Plugin for AiRequestTransformer {
    fn name(&self) -> &'static str {
        "ai-request-transformer"
    }

    fn priority(&self) -> i32 {
        777
    }

    fn reads_request_body(&self) -> bool {
        true
    }

    fn waits(&self) -> bool {
        true
    }

    fn access_async<'a>(&'a self, ctx: &'a mut RequestCtx<'_>) -> AccessFuture<'a> {
        Box::pin(self.transform(ctx))
    }
}
