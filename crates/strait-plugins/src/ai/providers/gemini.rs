//! Google's Gemini API (`generateContent`, and `streamGenerateContent`
//! with `alt=sse`, public or on Vertex AI), from and to OpenAI's chat
//! format, whole and streamed.

use serde_json::{json, Map, Value};

use super::{text_of, unix_now, write_json_event, Translated};
use crate::ai::config::{LlmConfig, RouteType};
use crate::ai::sse::Event;
use crate::ai::Analytics;

/// OpenAI's `finish_reason` for Gemini's `finishReason`.
pub fn finish_reason(reason: &str) -> &'static str {
    match reason {
        "STOP" => "stop",
        "MAX_TOKENS" => "length",
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" => "content_filter",
        _ => "stop",
    }
}

/// The request body (chat only, as Kong).
pub fn to_format(body: &Map<String, Value>, config: &LlmConfig, model: &str) -> Result<Value, String> {
    if config.route_type == RouteType::Completions {
        return Err("no transformer for gemini://llm/v1/completions".into());
    }
    let mut body = body.clone();
    super::merge_options(&mut body, config);
    let messages = body.get("messages").and_then(Value::as_array).map_or(&[][..], |m| m);
    let mut system: Vec<String> = Vec::new();
    let mut contents: Vec<Value> = Vec::new();
    // Tool results name their function by the call's id.
    let mut call_names: Vec<(String, String)> = Vec::new();
    for message in messages {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("user");
        let content = message.get("content").unwrap_or(&Value::Null);
        match role {
            "system" | "developer" => {
                if model.starts_with("gemini-1.0") {
                    return Err("system prompts aren't supported on gemini-1.0 models".into());
                }
                system.push(text_of(content));
            }
            "tool" => {
                let id = message.get("tool_call_id").and_then(Value::as_str).unwrap_or_default();
                let name = call_names
                    .iter()
                    .find(|(call, _)| call == id)
                    .map_or(id, |(_, name)| name.as_str());
                contents.push(json!({"role": "user", "parts": [{"functionResponse": {
                    "name": name, "response": {"content": text_of(content)},
                }}]}));
            }
            "assistant" => {
                let mut parts = Vec::new();
                let text = text_of(content);
                if !text.is_empty() {
                    parts.push(json!({"text": text}));
                }
                for call in message
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let name = call
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if let Some(id) = call.get("id").and_then(Value::as_str) {
                        call_names.push((id.to_string(), name.to_string()));
                    }
                    let arguments = call
                        .pointer("/function/arguments")
                        .and_then(Value::as_str)
                        .unwrap_or("{}");
                    let args: Value = serde_json::from_str(arguments)
                        .map_err(|e| format!("tool call arguments are not JSON: {e}"))?;
                    parts.push(json!({"functionCall": {"name": name, "args": args}}));
                }
                contents.push(json!({"role": "model", "parts": parts}));
            }
            _ => contents.push(json!({"role": "user", "parts": parts(content)?})),
        }
    }
    let mut out = Map::new();
    out.insert("contents".into(), Value::Array(contents));
    if !system.is_empty() {
        out.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system.join("\n")}]}),
        );
    }
    let mut generation = Map::new();
    super::copy_fields(
        &body,
        &[
            ("max_tokens", "maxOutputTokens"),
            ("temperature", "temperature"),
            ("top_k", "topK"),
            ("top_p", "topP"),
        ],
        &mut generation,
    );
    super::copy_stop(&body, "stopSequences", &mut generation);
    if !generation.is_empty() {
        out.insert("generationConfig".into(), Value::Object(generation));
    }
    if let Some(tools) = body.get("tools").and_then(Value::as_array) {
        let declarations: Vec<Value> = tools.iter().filter_map(|t| t.get("function").cloned()).collect();
        out.insert("tools".into(), json!([{"functionDeclarations": declarations}]));
    }
    Ok(Value::Object(out))
}

/// A user message's parts (Kong 3.9.1's mapping of OpenAI's content parts).
fn parts(content: &Value) -> Result<Value, String> {
    let Value::Array(items) = content else {
        return Ok(json!([{"text": text_of(content)}]));
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match item.get("type").and_then(Value::as_str) {
            Some("text") => out.push(json!({"text": item.get("text").cloned().unwrap_or(json!(""))})),
            Some("image_url") => {
                let url = item
                    .pointer("/image_url/url")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                out.push(
                    match url.strip_prefix("data:").and_then(|rest| rest.split_once(";base64,")) {
                        Some((mime, data)) => json!({"inlineData": {"mimeType": mime, "data": data}}),
                        None => json!({"fileData": {"fileUri": url, "mimeType": "image/generic"}}),
                    },
                );
            }
            other => {
                return Err(format!(
                    "cannot transform part of type '{}' to Gemini format",
                    other.unwrap_or("?")
                ))
            }
        }
    }
    Ok(Value::Array(out))
}

/// Gemini's usage fields (`usageMetadata`).
pub fn read_usage(answer: &Map<String, Value>, analytics: &mut Analytics, last: bool) {
    if let Some(model) = answer.get("modelVersion").and_then(Value::as_str) {
        analytics.response_model = Some(model.to_string());
    }
    if let Some(usage) = answer.get("usageMetadata") {
        analytics.usage(
            usage.get("promptTokenCount").and_then(Value::as_u64),
            usage.get("candidatesTokenCount").and_then(Value::as_u64),
            last,
        );
    }
}

/// The first candidate's text and function calls.
fn candidate(answer: &Map<String, Value>) -> Option<(String, Vec<Value>, Option<&str>)> {
    let first = answer.get("candidates")?.as_array()?.first()?;
    let parts = first.pointer("/content/parts").and_then(Value::as_array);
    let text: String = parts
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    let calls = parts
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("functionCall"))
        .enumerate()
        .map(|(at, call)| {
            json!({"id": format!("call_{at}"), "type": "function", "function": {
                "name": call.get("name"), "arguments": call.get("args").map_or_else(|| "{}".into(), Value::to_string),
            }})
        })
        .collect();
    Some((text, calls, first.get("finishReason").and_then(Value::as_str)))
}

/// A whole answer in OpenAI's format.
pub fn from_format(body: &[u8], model: &str, analytics: &mut Analytics) -> Translated {
    let failed = |why: &str| Err(format!("transformation failed from type gemini://llm/v1/chat: {why}"));
    let Ok(Value::Object(answer)) = serde_json::from_slice::<Value>(body) else {
        return failed("failed to decode gemini response");
    };
    read_usage(&answer, analytics, true);
    let Some((text, calls, reason)) = candidate(&answer) else {
        return failed("no generation candidates received from Gemini, or max_tokens too short");
    };
    let mut message = json!({"role": "assistant", "content": text});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    let finish = match reason {
        Some(_) if message.get("tool_calls").is_some() => Some("tool_calls"),
        Some(reason) => Some(finish_reason(reason)),
        None => None,
    };
    let out = json!({
        "id": answer.get("responseId").cloned().unwrap_or(Value::Null),
        "object": "chat.completion", "created": unix_now(),
        "model": analytics.response_model.as_deref().unwrap_or(model),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": null}],
        "usage": {
            "prompt_tokens": analytics.prompt_tokens,
            "completion_tokens": analytics.completion_tokens,
            "total_tokens": analytics.total_tokens(),
        },
    });
    Ok(Some(out.to_string().into_bytes()))
}

/// A Gemini stream (`alt=sse`) as OpenAI chunks.
#[derive(Debug, Default)]
pub struct Stream {
    pub include_usage: bool,
    pub model: String,
    id: String,
    created: u64,
    started: bool,
    done: bool,
}

impl Stream {
    pub fn new(model: &str, include_usage: bool) -> Stream {
        Stream {
            include_usage,
            model: model.to_string(),
            ..Default::default()
        }
    }

    fn chunk(&self, choice: Value) -> Value {
        json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [choice]})
    }

    pub fn event(&mut self, event: &Event, out: &mut Vec<u8>, analytics: &mut Analytics) {
        let Ok(Value::Object(answer)) = serde_json::from_str::<Value>(&event.data) else {
            return;
        };
        if !self.started {
            self.started = true;
            self.created = unix_now();
            self.id = answer
                .get("responseId")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            if let Some(version) = answer.get("modelVersion").and_then(Value::as_str) {
                self.model = version.to_string();
            }
            write_json_event(
                out,
                &self.chunk(json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null})),
            );
        }
        let Some((text, calls, reason)) = candidate(&answer) else {
            read_usage(&answer, analytics, false);
            return;
        };
        read_usage(&answer, analytics, reason.is_some());
        if !text.is_empty() {
            analytics.streamed_pieces += 1;
            write_json_event(
                out,
                &self.chunk(json!({"index": 0, "delta": {"content": text}, "finish_reason": null})),
            );
        }
        if !calls.is_empty() {
            let calls: Vec<Value> = calls
                .into_iter()
                .enumerate()
                .map(|(at, mut call)| {
                    call["index"] = json!(at);
                    call
                })
                .collect();
            write_json_event(
                out,
                &self.chunk(json!({"index": 0, "delta": {"tool_calls": calls}, "finish_reason": null})),
            );
        }
        if let Some(reason) = reason {
            analytics.complete = true;
            write_json_event(
                out,
                &self.chunk(json!({"index": 0, "delta": {}, "finish_reason": finish_reason(reason)})),
            );
        }
    }

    /// The stream's end in OpenAI's form: the usage chunk when asked, then
    /// `[DONE]`.
    pub fn end(&mut self, out: &mut Vec<u8>, analytics: &mut Analytics) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let head =
            json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model});
        super::write_stream_end(out, analytics, self.include_usage, head);
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
            provider: Provider::Gemini,
            model_name: Some("gemini-1.5-pro".into()),
            options: ModelOptions {
                temperature: Some(0.8),
                ..Default::default()
            },
            log_statistics: true,
            log_payloads: false,
            templated: false,
        }
    }

    #[test]
    fn chat_requests_become_generate_content_requests() {
        let body = json!({"messages": [
            {"role": "system", "content": "You are a mathematician."},
            {"role": "user", "content": "What is 1 + 2?"},
            {"role": "assistant", "content": "3"},
            {"role": "user", "content": [{"type": "text", "text": "And this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}}]},
        ], "max_tokens": 100, "stop": "END"});
        let out = to_format(body.as_object().unwrap(), &config(), "gemini-1.5-pro").unwrap();
        assert_eq!(out["systemInstruction"]["parts"][0]["text"], "You are a mathematician.");
        assert_eq!(out["contents"][1]["role"], "model");
        assert_eq!(out["contents"][2]["parts"][1]["inlineData"]["mimeType"], "image/png");
        assert_eq!(
            out["generationConfig"],
            json!({"maxOutputTokens": 100, "temperature": 0.8, "stopSequences": ["END"]})
        );
    }

    #[test]
    fn a_stream_becomes_openai_chunks_with_its_usage() {
        let mut stream = Stream::new("gemini-1.5-pro", true);
        let mut analytics = Analytics::new("gemini", "gemini-1.5-pro".into());
        let mut out = Vec::new();
        for data in [
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Hel"}]}}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":1},"responseId":"r1"}"#,
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"lo"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":2,"totalTokenCount":11}}"#,
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
        assert!(
            text.contains(r#""content":"Hel""#) && text.contains(r#""finish_reason":"stop""#),
            "{text}"
        );
        assert!(text.contains(r#""total_tokens":11"#), "{text}");
        assert!(text.ends_with("data: [DONE]\n\n"));
        assert_eq!(
            (analytics.prompt_tokens, analytics.completion(), analytics.exact),
            (9, 2, true)
        );
    }
}
