//! Hugging Face's Inference API: chat through its OpenAI-compatible
//! messages API (`<model URL>/v1/chat/completions`, OpenAI's format both
//! ways), completions through text generation (`inputs` and
//! `parameters`, answered as `[{"generated_text"}]`, streamed as
//! server-sent events of tokens).

use serde_json::{json, Map, Value};

use super::{unix_now, write_event, write_json_event, Translated};
use crate::ai::config::LlmConfig;
use crate::ai::sse::Event;
use crate::ai::Analytics;

/// OpenAI's `finish_reason` for text generation's.
pub fn finish_reason(reason: &str) -> &'static str {
    match reason {
        "length" => "length",
        _ => "stop",
    }
}

/// A completions request as text generation's (`inputs`, `parameters`,
/// `options`).
pub fn to_format(body: &Map<String, Value>, config: &LlmConfig) -> Value {
    let mut body = body.clone();
    super::merge_options(&mut body, config);
    let mut parameters = Map::new();
    super::copy_fields(
        &body,
        &[
            ("max_tokens", "max_new_tokens"),
            ("temperature", "temperature"),
            ("top_p", "top_p"),
            ("top_k", "top_k"),
        ],
        &mut parameters,
    );
    super::copy_stop(&body, "stop", &mut parameters);
    parameters.insert("details".into(), json!(true));
    let o = &config.options;
    json!({
        "inputs": body.get("prompt").cloned().unwrap_or(json!("")),
        "parameters": parameters,
        "options": {
            "use_cache": o.huggingface_use_cache.unwrap_or(false),
            "wait_for_model": o.huggingface_wait_for_model.unwrap_or(false),
        },
        "stream": body.get("stream") == Some(&Value::Bool(true)),
    })
}

/// A whole text generation answer (`[{"generated_text", "details"}]`) in
/// OpenAI's completions format.
pub fn from_format(body: &[u8], model: &str, analytics: &mut Analytics) -> Translated {
    let failed = |why: &str| {
        Err(format!(
            "transformation failed from type huggingface://llm/v1/completions: {why}"
        ))
    };
    let Ok(answer) = serde_json::from_slice::<Value>(body) else {
        return failed("failed to decode huggingface response");
    };
    if let Some(error) = answer.get("error").and_then(Value::as_str) {
        return failed(&format!("API error: {error}"));
    }
    let Some(first) = answer
        .as_array()
        .and_then(|a| a.first())
        .or(Some(&answer))
        .filter(|f| f.get("generated_text").is_some())
    else {
        return failed("Invalid response format");
    };
    let text = first.get("generated_text").and_then(Value::as_str).unwrap_or_default();
    let details = first.get("details");
    if let Some(tokens) = details.and_then(|d| d.get("generated_tokens")).and_then(Value::as_u64) {
        analytics.usage(None, Some(tokens), true);
    }
    let reason = details
        .and_then(|d| d.get("finish_reason"))
        .and_then(Value::as_str)
        .map_or("stop", finish_reason);
    let out = json!({
        "id": null, "object": "text_completion", "created": unix_now(), "model": model,
        "choices": [{"index": 0, "text": text, "finish_reason": reason}],
        "usage": {
            "prompt_tokens": analytics.prompt_tokens,
            "completion_tokens": analytics.completion_tokens,
            "total_tokens": analytics.total_tokens(),
        },
    });
    Ok(Some(out.to_string().into_bytes()))
}

/// A text generation stream (server-sent events of tokens) as OpenAI's
/// completions chunks.
#[derive(Debug, Default)]
pub struct Stream {
    pub include_usage: bool,
    model: String,
    created: u64,
    done: bool,
}

impl Stream {
    pub fn new(model: &str, include_usage: bool) -> Stream {
        Stream {
            include_usage,
            model: model.to_string(),
            created: unix_now(),
            done: false,
        }
    }

    fn chunk(&self, text: &str, reason: Option<&str>) -> Value {
        json!({"id": null, "object": "text_completion", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "text": text, "finish_reason": reason}]})
    }

    pub fn event(&mut self, event: &Event, out: &mut Vec<u8>, analytics: &mut Analytics) {
        let Ok(Value::Object(data)) = serde_json::from_str::<Value>(&event.data) else {
            return;
        };
        if let Some(error) = data.get("error") {
            write_json_event(out, &json!({"error": {"message": error}}));
            return;
        }
        let token = data.get("token");
        let special = token.and_then(|t| t.get("special")) == Some(&Value::Bool(true));
        let text = token
            .and_then(|t| t.get("text"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !special && !text.is_empty() {
            analytics.streamed_pieces += 1;
            write_json_event(out, &self.chunk(text, None));
        }
        if data.get("generated_text").is_some_and(|t| !t.is_null()) {
            let details = data.get("details");
            if let Some(tokens) = details.and_then(|d| d.get("generated_tokens")).and_then(Value::as_u64) {
                analytics.usage(None, Some(tokens), true);
            }
            analytics.complete = true;
            let reason = details
                .and_then(|d| d.get("finish_reason"))
                .and_then(Value::as_str)
                .map_or("stop", finish_reason);
            write_json_event(out, &self.chunk("", Some(reason)));
        }
    }

    /// The stream's end: the usage chunk when asked, then `[DONE]`.
    pub fn end(&mut self, out: &mut Vec<u8>, analytics: &mut Analytics) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        if self.include_usage {
            let mut chunk = self.chunk("", None);
            chunk["choices"] = json!([]);
            chunk["usage"] = super::usage_json(analytics);
            write_json_event(out, &chunk);
        }
        write_event(out, "[DONE]");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_stream_becomes_completion_chunks_with_the_generated_count() {
        let mut stream = Stream::new("gpt2", true);
        let mut analytics = Analytics::new("huggingface", "gpt2".into());
        let mut out = Vec::new();
        for data in [
            r#"{"token":{"id":1,"text":"Hel","special":false},"generated_text":null,"details":null}"#,
            r#"{"token":{"id":2,"text":"lo","special":false},"generated_text":null,"details":null}"#,
            r#"{"token":{"id":3,"text":"</s>","special":true},"generated_text":"Hello","details":{"finish_reason":"eos_token","generated_tokens":3}}"#,
        ] {
            stream.event(
                &Event {
                    name: String::new(),
                    data: data.into(),
                },
                &mut out,
                &mut analytics,
            );
        }
        stream.end(&mut out, &mut analytics);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains(r#""text":"lo""#) && !text.contains("</s>"), "{text}");
        assert!(
            text.contains(r#""finish_reason":"stop""#) && text.ends_with("data: [DONE]\n\n"),
            "{text}"
        );
        assert_eq!(analytics.completion(), 3);
    }
}
