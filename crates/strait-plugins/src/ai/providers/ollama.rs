//! Ollama's API (`/api/chat`, `/api/generate`; llama2 and mistral with the
//! `ollama` format), from and to OpenAI's format, whole and streamed
//! (newline-delimited JSON).

use serde_json::{json, Map, Value};

use super::{unix_now, write_event, write_json_event, Translated};
use crate::ai::config::{LlmConfig, RouteType};
use crate::ai::sse::Event;
use crate::ai::Analytics;

/// The request body (Kong's `to_ollama`).
pub fn to_format(body: &Map<String, Value>, config: &LlmConfig, model: &str) -> Result<Value, String> {
    let mut body = body.clone();
    super::merge_options(&mut body, config);
    if body.contains_key("prompt") && body.contains_key("messages") {
        return Err(
            "cannot run raw 'prompt' and chat history 'messages' requests at the same time - refer to schema".into(),
        );
    }
    let mut out = Map::new();
    for field in ["messages", "prompt", "tools", "tool_choice"] {
        if let Some(value) = body.get(field).filter(|v| !v.is_null()) {
            out.insert(field.into(), value.clone());
        }
    }
    out.insert("model".into(), json!(model));
    out.insert("stream".into(), json!(body.get("stream") == Some(&Value::Bool(true))));
    let mut options = Map::new();
    super::copy_fields(
        &body,
        &[
            ("max_tokens", "num_predict"),
            ("temperature", "temperature"),
            ("top_p", "top_p"),
            ("top_k", "top_k"),
        ],
        &mut options,
    );
    if !options.is_empty() {
        out.insert("options".into(), Value::Object(options));
    }
    Ok(Value::Object(out))
}

/// Ollama's usage fields (`prompt_eval_count`, `eval_count`).
pub fn read_usage(answer: &Map<String, Value>, analytics: &mut Analytics, last: bool) {
    if let Some(model) = answer.get("model").and_then(Value::as_str) {
        analytics.response_model = Some(model.to_string());
    }
    let prompt = answer.get("prompt_eval_count").and_then(Value::as_u64);
    let completion = answer.get("eval_count").and_then(Value::as_u64);
    if prompt.is_some() || completion.is_some() {
        analytics.usage(prompt, completion, last);
    }
}

/// A whole answer in OpenAI's format (Kong's `from_ollama`).
pub fn from_format(route: RouteType, body: &[u8], config: &LlmConfig, analytics: &mut Analytics) -> Translated {
    let failed = |why: &str| {
        Err(format!(
            "transformation failed from type {}://{}: {why}",
            config.provider.name(),
            route.name()
        ))
    };
    let Ok(Value::Object(answer)) = serde_json::from_slice::<Value>(body) else {
        return failed("failed to decode ollama response");
    };
    read_usage(&answer, analytics, true);
    let usage = super::usage_json(analytics);
    let length = config
        .options
        .max_tokens
        .is_some_and(|max| Some(max as u64) == answer.get("eval_count").and_then(Value::as_u64));
    let finish = answer
        .get("done_reason")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| if length { "length".into() } else { "stop".into() });
    let model = answer.get("model").cloned().unwrap_or(Value::Null);
    let out = match route {
        RouteType::Completions => json!({
            "id": null, "object": "text_completion", "created": unix_now(), "model": model,
            "choices": [{"index": 0, "text": answer.get("response").cloned().unwrap_or(json!("")), "finish_reason": finish}],
            "usage": usage,
        }),
        _ => {
            let Some(message) = answer.get("message") else {
                return failed("'message' not in ollama response");
            };
            json!({
                "id": null, "object": "chat.completion", "created": unix_now(), "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            })
        }
    };
    Ok(Some(out.to_string().into_bytes()))
}

/// An Ollama stream (one JSON object a line) as OpenAI chunks.
#[derive(Debug, Default)]
pub struct Stream {
    pub completions: bool,
    pub include_usage: bool,
    created: u64,
    model: String,
    done: bool,
}

impl Stream {
    pub fn new(completions: bool, include_usage: bool) -> Stream {
        Stream {
            completions,
            include_usage,
            created: unix_now(),
            ..Default::default()
        }
    }

    fn chunk(&self, choice: Value) -> Value {
        let object = if self.completions {
            "text_completion"
        } else {
            "chat.completion.chunk"
        };
        json!({"id": null, "object": object, "created": self.created, "model": self.model, "choices": [choice]})
    }

    pub fn event(&mut self, event: &Event, out: &mut Vec<u8>, analytics: &mut Analytics) {
        let Ok(Value::Object(line)) = serde_json::from_str::<Value>(&event.data) else {
            return;
        };
        if let Some(model) = line.get("model").and_then(Value::as_str) {
            self.model = model.to_string();
        }
        if let Some(error) = line.get("error") {
            write_json_event(out, &json!({"error": {"message": error}}));
            return;
        }
        let text = match self.completions {
            true => line.get("response"),
            false => line.get("message").and_then(|m| m.get("content")),
        }
        .and_then(Value::as_str)
        .unwrap_or_default();
        if !text.is_empty() {
            analytics.streamed_pieces += 1;
            let choice = match self.completions {
                true => json!({"index": 0, "text": text, "finish_reason": null}),
                false => json!({"index": 0, "delta": {"content": text}, "finish_reason": null}),
            };
            write_json_event(out, &self.chunk(choice));
        }
        if line.get("done") == Some(&Value::Bool(true)) {
            read_usage(&line, analytics, true);
            analytics.complete = true;
            let reason = line.get("done_reason").and_then(Value::as_str).unwrap_or("stop");
            let choice = match self.completions {
                true => json!({"index": 0, "text": "", "finish_reason": reason}),
                false => json!({"index": 0, "delta": {}, "finish_reason": reason}),
            };
            write_json_event(out, &self.chunk(choice));
        }
    }

    /// The stream's end: the usage chunk when asked, then `[DONE]`.
    pub fn end(&mut self, out: &mut Vec<u8>, analytics: &mut Analytics) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        if self.include_usage {
            let mut chunk = self.chunk(json!(null));
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
    fn a_stream_of_lines_becomes_openai_chunks_with_its_counts() {
        let mut stream = Stream::new(false, true);
        let mut analytics = Analytics::new("llama2", "llama3".into());
        let mut out = Vec::new();
        for line in [
            r#"{"model":"llama3","message":{"role":"assistant","content":"Hel"},"done":false}"#,
            r#"{"model":"llama3","message":{"role":"assistant","content":"lo"},"done":false}"#,
            r#"{"model":"llama3","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":12,"eval_count":2}"#,
        ] {
            stream.event(
                &Event {
                    name: String::new(),
                    data: line.into(),
                },
                &mut out,
                &mut analytics,
            );
        }
        stream.end(&mut out, &mut analytics);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains(r#""content":"lo""#) && text.contains(r#""finish_reason":"stop""#),
            "{text}"
        );
        assert!(
            text.contains(r#""total_tokens":14"#) && text.ends_with("data: [DONE]\n\n"),
            "{text}"
        );
        assert_eq!((analytics.prompt_tokens, analytics.completion()), (12, 2));
    }
}
