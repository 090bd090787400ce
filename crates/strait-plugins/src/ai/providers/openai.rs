//! OpenAI's format (also Azure OpenAI's, and Mistral's and llama2's
//! `openai` formats): requests go as the client sent them with the model
//! and options settled; answers come back as they are, their usage read.
//! A stream's usage is asked for (`stream_options.include_usage`) when the
//! client did not, and its usage-only chunk kept from that client.

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{write_event, Translated};
use crate::ai::config::{LlmConfig, RouteType};
use crate::ai::sse::Event;
use crate::ai::Analytics;

/// The body for the provider. `asks_usage`: the provider streams usage
/// when asked (OpenAI's own API); returns whether the client did not ask
/// for it itself (its usage chunk is then kept from the client).
pub fn to_format(body: &mut Map<String, Value>, config: &LlmConfig, model: &str, asks_usage: bool) -> bool {
    super::merge_options(body, config);
    if !model.is_empty() {
        body.insert("model".into(), json!(model));
    }
    if !body.contains_key("stream") {
        body.insert("stream".into(), Value::Bool(false));
    }
    body.remove("top_k");
    let streaming = body.get("stream") == Some(&Value::Bool(true));
    if !(streaming && asks_usage) {
        return false;
    }
    let options = body
        .entry("stream_options")
        .or_insert_with(|| Value::Object(Map::new()));
    match options.as_object_mut() {
        Some(options) if options.get("include_usage") != Some(&Value::Bool(true)) => {
            options.insert("include_usage".into(), Value::Bool(true));
            true
        }
        _ => false,
    }
}

/// What ai-proxy reads of an OpenAI-format answer or chunk: the rest is
/// skipped, not built (an answer passes on in its own bytes).
#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    choices: Option<Vec<ChoicePeek<'a>>>,
    #[serde(default)]
    usage: Option<UsagePeek>,
}

#[derive(Deserialize)]
struct ChoicePeek<'a> {
    #[serde(borrow, default)]
    delta: Option<DeltaPeek<'a>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(default, rename = "message")]
    _message: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct DeltaPeek<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct UsagePeek {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

impl Peek<'_> {
    fn note(&self, analytics: &mut Analytics, last: bool) {
        if let Some(model) = &self.model {
            if analytics.response_model.as_deref() != Some(model) {
                analytics.response_model = Some(model.to_string());
            }
        }
        if let Some(usage) = &self.usage {
            analytics.usage(usage.prompt_tokens, usage.completion_tokens, last);
        }
    }

    /// Content pieces in this chunk (non-empty deltas or texts).
    fn pieces(&self) -> usize {
        self.choices.as_ref().map_or(0, |choices| {
            choices
                .iter()
                .filter(|c| {
                    c.delta
                        .as_ref()
                        .and_then(|d| d.content.as_deref())
                        .or(c.text.as_deref())
                        .is_some_and(|t| !t.is_empty())
                })
                .count()
        })
    }
}

/// A whole answer: kept as it is when it has `choices`; its usage read.
pub fn from_format(route: RouteType, provider: &str, body: &[u8], analytics: &mut Analytics) -> Translated {
    let failed = |why: &str| {
        Err(format!(
            "transformation failed from type {provider}://{}: {why}",
            route.name()
        ))
    };
    let Ok(answer) = serde_json::from_slice::<Peek<'_>>(body) else {
        return failed(&format!("failed to decode {} response", route.name()));
    };
    if answer.choices.is_none() {
        return failed(&format!("'choices' not in {} response", route.name()));
    }
    answer.note(analytics, true);
    Ok(None)
}

/// The usage fields of an OpenAI-format answer or chunk.
pub fn read_usage(answer: &Map<String, Value>, analytics: &mut Analytics, last: bool) {
    if let Some(model) = answer.get("model").and_then(Value::as_str) {
        analytics.response_model = Some(model.to_string());
    }
    if let Some(usage) = answer.get("usage").filter(|u| u.is_object()) {
        analytics.usage(
            usage.get("prompt_tokens").and_then(Value::as_u64),
            usage.get("completion_tokens").and_then(Value::as_u64),
            last,
        );
    }
}

/// An OpenAI-format stream, passed on event by event.
#[derive(Debug, Default)]
pub struct Stream {
    /// The client did not ask for the usage chunk: it is read, not sent.
    pub hide_usage: bool,
}

impl Stream {
    pub fn event(&mut self, event: &Event, out: &mut Vec<u8>, analytics: &mut Analytics) {
        if event.data == "[DONE]" {
            analytics.complete = true;
            write_event(out, "[DONE]");
            return;
        }
        let Ok(chunk) = serde_json::from_str::<Peek<'_>>(&event.data) else {
            // Not a chunk: passed on as it came (the client's SDK decides).
            write_event(out, &event.data);
            return;
        };
        analytics.streamed_pieces += chunk.pieces() as u64;
        // A chunk with usage is the stream's last report (OpenAI's own
        // usage-only chunk, or Mistral's usage on its last chunk).
        let has_usage = chunk.usage.is_some();
        let usage_only = has_usage && chunk.choices.as_ref().is_none_or(|c| c.is_empty());
        chunk.note(analytics, has_usage);
        if usage_only && self.hide_usage {
            return;
        }
        write_event(out, &event.data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ai::config::{Auth, ModelOptions, Provider};

    fn config() -> LlmConfig {
        LlmConfig {
            route_type: RouteType::Chat,
            auth: Auth::default(),
            provider: Provider::OpenAi,
            model_name: Some("gpt-4o".into()),
            options: ModelOptions {
                temperature: Some(0.5),
                ..Default::default()
            },
            log_statistics: true,
            log_payloads: false,
            templated: false,
        }
    }

    #[test]
    fn the_request_keeps_its_fields_and_asks_for_stream_usage() {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "top_k": 3, "n": 2, "stream": true})
            .as_object()
            .unwrap()
            .clone();
        let hide = to_format(&mut body, &config(), "gpt-4o", true);
        assert!(hide);
        assert_eq!(body["model"], "gpt-4o");
        assert_eq!(body["temperature"], 0.5);
        assert_eq!(body["n"], 2);
        assert!(body.get("top_k").is_none());
        assert_eq!(body["stream_options"]["include_usage"], true);
        let mut asked = json!({"messages": [], "stream": true, "stream_options": {"include_usage": true}})
            .as_object()
            .unwrap()
            .clone();
        assert!(!to_format(&mut asked, &config(), "gpt-4o", true));
        let mut whole = json!({"messages": []}).as_object().unwrap().clone();
        assert!(!to_format(&mut whole, &config(), "gpt-4o", true));
        assert_eq!(whole["stream"], false);
    }

    #[test]
    fn the_usage_chunk_is_counted_and_kept_from_a_client_that_did_not_ask() {
        let mut analytics = Analytics::new("openai", "gpt-4o".into());
        let mut stream = Stream { hide_usage: true };
        let mut out = Vec::new();
        let piece = r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}]}"#;
        stream.event(
            &Event {
                name: String::new(),
                data: piece.into(),
            },
            &mut out,
            &mut analytics,
        );
        let usage = r#"{"id":"c","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1}}"#;
        stream.event(
            &Event {
                name: String::new(),
                data: usage.into(),
            },
            &mut out,
            &mut analytics,
        );
        stream.event(
            &Event {
                name: String::new(),
                data: "[DONE]".into(),
            },
            &mut out,
            &mut analytics,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("data: {piece}\n\ndata: [DONE]\n\n")
        );
        assert_eq!((analytics.prompt_tokens, analytics.completion_tokens), (9, 1));
        assert!(analytics.exact && analytics.complete);
    }

    #[test]
    fn an_answer_without_choices_is_refused_with_kongs_message() {
        let mut analytics = Analytics::new("openai", "m".into());
        assert_eq!(
            from_format(RouteType::Chat, "openai", br#"{"x":1}"#, &mut analytics),
            Err("transformation failed from type openai://llm/v1/chat: 'choices' not in llm/v1/chat response".into())
        );
        let answer = br#"{"choices":[],"model":"gpt-4o-2024","usage":{"prompt_tokens":3,"completion_tokens":4}}"#;
        assert_eq!(from_format(RouteType::Chat, "openai", answer, &mut analytics), Ok(None));
        assert_eq!(analytics.total_tokens(), 7);
        assert_eq!(analytics.response_model.as_deref(), Some("gpt-4o-2024"));
    }
}
