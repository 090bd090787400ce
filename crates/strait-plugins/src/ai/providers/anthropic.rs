//! Anthropic's Messages API (chat) and legacy Text Completions API, from
//! and to OpenAI's format, whole and streamed.

use serde_json::{json, Map, Value};

use super::{text_of, unix_now, write_json_event, Translated};
use crate::ai::config::{LlmConfig, RouteType};
use crate::ai::sse::Event;
use crate::ai::Analytics;

/// Anthropic requires `max_tokens`; sent when neither the configuration
/// nor the client sets it.
pub const DEFAULT_MAX_TOKENS: i64 = 4096;

/// OpenAI's `finish_reason` for Anthropic's `stop_reason`.
pub fn finish_reason(stop_reason: &str) -> &str {
    match stop_reason {
        "end_turn" | "stop_sequence" => "stop",
        "max_tokens" => "length",
        "tool_use" => "tool_calls",
        other => other,
    }
}

/// The request for `route` (chat: Messages API; completions: Text
/// Completions).
pub fn to_format(
    body: &Map<String, Value>,
    config: &LlmConfig,
    model: &str,
    route: RouteType,
) -> Result<Value, String> {
    let mut body = body.clone();
    super::merge_options(&mut body, config);
    let max_tokens = body
        .get("max_tokens")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_MAX_TOKENS);
    let mut out = Map::new();
    out.insert("model".into(), json!(model));
    if route == RouteType::Completions {
        let prompt = body.get("prompt").and_then(Value::as_str).unwrap_or_default();
        out.insert("prompt".into(), json!(format!("\n\nHuman: {prompt}\n\nAssistant:")));
        out.insert("max_tokens_to_sample".into(), json!(max_tokens));
    } else {
        let (messages, system) = messages(body.get("messages").and_then(Value::as_array).map_or(&[][..], |m| m))?;
        out.insert("messages".into(), Value::Array(messages));
        if let Some(system) = system {
            out.insert("system".into(), json!(system));
        }
        out.insert("max_tokens".into(), json!(max_tokens));
        if let Some(tools) = body.get("tools").and_then(Value::as_array) {
            out.insert("tools".into(), Value::Array(tools.iter().filter_map(tool).collect()));
        }
        if let Some(choice) = body.get("tool_choice").and_then(tool_choice) {
            out.insert("tool_choice".into(), choice);
        }
    }
    for field in ["temperature", "top_p", "top_k"] {
        if let Some(value) = body.get(field).filter(|v| !v.is_null()) {
            out.insert(field.into(), value.clone());
        }
    }
    super::copy_stop(&body, "stop_sequences", &mut out);
    if let Some(user) = body.get("user").and_then(Value::as_str) {
        out.insert("metadata".into(), json!({"user_id": user}));
    }
    out.insert(
        "stream".into(),
        Value::Bool(body.get("stream") == Some(&Value::Bool(true))),
    );
    Ok(Value::Object(out))
}

/// OpenAI's messages as Anthropic's, and the system prompt (system
/// messages joined, in order).
fn messages(messages: &[Value]) -> Result<(Vec<Value>, Option<String>), String> {
    let mut out = Vec::with_capacity(messages.len());
    let mut system: Option<String> = None;
    for message in messages {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("user");
        let content = message.get("content").unwrap_or(&Value::Null);
        match role {
            "system" | "developer" => {
                let text = text_of(content);
                match system.as_mut() {
                    Some(joined) => {
                        joined.push_str("\n\n");
                        joined.push_str(&text);
                    }
                    None => system = Some(text),
                }
            }
            "tool" => out.push(json!({
                "role": "user",
                "content": [{
                    "type": "tool_result",
                    "tool_use_id": message.get("tool_call_id").cloned().unwrap_or(Value::Null),
                    "content": text_of(content),
                }],
            })),
            "assistant" => {
                let mut blocks = Vec::new();
                let text = text_of(content);
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for call in message
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let arguments = call
                        .pointer("/function/arguments")
                        .and_then(Value::as_str)
                        .unwrap_or("{}");
                    let input: Value = serde_json::from_str(arguments)
                        .map_err(|e| format!("tool call arguments are not JSON: {e}"))?;
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call.get("id").cloned().unwrap_or(Value::Null),
                        "name": call.pointer("/function/name").cloned().unwrap_or(Value::Null),
                        "input": input,
                    }));
                }
                out.push(json!({"role": "assistant", "content": blocks}));
            }
            _ => out.push(json!({"role": "user", "content": user_content(content)})),
        }
    }
    Ok((out, system))
}

/// A user message's content: text as it is, OpenAI's parts as Anthropic's
/// blocks (text; images by data URL or by URL).
fn user_content(content: &Value) -> Value {
    let Value::Array(parts) = content else {
        return json!(text_of(content));
    };
    let blocks = parts
        .iter()
        .filter_map(|part| match part.get("type").and_then(Value::as_str) {
            Some("text") => Some(json!({"type": "text", "text": part.get("text").cloned().unwrap_or(json!(""))})),
            Some("image_url") => {
                let url = part.pointer("/image_url/url").and_then(Value::as_str)?;
                Some(match url.strip_prefix("data:").and_then(|rest| rest.split_once(";base64,")) {
                    Some((media_type, data)) => {
                        json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
                    }
                    None => json!({"type": "image", "source": {"type": "url", "url": url}}),
                })
            }
            _ => None,
        })
        .collect();
    Value::Array(blocks)
}

/// An OpenAI function tool as an Anthropic tool.
fn tool(tool: &Value) -> Option<Value> {
    let function = tool.get("function")?;
    let mut out = Map::new();
    out.insert("name".into(), function.get("name")?.clone());
    if let Some(description) = function.get("description") {
        out.insert("description".into(), description.clone());
    }
    out.insert(
        "input_schema".into(),
        function
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"})),
    );
    Some(Value::Object(out))
}

fn tool_choice(choice: &Value) -> Option<Value> {
    match choice {
        Value::String(mode) => match mode.as_str() {
            "auto" => Some(json!({"type": "auto"})),
            "required" => Some(json!({"type": "any"})),
            "none" => Some(json!({"type": "none"})),
            _ => None,
        },
        Value::Object(_) => {
            let name = choice.pointer("/function/name")?;
            Some(json!({"type": "tool", "name": name}))
        }
        _ => None,
    }
}

/// A whole answer in OpenAI's format.
pub fn from_format(route: RouteType, body: &[u8], analytics: &mut Analytics) -> Translated {
    let failed = |why: &str| {
        Err(format!(
            "transformation failed from type anthropic://{}: {why}",
            route.name()
        ))
    };
    let Ok(Value::Object(answer)) = serde_json::from_slice::<Value>(body) else {
        return failed("failed to decode anthropic response");
    };
    read_usage(&answer, analytics);
    let model = answer.get("model").cloned().unwrap_or(Value::Null);
    let id = answer.get("id").cloned().unwrap_or(Value::Null);
    let stop = answer.get("stop_reason").and_then(Value::as_str).map(finish_reason);
    let usage = super::usage_json(analytics);
    let out = if route == RouteType::Completions {
        let Some(text) = answer.get("completion").and_then(Value::as_str) else {
            return failed("'completion' not in anthropic://llm/v1/chat response");
        };
        json!({
            "id": id, "object": "text_completion", "created": unix_now(), "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": stop, "logprobs": null}],
            "usage": usage,
        })
    } else {
        let Some(content) = answer.get("content").and_then(Value::as_array) else {
            return failed("'content' not in anthropic://llm/v1/chat response");
        };
        let text: Vec<&str> = content
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect();
        let calls: Vec<Value> = content
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
            .map(|b| {
                json!({"id": b.get("id"), "type": "function", "function": {
                    "name": b.get("name"),
                    "arguments": b.get("input").map_or_else(|| "{}".to_string(), Value::to_string),
                }})
            })
            .collect();
        let mut message = json!({"role": "assistant", "content": text.join("\n")});
        if !calls.is_empty() {
            message["tool_calls"] = Value::Array(calls);
        }
        json!({
            "id": id, "object": "chat.completion", "created": unix_now(), "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": stop, "logprobs": null}],
            "usage": usage,
        })
    };
    Ok(Some(out.to_string().into_bytes()))
}

/// Anthropic's usage fields (`input_tokens`, `output_tokens`).
pub fn read_usage(answer: &Map<String, Value>, analytics: &mut Analytics) {
    if let Some(model) = answer.get("model").and_then(Value::as_str) {
        analytics.response_model = Some(model.to_string());
    }
    if let Some(usage) = answer.get("usage") {
        analytics.usage(
            usage.get("input_tokens").and_then(Value::as_u64),
            usage.get("output_tokens").and_then(Value::as_u64),
            true,
        );
    }
}

/// An Anthropic stream as OpenAI chunks.
#[derive(Debug, Default)]
pub struct Stream {
    pub completions: bool,
    /// The client asked for the usage chunk (`stream_options`).
    pub include_usage: bool,
    id: String,
    model: String,
    created: u64,
    /// The OpenAI tool call index of each content block that is a tool use.
    tool_blocks: Vec<(u64, usize)>,
    finish: Option<String>,
    done: bool,
    /// A chunk's JSON up to its choices, made once.
    prefix: String,
}

impl Stream {
    /// For the chat or completions route; `include_usage`: the client
    /// asked for the usage chunk.
    pub fn new(completions: bool, include_usage: bool) -> Stream {
        Stream {
            completions,
            include_usage,
            ..Default::default()
        }
    }

    fn chunk(&self, choice: Value) -> Value {
        let object = if self.completions {
            "text_completion"
        } else {
            "chat.completion.chunk"
        };
        json!({"id": self.id, "object": object, "created": self.created, "model": self.model, "choices": [choice]})
    }

    pub fn event(&mut self, event: &Event, out: &mut Vec<u8>, analytics: &mut Analytics) {
        if event.name == "content_block_delta" && self.text_delta(event, out, analytics) {
            return;
        }
        let Ok(Value::Object(data)) = serde_json::from_str::<Value>(&event.data) else {
            return;
        };
        let kind = match event.name.as_str() {
            "" => data.get("type").and_then(Value::as_str).unwrap_or_default(),
            name => name,
        };
        match kind {
            "message_start" => {
                let message = data.get("message").and_then(Value::as_object);
                if let Some(message) = message {
                    self.id = message
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    self.model = message
                        .get("model")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    self.created = unix_now();
                    if let Some(usage) = message.get("usage") {
                        analytics.usage(
                            usage.get("input_tokens").and_then(Value::as_u64),
                            usage.get("output_tokens").and_then(Value::as_u64),
                            false,
                        );
                    }
                    analytics.response_model = Some(self.model.clone());
                }
                let chunk = self
                    .chunk(json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}));
                write_json_event(out, &chunk);
            }
            "content_block_start" => {
                let block = data.get("content_block");
                if block.and_then(|b| b.get("type")).and_then(Value::as_str) == Some("tool_use") {
                    let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                    let call = self.tool_blocks.len();
                    self.tool_blocks.push((index, call));
                    let chunk = self.chunk(json!({"index": 0, "finish_reason": null, "delta": {"tool_calls": [{
                        "index": call, "id": block.and_then(|b| b.get("id")), "type": "function",
                        "function": {"name": block.and_then(|b| b.get("name")), "arguments": ""},
                    }]}}));
                    write_json_event(out, &chunk);
                }
            }
            "content_block_delta" => {
                let delta = data.get("delta");
                match delta.and_then(|d| d.get("type")).and_then(Value::as_str) {
                    Some("text_delta") => {
                        let text = delta
                            .and_then(|d| d.get("text"))
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        analytics.streamed_pieces += 1;
                        write_json_event(out, &self.text_chunk(text));
                    }
                    Some("input_json_delta") => {
                        let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                        let call = self
                            .tool_blocks
                            .iter()
                            .find(|(b, _)| *b == index)
                            .map_or(0, |(_, c)| *c);
                        let partial = delta.and_then(|d| d.get("partial_json")).cloned().unwrap_or(json!(""));
                        analytics.streamed_pieces += 1;
                        let chunk = self.chunk(json!({"index": 0, "finish_reason": null, "delta": {"tool_calls": [{
                            "index": call, "function": {"arguments": partial},
                        }]}}));
                        write_json_event(out, &chunk);
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(usage) = data.get("usage") {
                    analytics.usage(
                        usage.get("input_tokens").and_then(Value::as_u64).filter(|n| *n > 0),
                        usage.get("output_tokens").and_then(Value::as_u64),
                        true,
                    );
                }
                if let Some(stop) = data
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.finish = Some(finish_reason(stop).to_string());
                    let delta = if self.completions { json!(null) } else { json!({}) };
                    let mut choice = json!({"index": 0, "finish_reason": self.finish});
                    if self.completions {
                        choice["text"] = json!("");
                    } else {
                        choice["delta"] = delta;
                    }
                    write_json_event(out, &self.chunk(choice));
                }
            }
            "completion" => {
                // The legacy Text Completions stream.
                let text = data.get("completion").and_then(Value::as_str).unwrap_or_default();
                analytics.streamed_pieces += u64::from(!text.is_empty());
                let stop = data.get("stop_reason").and_then(Value::as_str).map(finish_reason);
                if let Some(model) = data.get("model").and_then(Value::as_str) {
                    self.model = model.to_string();
                }
                write_json_event(
                    out,
                    &self.chunk(json!({"index": 0, "text": text, "finish_reason": stop})),
                );
            }
            "message_stop" => self.end(out, analytics),
            "error" => {
                let error = data.get("error").cloned().unwrap_or(Value::Null);
                write_json_event(
                    out,
                    &json!({"error": {
                        "message": error.get("message").cloned().unwrap_or(json!("upstream error")),
                        "type": error.get("type").cloned().unwrap_or(Value::Null),
                    }}),
                );
            }
            _ => {}
        }
    }

    /// A text delta, the stream's most frequent event, read into a typed
    /// view and written from a prefix made once (no JSON tree either way);
    /// false for any other delta.
    fn text_delta(&mut self, event: &Event, out: &mut Vec<u8>, analytics: &mut Analytics) -> bool {
        #[derive(serde::Deserialize)]
        struct Delta<'a> {
            #[serde(borrow)]
            delta: Text<'a>,
        }
        #[derive(serde::Deserialize)]
        struct Text<'a> {
            #[serde(rename = "type", borrow)]
            kind: std::borrow::Cow<'a, str>,
            #[serde(borrow, default)]
            text: Option<std::borrow::Cow<'a, str>>,
        }
        let Ok(Delta { delta }) = serde_json::from_str::<Delta<'_>>(&event.data) else {
            return false;
        };
        let (true, Some(text)) = (delta.kind == "text_delta", delta.text) else {
            return false;
        };
        analytics.streamed_pieces += 1;
        if self.prefix.is_empty() {
            let object = match self.completions {
                true => "text_completion",
                false => "chat.completion.chunk",
            };
            let head = json!({"id": self.id, "object": object, "created": self.created, "model": self.model});
            let mut prefix = head.to_string();
            prefix.pop();
            prefix.push_str(",\"choices\":[");
            self.prefix = prefix;
        }
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(self.prefix.as_bytes());
        out.extend_from_slice(match self.completions {
            true => b"{\"index\":0,\"text\":",
            false => b"{\"index\":0,\"delta\":{\"content\":",
        });
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, text.as_ref());
        out.extend_from_slice(match self.completions {
            true => b",\"finish_reason\":null}]}\n\n",
            false => b"},\"finish_reason\":null}]}\n\n",
        });
        true
    }

    fn text_chunk(&self, text: &str) -> Value {
        if self.completions {
            self.chunk(json!({"index": 0, "text": text, "finish_reason": null}))
        } else {
            self.chunk(json!({"index": 0, "delta": {"content": text}, "finish_reason": null}))
        }
    }

    /// The stream's end in OpenAI's form: the usage chunk when the client
    /// asked for it, then `[DONE]`.
    pub fn end(&mut self, out: &mut Vec<u8>, analytics: &mut Analytics) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        analytics.complete = true;
        // The legacy Text Completions API reports no usage.
        let head =
            json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model});
        super::write_stream_end(out, analytics, self.include_usage && analytics.exact, head);
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
            provider: Provider::Anthropic,
            model_name: Some("claude".into()),
            options: ModelOptions::default(),
            log_statistics: true,
            log_payloads: false,
            templated: false,
        }
    }

    #[test]
    fn chat_requests_become_messages_requests() {
        let body = json!({
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "t1", "type": "function",
                    "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
                {"role": "tool", "tool_call_id": "t1", "content": "42"},
            ],
            "stop": "END", "temperature": 0.2, "tools": [{"type": "function", "function": {"name": "f",
                "parameters": {"type": "object"}}}], "tool_choice": "required",
        });
        let out = to_format(body.as_object().unwrap(), &config(), "claude", RouteType::Chat).unwrap();
        assert_eq!(out["system"], "Be brief.");
        assert_eq!(out["max_tokens"], DEFAULT_MAX_TOKENS);
        assert_eq!(out["stop_sequences"], json!(["END"]));
        assert_eq!(out["stream"], false);
        assert_eq!(out["messages"][0]["content"][1]["source"]["media_type"], "image/png");
        assert_eq!(out["messages"][1]["content"][0]["input"], json!({"a": 1}));
        assert_eq!(out["messages"][2]["content"][0]["tool_use_id"], "t1");
        assert_eq!(out["tools"][0]["input_schema"], json!({"type": "object"}));
        assert_eq!(out["tool_choice"], json!({"type": "any"}));
    }

    #[test]
    fn a_stream_becomes_openai_chunks_with_exact_usage() {
        let mut stream = Stream::new(false, true);
        let mut analytics = Analytics::new("anthropic", "claude".into());
        let mut out = Vec::new();
        let events = [
            (
                "message_start",
                r#"{"type":"message_start","message":{"id":"msg_1","model":"claude-x","usage":{"input_tokens":12,"output_tokens":1}}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            ),
            ("ping", r#"{"type":"ping"}"#),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}"#,
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}"#,
            ),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ];
        for (name, data) in events {
            stream.event(
                &Event {
                    name: name.into(),
                    data: data.into(),
                },
                &mut out,
                &mut analytics,
            );
        }
        let text = String::from_utf8(out).unwrap();
        let chunks: Vec<&str> = text.split("\n\n").filter(|s| !s.is_empty()).collect();
        assert_eq!(chunks.len(), 6, "{text}");
        assert!(chunks[1].contains(r#""content":"Hel""#));
        assert!(chunks[3].contains(r#""finish_reason":"stop""#));
        assert!(chunks[4].contains(r#""total_tokens":17"#));
        assert_eq!(chunks[5], "data: [DONE]");
        assert_eq!((analytics.prompt_tokens, analytics.completion_tokens), (12, 5));
        assert!(analytics.exact && analytics.complete);
    }

    #[test]
    fn text_deltas_written_from_the_prefix_equal_the_json_tree() {
        for completions in [false, true] {
            let mut stream = Stream::new(completions, false);
            let mut analytics = Analytics::new("anthropic", "claude".into());
            let mut sink = Vec::new();
            let start =
                r#"{"type":"message_start","message":{"id":"msg_\"1","model":"claude-x","usage":{"input_tokens":1}}}"#;
            stream.event(
                &Event {
                    name: "message_start".into(),
                    data: start.into(),
                },
                &mut sink,
                &mut analytics,
            );
            let text = "quote \" backslash \\ line\n é";
            let delta =
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}});
            let mut fast = Vec::new();
            stream.event(
                &Event {
                    name: "content_block_delta".into(),
                    data: delta.to_string(),
                },
                &mut fast,
                &mut analytics,
            );
            let mut tree = Vec::new();
            write_json_event(&mut tree, &stream.text_chunk(text));
            assert_eq!(String::from_utf8(fast).unwrap(), String::from_utf8(tree).unwrap());
        }
    }
}
