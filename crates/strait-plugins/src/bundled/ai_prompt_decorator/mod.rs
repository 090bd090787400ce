//! `ai-prompt-decorator` (Kong 3.9, priority 772): messages put before
//! and after a chat request's own, before ai-proxy translates it.

pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "ai-prompt-decorator",
    priority: 772,
    schema,
    build: |config, _| Ok(std::sync::Arc::new(AiPromptDecorator::from_config(config)?)),
};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use serde_json::{json, Map, Value};
use strait_core::schema::field::Field;
use strait_core::schema::PluginSchema;

use crate::ai::request::{body_object, refusal};
use crate::config::ConfigReader;
use crate::context::RequestCtx;
use crate::phase::{Flow, Plugin};
use crate::PluginError;

fn schema() -> PluginSchema {
    let message = || {
        Field::record(vec![
            (
                "role",
                Field::string()
                    .required()
                    .default(json!("system"))
                    .one_of(&["system", "assistant", "user"]),
            ),
            ("content", Field::string().required().len_min(1).len_max(500)),
        ])
    };
    PluginSchema::new(vec![
        (
            "prompts",
            Field::record(vec![
                ("prepend", Field::array(message()).len_max(15)),
                ("append", Field::array(message()).len_max(15)),
            ]),
        ),
        ("max_request_body_size", Field::integer().default(json!(8 * 1024)).gt(0)),
        (
            "llm_format",
            Field::string()
                .default(json!("openai"))
                .one_of(&["openai", "bedrock", "gemini"]),
        ),
    ])
    .check(|config| {
        let set = |name: &str| {
            config
                .get("prompts")
                .and_then(|p| p.get(name))
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
        };
        match set("prepend") || set("append") {
            true => Ok(()),
            false => Err(
                "at least one of these fields must be non-empty: 'config.prompts.prepend', 'config.prompts.append'"
                    .into(),
            ),
        }
    })
}

#[derive(Debug)]
pub struct AiPromptDecorator {
    prepend: Vec<Value>,
    append: Vec<Value>,
    max_body: usize,
}

impl AiPromptDecorator {
    pub fn from_config(config: &Map<String, Value>) -> Result<AiPromptDecorator, PluginError> {
        let c = ConfigReader::new(config);
        let prompts = c.record("prompts")?;
        let messages = |field: &str| -> Result<Vec<Value>, PluginError> {
            prompts
                .records(field)?
                .iter()
                .map(|m| {
                    Ok(json!({
                        "role": m.string("role")?.unwrap_or_else(|| "system".into()),
                        "content": m.string("content")?.unwrap_or_default(),
                    }))
                })
                .collect()
        };
        Ok(AiPromptDecorator {
            prepend: messages("prepend")?,
            append: messages("append")?,
            max_body: usize::try_from(c.integer("max_request_body_size", 8 * 1024)?).unwrap_or(usize::MAX),
        })
    }
}

impl Plugin for AiPromptDecorator {
    fn name(&self) -> &'static str {
        "ai-prompt-decorator"
    }

    fn priority(&self) -> i32 {
        772
    }

    fn reads_request_body(&self) -> bool {
        true
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let mut body = body_object(ctx.body.as_ref(), self.max_body).unwrap_or_default();
        let Some(Value::Array(messages)) = body.remove("messages").filter(|m| m.as_array().is_some_and(|a| !a.is_empty()))
        else {
            return Flow::Respond(refusal(400, "this LLM route only supports llm/chat type requests"));
        };
        let decorated: Vec<Value> = self
            .prepend
            .iter()
            .cloned()
            .chain(messages)
            .chain(self.append.iter().cloned())
            .collect();
        body.insert("messages".into(), Value::Array(decorated));
        ctx.body = Some(Bytes::from(Value::Object(body).to_string()));
        ctx.headers
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Flow::Continue
    }
}
