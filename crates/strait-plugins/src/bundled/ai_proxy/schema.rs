//! `ai-proxy`'s config schema: Kong 3.9's `llm` record (ai/config.rs) and
//! the fields of ai-proxy alone.

use serde_json::json;
use strait_core::schema::field::Field;
use strait_core::schema::PluginSchema;

pub(super) fn schema() -> PluginSchema {
    let mut fields = crate::ai::config::llm_fields();
    fields.extend([
        (
            "response_streaming",
            Field::string()
                .default(json!("allow"))
                .one_of(&["allow", "deny", "always"]),
        ),
        ("max_request_body_size", Field::integer().default(json!(8 * 1024)).gt(0)),
        ("model_name_header", Field::boolean().default(json!(true))),
        (
            "llm_format",
            Field::string()
                .default(json!("openai"))
                .one_of(&["openai", "bedrock", "gemini"]),
        ),
    ]);
    PluginSchema::new(fields).check(crate::ai::config::llm_check)
}
