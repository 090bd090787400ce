//! `ai-prompt-guard` (Kong 3.9, priority 771): a chat or completions
//! prompt checked against deny patterns, then allow patterns; a prompt
//! that fails gets Kong's `400 {"error":{"message":"bad request"}}` (the
//! reason in the debug log, as Kong). Patterns are regular expressions
//! (Rust's `regex` syntax: no look-around or back-references; one that
//! does not compile refuses the configuration, naming it).

pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "ai-prompt-guard",
    priority: 771,
    schema,
    build: |config, _| Ok(std::sync::Arc::new(AiPromptGuard::from_config(config)?)),
};

use regex::Regex;
use serde_json::{json, Map, Value};
use strait_core::schema::field::Field;
use strait_core::schema::PluginSchema;

use crate::ai::request::{body_object, refusal};
use crate::config::ConfigReader;
use crate::context::RequestCtx;
use crate::phase::{Flow, Plugin};
use crate::PluginError;

fn schema() -> PluginSchema {
    let patterns = || Field::array(Field::string().len_min(1).len_max(500)).len_max(10);
    PluginSchema::new(vec![
        ("allow_patterns", patterns()),
        ("deny_patterns", patterns()),
        (
            "allow_all_conversation_history",
            Field::boolean().required().default(json!(false)),
        ),
        ("max_request_body_size", Field::integer().default(json!(8 * 1024)).gt(0)),
        ("match_all_roles", Field::boolean().required().default(json!(false))),
        (
            "llm_format",
            Field::string()
                .default(json!("openai"))
                .one_of(&["openai", "bedrock", "gemini"]),
        ),
    ])
    .check(|config| {
        let set = |name: &str| config.get(name).and_then(Value::as_array).is_some_and(|a| !a.is_empty());
        if !set("allow_patterns") && !set("deny_patterns") {
            return Err(
                "at least one of these fields must be non-empty: 'config.allow_patterns', 'config.deny_patterns'"
                    .into(),
            );
        }
        let on = |name: &str| config.get(name) == Some(&Value::Bool(true));
        if on("match_all_roles") && on("allow_all_conversation_history") {
            return Err("failed conditional validation given value of field 'config.match_all_roles'".into());
        }
        Ok(())
    })
}

#[derive(Debug)]
pub struct AiPromptGuard {
    allow: Vec<Regex>,
    deny: Vec<Regex>,
    latest_only: bool,
    all_roles: bool,
    max_body: usize,
}

impl AiPromptGuard {
    pub fn from_config(config: &Map<String, Value>) -> Result<AiPromptGuard, PluginError> {
        let c = ConfigReader::new(config);
        let compile = |field: &str| -> Result<Vec<Regex>, PluginError> {
            c.strings(field)?
                .iter()
                .enumerate()
                .map(|(at, pattern)| {
                    Regex::new(pattern)
                        .map_err(|e| PluginError::invalid(&format!("{field}.{}", at + 1), format!("invalid regex: {e}")))
                })
                .collect()
        };
        Ok(AiPromptGuard {
            allow: compile("allow_patterns")?,
            deny: compile("deny_patterns")?,
            latest_only: c.bool("allow_all_conversation_history", false)?,
            all_roles: c.bool("match_all_roles", false)?,
            max_body: usize::try_from(c.integer("max_request_body_size", 8 * 1024)?).unwrap_or(usize::MAX),
        })
    }

    /// The text checked (Kong's order: the messages from the latest back,
    /// the user's, or every role's with `match_all_roles`; or the prompt),
    /// or why the request has none.
    fn text(&self, body: &Map<String, Value>) -> Result<String, &'static str> {
        if let Some(messages) = body.get("messages").and_then(Value::as_array) {
            let mut text = String::new();
            for message in messages.iter().rev() {
                let role = message.get("role").and_then(Value::as_str).ok_or("a message without a role")?;
                // Every role a provider may take as the user's (Kong: `user`
                // alone, which `User` or `tool` would slip past).
                let users = !matches!(role, "system" | "developer" | "assistant");
                if users || self.all_roles {
                    let content = message
                        .get("content")
                        .and_then(Value::as_str)
                        .ok_or("a message whose content is not text")?;
                    text.push_str(content);
                    text.push(' ');
                    if self.latest_only {
                        break;
                    }
                }
            }
            return Ok(text);
        }
        match body.get("prompt").and_then(Value::as_str) {
            Some(prompt) => Ok(prompt.to_string()),
            None => Err("ai-prompt-guard only supports llm/v1/chat or llm/v1/completions prompts"),
        }
    }

    fn check(&self, text: &str) -> Result<(), &'static str> {
        if self.deny.iter().any(|r| r.is_match(text)) {
            return Err("prompt pattern is blocked");
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|r| r.is_match(text)) {
            return Err("prompt doesn't match any allowed pattern");
        }
        Ok(())
    }
}

impl Plugin for AiPromptGuard {
    fn name(&self) -> &'static str {
        "ai-prompt-guard"
    }

    fn priority(&self) -> i32 {
        771
    }

    fn reads_request_body(&self) -> bool {
        true
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let body = body_object(ctx.body.as_ref(), self.max_body).unwrap_or_default();
        match self.text(&body).and_then(|text| self.check(&text)) {
            Ok(()) => Flow::Continue,
            Err(why) => {
                tracing::debug!(plugin = "ai-prompt-guard", reason = why, "request refused");
                Flow::Respond(refusal(400, "bad request"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(config: Value) -> AiPromptGuard {
        AiPromptGuard::from_config(config.as_object().unwrap()).unwrap()
    }

    fn chat(messages: Value) -> Map<String, Value> {
        json!({ "messages": messages }).as_object().unwrap().clone()
    }

    #[test]
    fn deny_then_allow_over_the_roles_kong_reads() {
        let g = guard(json!({"deny_patterns": [".*password.*"], "allow_patterns": ["(?i)cats"]}));
        let body = chat(json!([{"role": "user", "content": "tell me about cats"}]));
        assert_eq!(g.text(&body).and_then(|t| g.check(&t)), Ok(()));
        let body = chat(json!([{"role": "user", "content": "cats and my password"}]));
        assert_eq!(g.text(&body).and_then(|t| g.check(&t)), Err("prompt pattern is blocked"));
        let body = chat(json!([{"role": "user", "content": "dogs"}]));
        assert_eq!(
            g.text(&body).and_then(|t| g.check(&t)),
            Err("prompt doesn't match any allowed pattern")
        );
        // A role a provider would take as the user's is read as the user's.
        let misspelt = chat(json!([{"role": "User", "content": "my password"}]));
        assert_eq!(g.text(&misspelt).and_then(|t| g.check(&t)), Err("prompt pattern is blocked"));
        // A system message is not read unless match_all_roles.
        let body = chat(json!([{"role": "system", "content": "password"}, {"role": "user", "content": "cats"}]));
        assert_eq!(g.text(&body).and_then(|t| g.check(&t)), Ok(()));
        let all = guard(json!({"deny_patterns": ["password"], "match_all_roles": true}));
        assert_eq!(all.text(&body).and_then(|t| all.check(&t)), Err("prompt pattern is blocked"));
        // The latest user message only.
        let latest = guard(json!({"deny_patterns": ["password"], "allow_all_conversation_history": true}));
        let body = chat(json!([{"role": "user", "content": "password"}, {"role": "user", "content": "ok"}]));
        assert_eq!(latest.text(&body).and_then(|t| latest.check(&t)), Ok(()));
        assert!(AiPromptGuard::from_config(json!({"deny_patterns": ["(a"]}).as_object().unwrap()).is_err());
    }
}
