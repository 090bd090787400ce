//! `ai-proxy`'s config schema: Kong 3.9's `llm` record (ai/config.rs), the
//! fields of ai-proxy alone, and Strait's failover fields (`fallbacks`,
//! `failover_statuses`, `failover_cooldown`; docs/ai.md).

use serde_json::{json, Map, Value};
use strait_core::schema::field::Field;
use strait_core::schema::PluginSchema;

use crate::ai::config::{auth_field, llm_check, model_field};

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
        (
            "fallbacks",
            Field::array(Field::record(vec![("model", model_field()), ("auth", auth_field())])).len_max(8),
        ),
        (
            "failover_statuses",
            Field::array(Field::integer().between(400, 599)).default(json!([429, 500, 502, 503, 504])),
        ),
        ("failover_cooldown", Field::number().default(json!(30)).gt(-1)),
    ]);
    PluginSchema::new(fields).check(check)
}

/// Kong's checks of the `llm` record, then each fallback's as the record it
/// makes with the route type and logging (errors name the fallback).
fn check(config: &Map<String, Value>) -> Result<(), String> {
    llm_check(config)?;
    for (at, fallback) in fallback_records(config).iter().enumerate() {
        llm_check(fallback).map_err(|e| format!("fallbacks.{}: {e}", at + 1))?;
    }
    Ok(())
}

/// Each fallback as a whole `llm` record: its `model` and `auth` with the
/// configuration's `route_type` and `logging`.
pub(super) fn fallback_records(config: &Map<String, Value>) -> Vec<Map<String, Value>> {
    let Some(fallbacks) = config.get("fallbacks").and_then(Value::as_array) else {
        return Vec::new();
    };
    fallbacks
        .iter()
        .map(|fallback| {
            let mut record = Map::new();
            for shared in ["route_type", "logging"] {
                if let Some(value) = config.get(shared) {
                    record.insert(shared.into(), value.clone());
                }
            }
            for own in ["model", "auth"] {
                if let Some(value) = fallback.get(own) {
                    record.insert(own.into(), value.clone());
                }
            }
            record
        })
        .collect()
}
