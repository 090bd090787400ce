//! Cohere's v1 API (`/v1/chat`, `/v1/generate`), from and to OpenAI's
//! format, whole and streamed (newline-delimited JSON events).

use serde_json::{json, Map, Value};

use super::{text_of, unix_now, write_event, write_json_event, Translated};
use crate::ai::config::{LlmConfig, RouteType};
use crate::ai::sse::Event;
use crate::ai::Analytics;

/// OpenAI's `finish_reason` for Cohere's.
pub fn finish_reason(reason: &str) -> &'static str {
    match reason {
        "MAX_TOKENS" => "length",
        "ERROR_TOXIC" => "content_filter",
        _ => "stop",
    }
}

/// The request body: chat as `message` and `chat_history` (system
/// messages as the `preamble`), completions as `prompt`.
pub fn to_format(body: &Map<String, Value>, config: &LlmConfig, model: &str) -> Result<Value, String> {
    let mut body = body.clone();
    super::merge_options(&mut body, config);
    let mut out = Map::new();
    out.insert("model".into(), json!(model));
    if config.route_type == RouteType::Completions {
        out.insert("prompt".into(), body.get("prompt").cloned().unwrap_or(json!("")));
    } else {
        let messages = body.get("messages").and_then(Value::as_array).map_or(&[][..], |m| m);
        let mut preamble: Vec<String> = Vec::new();
        let mut history: Vec<Value> = Vec::new();
        for message in messages {
            let text = text_of(message.get("content").unwrap_or(&Value::Null));
            match message.get("role").and_then(Value::as_str).unwrap_or("user") {
                "system" | "developer" => preamble.push(text),
                "assistant" => history.push(json!({"role": "CHATBOT", "message": text})),
                _ => history.push(json!({"role": "USER", "message": text})),
            }
        }
        let last = history
            .pop()
            .and_then(|m| m.get("message").cloned())
            .ok_or("request body doesn't contain valid prompts")?;
        out.insert("message".into(), last);
        if !history.is_empty() {
            out.insert("chat_history".into(), Value::Array(history));
        }
        if !preamble.is_empty() {
            out.insert("preamble".into(), json!(preamble.join("\n")));
        }
    }
    super::copy_fields(
        &body,
        &[
            ("max_tokens", "max_tokens"),
            ("temperature", "temperature"),
            ("top_p", "p"),
            ("top_k", "k"),
        ],
        &mut out,
    );
    super::copy_stop(&body, "stop_sequences", &mut out);
    out.insert("stream".into(), json!(body.get("stream") == Some(&Value::Bool(true))));
    Ok(Value::Object(out))
}

/// Cohere's billed units (`meta.billed_units`).
pub fn read_usage(answer: &Map<String, Value>, analytics: &mut Analytics, last: bool) {
    let units = answer.get("meta").and_then(|m| m.get("billed_units"));
    if let Some(units) = units {
        analytics.usage(
            units.get("input_tokens").and_then(Value::as_u64),
            units.get("output_tokens").and_then(Value::as_u64),
            last,
        );
    }
}

/// A whole answer in OpenAI's format.
pub fn from_format(route: RouteType, body: &[u8], model: &str, analytics: &mut Analytics) -> Translated {
    let failed = |why: &str| {
        Err(format!(
            "transformation failed from type cohere://{}: {why}",
            route.name()
        ))
    };
    let Ok(Value::Object(answer)) = serde_json::from_slice::<Value>(body) else {
        return failed("failed to decode cohere response");
    };
    read_usage(&answer, analytics, true);
    let usage = super::usage_json(analytics);
    let out = if let Some(generations) = answer.get("generations").and_then(Value::as_array) {
        let choices: Vec<Value> = generations
            .iter()
            .enumerate()
            .map(|(at, g)| {
                let reason = g
                    .get("finish_reason")
                    .and_then(Value::as_str)
                    .map_or("stop", finish_reason);
                json!({"index": at, "text": g.get("text").cloned().unwrap_or(json!("")), "finish_reason": reason})
            })
            .collect();
        json!({"id": answer.get("id"), "object": "text_completion", "created": unix_now(), "model": model,
            "choices": choices, "usage": usage})
    } else if let Some(text) = answer.get("text").and_then(Value::as_str) {
        let reason = answer
            .get("finish_reason")
            .and_then(Value::as_str)
            .map_or("stop", finish_reason);
        json!({"id": answer.get("generation_id"), "object": "chat.completion", "created": unix_now(), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason}],
            "usage": usage})
    } else {
        return failed("'text' or 'generations' missing from cohere response body");
    };
    Ok(Some(out.to_string().into_bytes()))
}

/// A Cohere stream (one event a line) as OpenAI chunks.
#[derive(Debug, Default)]
pub struct Stream {
    pub completions: bool,
    pub include_usage: bool,
    model: String,
    id: Value,
    created: u64,
    done: bool,
}

impl Stream {
    pub fn new(model: &str, completions: bool, include_usage: bool) -> Stream {
        Stream {
            completions,
            include_usage,
            model: model.to_string(),
            id: Value::Null,
            created: unix_now(),
            done: false,
        }
    }

    fn chunk(&self, text: Option<&str>, reason: Option<&str>) -> Value {
        let choice = match (self.completions, text) {
            (true, text) => json!({"index": 0, "text": text.unwrap_or(""), "finish_reason": reason}),
            (false, Some(text)) => json!({"index": 0, "delta": {"content": text}, "finish_reason": reason}),
            (false, None) => json!({"index": 0, "delta": {}, "finish_reason": reason}),
        };
        let object = if self.completions {
            "text_completion"
        } else {
            "chat.completion.chunk"
        };
        json!({"id": self.id, "object": object, "created": self.created, "model": self.model, "choices": [choice]})
    }

    pub fn event(&mut self, event: &Event, out: &mut Vec<u8>, analytics: &mut Analytics) {
        let Ok(Value::Object(line)) = serde_json::from_str::<Value>(&event.data) else {
            return;
        };
        let kind = line.get("event_type").and_then(Value::as_str).unwrap_or_default();
        let finished = line.get("is_finished") == Some(&Value::Bool(true)) || kind == "stream-end";
        if kind == "stream-start" {
            self.id = line.get("generation_id").cloned().unwrap_or(Value::Null);
            if !self.completions {
                let mut first = self.chunk(Some(""), None);
                first["choices"][0]["delta"]["role"] = json!("assistant");
                write_json_event(out, &first);
            }
            return;
        }
        if !finished {
            if let Some(text) = line.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                analytics.streamed_pieces += 1;
                write_json_event(out, &self.chunk(Some(text), None));
            }
            return;
        }
        if let Some(Value::Object(response)) = line.get("response") {
            read_usage(response, analytics, true);
        }
        analytics.complete = true;
        let reason = line
            .get("finish_reason")
            .and_then(Value::as_str)
            .map_or("stop", finish_reason);
        write_json_event(out, &self.chunk(None, Some(reason)));
    }

    /// The stream's end: the usage chunk when asked, then `[DONE]`.
    pub fn end(&mut self, out: &mut Vec<u8>, analytics: &mut Analytics) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        if self.include_usage {
            let mut chunk = self.chunk(None, None);
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
    use crate::ai::config::{Auth, ModelOptions, Provider};

    #[test]
    fn chat_becomes_message_history_and_preamble_and_streams_come_back() {
        let config = LlmConfig {
            route_type: RouteType::Chat,
            auth: Auth::default(),
            provider: Provider::Cohere,
            model_name: Some("command-r".into()),
            options: ModelOptions::default(),
            log_statistics: true,
            log_payloads: false,
            templated: false,
        };
        let body = json!({"messages": [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": "Again"}], "top_p": 0.5});
        let out = to_format(body.as_object().unwrap(), &config, "command-r").unwrap();
        assert_eq!(out["message"], "Again");
        assert_eq!(out["preamble"], "Be brief.");
        assert_eq!(
            out["chat_history"],
            json!([{"role": "USER", "message": "Hi"}, {"role": "CHATBOT", "message": "Hello"}])
        );
        assert_eq!(out["p"], 0.5);
        let mut stream = Stream::new("command-r", false, true);
        let mut analytics = Analytics::new("cohere", "command-r".into());
        let mut text = Vec::new();
        for line in [
            r#"{"is_finished":false,"event_type":"stream-start","generation_id":"g1"}"#,
            r#"{"is_finished":false,"event_type":"text-generation","text":"Hi"}"#,
            r#"{"is_finished":true,"event_type":"stream-end","finish_reason":"COMPLETE","response":{"meta":{"billed_units":{"input_tokens":7,"output_tokens":1}}}}"#,
        ] {
            stream.event(
                &Event {
                    name: String::new(),
                    data: line.into(),
                },
                &mut text,
                &mut analytics,
            );
        }
        stream.end(&mut text, &mut analytics);
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains(r#""content":"Hi""#) && text.contains(r#""total_tokens":8"#),
            "{text}"
        );
        assert!(text.ends_with("data: [DONE]\n\n"));
    }
}
