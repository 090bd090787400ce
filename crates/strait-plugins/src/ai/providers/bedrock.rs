//! Amazon Bedrock's Converse API (`converse`, `converse-stream`), from and
//! to OpenAI's chat format, whole and streamed. Streams come in AWS's
//! binary event-stream framing ([`FrameReader`]), read across chunk
//! boundaries with both checksums checked.

use serde_json::{json, Map, Value};

use super::{text_of, unix_now, write_json_event, Translated};
use crate::ai::config::{LlmConfig, RouteType};
use crate::ai::sse::{Event, EventTooLong, MAX_EVENT};
use crate::ai::Analytics;

/// OpenAI's `finish_reason` for Converse's `stopReason`.
pub fn finish_reason(reason: &str) -> &'static str {
    match reason {
        "max_tokens" => "length",
        "tool_use" => "tool_calls",
        "guardrail_intervened" | "content_filtered" => "content_filter",
        _ => "stop",
    }
}

/// The Converse request body (chat only, as Kong).
pub fn to_format(body: &Map<String, Value>, config: &LlmConfig) -> Result<Value, String> {
    if config.route_type == RouteType::Completions {
        return Err("no transformer for bedrock://llm/v1/completions".into());
    }
    let mut body = body.clone();
    super::merge_options(&mut body, config);
    let mut system = Vec::new();
    let mut messages: Vec<Value> = Vec::new();
    for message in body.get("messages").and_then(Value::as_array).map_or(&[][..], |m| m) {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("user");
        let content = message.get("content").unwrap_or(&Value::Null);
        match role {
            "system" | "developer" => system.push(json!({"text": text_of(content)})),
            "tool" => {
                let text = text_of(content);
                let result = match serde_json::from_str::<Value>(&text) {
                    Ok(value @ Value::Object(_)) => json!({"json": value}),
                    _ => json!({"text": text}),
                };
                messages.push(json!({"role": "user", "content": [{"toolResult": {
                    "toolUseId": message.get("tool_call_id").cloned().unwrap_or(Value::Null),
                    "content": [result],
                }}]}));
            }
            "assistant" => {
                let mut blocks = Vec::new();
                let text = text_of(content);
                if !text.is_empty() {
                    blocks.push(json!({"text": text}));
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
                    let input: Value = serde_json::from_str(arguments).map_err(|_| {
                        "failed to decode function response arguments from assistant's message, not JSON format"
                            .to_string()
                    })?;
                    blocks.push(json!({"toolUse": {
                        "toolUseId": call.get("id").cloned().unwrap_or(Value::Null),
                        "name": call.pointer("/function/name").cloned().unwrap_or(Value::Null),
                        "input": input,
                    }}));
                }
                messages.push(json!({"role": "assistant", "content": blocks}));
            }
            _ => messages.push(json!({"role": "user", "content": user_blocks(content)})),
        }
    }
    let mut out = Map::new();
    out.insert("messages".into(), Value::Array(messages));
    if !system.is_empty() {
        out.insert("system".into(), Value::Array(system));
    }
    let mut inference = Map::new();
    super::copy_fields(
        &body,
        &[
            ("max_tokens", "maxTokens"),
            ("temperature", "temperature"),
            ("top_p", "topP"),
        ],
        &mut inference,
    );
    super::copy_stop(&body, "stopSequences", &mut inference);
    if !inference.is_empty() {
        out.insert("inferenceConfig".into(), Value::Object(inference));
    }
    if let Some(tools) = body.get("tools").and_then(Value::as_array).filter(|t| !t.is_empty()) {
        let specs: Vec<Value> = tools
            .iter()
            .filter_map(|t| t.get("function"))
            .map(|f| {
                json!({"toolSpec": {
                    "name": f.get("name"),
                    "description": f.get("description").cloned().unwrap_or(json!("")),
                    "inputSchema": {"json": f.get("parameters").cloned().unwrap_or(json!({"type": "object"}))},
                }})
            })
            .collect();
        let mut tool_config = json!({"tools": specs});
        match body.get("tool_choice") {
            Some(Value::String(mode)) if mode == "required" => tool_config["toolChoice"] = json!({"any": {}}),
            Some(Value::String(mode)) if mode == "auto" => tool_config["toolChoice"] = json!({"auto": {}}),
            Some(choice @ Value::Object(_)) => {
                if let Some(name) = choice.pointer("/function/name") {
                    tool_config["toolChoice"] = json!({"tool": {"name": name}});
                }
            }
            _ => {}
        }
        out.insert("toolConfig".into(), tool_config);
    }
    if let Some(top_k) = body.get("top_k").filter(|v| !v.is_null()) {
        out.insert("additionalModelRequestFields".into(), json!({"top_k": top_k}));
    }
    Ok(Value::Object(out))
}

/// A user message's content blocks: text, and images from data URLs.
fn user_blocks(content: &Value) -> Value {
    let Value::Array(parts) = content else {
        return json!([{"text": text_of(content)}]);
    };
    let blocks: Vec<Value> = parts
        .iter()
        .filter_map(|part| match part.get("type").and_then(Value::as_str) {
            Some("text") => Some(json!({"text": part.get("text").cloned().unwrap_or(json!(""))})),
            Some("image_url") => {
                let url = part.pointer("/image_url/url").and_then(Value::as_str)?;
                let (media, data) = url.strip_prefix("data:")?.split_once(";base64,")?;
                let format = media.strip_prefix("image/").unwrap_or(media);
                Some(json!({"image": {"format": format, "source": {"bytes": data}}}))
            }
            _ => None,
        })
        .collect();
    Value::Array(blocks)
}

/// Converse's usage fields.
pub fn read_usage(answer: &Map<String, Value>, analytics: &mut Analytics, last: bool) {
    if let Some(usage) = answer.get("usage") {
        analytics.usage(
            usage.get("inputTokens").and_then(Value::as_u64),
            usage.get("outputTokens").and_then(Value::as_u64),
            last,
        );
    }
}

/// A whole Converse answer in OpenAI's format.
pub fn from_format(body: &[u8], model: &str, analytics: &mut Analytics) -> Translated {
    let failed = |why: &str| Err(format!("transformation failed from type bedrock://llm/v1/chat: {why}"));
    let Ok(Value::Object(answer)) = serde_json::from_slice::<Value>(body) else {
        return failed("failed to decode bedrock response");
    };
    read_usage(&answer, analytics, true);
    let Some(content) = answer
        .get("output")
        .and_then(|o| o.pointer("/message/content"))
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty())
    else {
        return failed("no generation candidates received from Bedrock, or max_tokens too short");
    };
    let text: Vec<&str> = content
        .iter()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    let calls: Vec<Value> = content
        .iter()
        .filter_map(|b| b.get("toolUse"))
        .map(|t| {
            json!({"id": t.get("toolUseId"), "type": "function", "function": {
                "name": t.get("name"), "arguments": t.get("input").map_or_else(|| "{}".into(), Value::to_string),
            }})
        })
        .collect();
    let mut message = json!({"role": "assistant", "content": text.join("\n")});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    let finish = answer.get("stopReason").and_then(Value::as_str).map(finish_reason);
    let out = json!({
        "id": null, "object": "chat.completion", "created": unix_now(), "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": null}],
        "usage": {
            "prompt_tokens": analytics.prompt_tokens,
            "completion_tokens": analytics.completion_tokens,
            "total_tokens": analytics.total_tokens(),
        },
    });
    Ok(Some(out.to_string().into_bytes()))
}

/// AWS's event-stream framing read as it arrives: each whole message
/// (prelude, headers, payload, both CRC-32s checked) becomes an [`Event`]
/// named by its `:event-type` (or `:exception-type`, prefixed `!`), with
/// its payload as the data.
#[derive(Debug, Default)]
pub struct FrameReader {
    pending: Vec<u8>,
}

impl FrameReader {
    pub fn feed(&mut self, bytes: &[u8], mut each: impl FnMut(Event)) -> Result<(), EventTooLong> {
        self.pending.extend_from_slice(bytes);
        let mut at = 0;
        while self.pending.len() - at >= 12 {
            let frame = &self.pending[at..];
            let total = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
            if !(16..=MAX_EVENT).contains(&total) {
                return Err(EventTooLong);
            }
            if frame.len() < total {
                break;
            }
            let message = &frame[..total];
            at += total;
            match parse_message(message) {
                Some(event) => each(event),
                None => return Err(EventTooLong),
            }
        }
        self.pending.drain(..at);
        if self.pending.len() > MAX_EVENT {
            return Err(EventTooLong);
        }
        Ok(())
    }

    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = flate2::Crc::new();
    crc.update(bytes);
    crc.sum()
}

/// One whole message, its checksums checked.
fn parse_message(message: &[u8]) -> Option<Event> {
    let be32 = |at: usize| u32::from_be_bytes([message[at], message[at + 1], message[at + 2], message[at + 3]]);
    let total = message.len();
    let headers_len = be32(4) as usize;
    if be32(8) != crc32(&message[..8]) || be32(total - 4) != crc32(&message[..total - 4]) {
        return None;
    }
    let headers_end = 12usize.checked_add(headers_len).filter(|end| *end <= total - 4)?;
    let mut kind = String::new();
    let mut name = String::new();
    let mut at = 12;
    while at < headers_end {
        let name_len = *message.get(at)? as usize;
        let header = std::str::from_utf8(message.get(at + 1..at + 1 + name_len)?).ok()?;
        at += 1 + name_len;
        let value_type = *message.get(at)?;
        at += 1;
        let fixed = match value_type {
            0 | 1 => 0,
            2 => 1,
            3 => 2,
            4 => 4,
            5 | 8 => 8,
            9 => 16,
            6 | 7 => {
                let len = u16::from_be_bytes([*message.get(at)?, *message.get(at + 1)?]) as usize;
                let value = message.get(at + 2..at + 2 + len)?;
                if value_type == 7 {
                    let value = std::str::from_utf8(value).ok()?;
                    match header {
                        ":event-type" => name = value.to_string(),
                        ":exception-type" => name = format!("!{value}"),
                        ":message-type" => kind = value.to_string(),
                        _ => {}
                    }
                }
                at += 2 + len;
                continue;
            }
            _ => return None,
        };
        at += fixed;
    }
    if kind == "error" {
        name = "!error".into();
    }
    let payload = message.get(headers_end..total - 4)?;
    Some(Event {
        name,
        data: String::from_utf8_lossy(payload).into_owned(),
    })
}

/// A ConverseStream as OpenAI chunks.
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

    fn chunk(&self, choice: Value) -> Value {
        json!({"id": null, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [choice]})
    }

    pub fn event(&mut self, event: &Event, out: &mut Vec<u8>, analytics: &mut Analytics) {
        let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
        if let Some(exception) = event.name.strip_prefix('!') {
            write_json_event(
                out,
                &json!({"error": {
                    "message": data.get("message").cloned().unwrap_or(json!("upstream error")),
                    "type": exception,
                }}),
            );
            return;
        }
        match event.name.as_str() {
            "messageStart" => write_json_event(
                out,
                &self.chunk(json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null})),
            ),
            "contentBlockStart" => {
                if let Some(tool) = data.pointer("/start/toolUse") {
                    let index = data.get("contentBlockIndex").cloned().unwrap_or(json!(0));
                    write_json_event(
                        out,
                        &self.chunk(json!({"index": 0, "finish_reason": null, "delta": {"tool_calls": [{
                            "index": index, "id": tool.get("toolUseId"), "type": "function",
                            "function": {"name": tool.get("name"), "arguments": ""},
                        }]}})),
                    );
                }
            }
            "contentBlockDelta" => {
                if let Some(text) = data.pointer("/delta/text").and_then(Value::as_str) {
                    analytics.streamed_pieces += 1;
                    write_json_event(
                        out,
                        &self.chunk(json!({"index": 0, "delta": {"content": text}, "finish_reason": null})),
                    );
                } else if let Some(input) = data.pointer("/delta/toolUse/input") {
                    analytics.streamed_pieces += 1;
                    let index = data.get("contentBlockIndex").cloned().unwrap_or(json!(0));
                    write_json_event(
                        out,
                        &self.chunk(json!({"index": 0, "finish_reason": null, "delta": {"tool_calls": [{
                            "index": index, "function": {"arguments": input},
                        }]}})),
                    );
                }
            }
            "messageStop" => {
                let reason = data.get("stopReason").and_then(Value::as_str).unwrap_or("end_turn");
                write_json_event(
                    out,
                    &self.chunk(json!({"index": 0, "delta": {}, "finish_reason": finish_reason(reason)})),
                );
            }
            "metadata" => {
                if let Value::Object(map) = &data {
                    read_usage(map, analytics, true);
                }
                analytics.complete = true;
            }
            _ => {}
        }
    }

    /// The stream's end: the usage chunk when asked, then `[DONE]`.
    pub fn end(&mut self, out: &mut Vec<u8>, analytics: &mut Analytics) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let head = json!({"id": null, "object": "chat.completion.chunk", "created": self.created, "model": self.model});
        super::write_stream_end(out, analytics, self.include_usage, head);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One event-stream message, as AWS frames it.
    fn frame(event_type: &str, payload: &str) -> Vec<u8> {
        let mut headers = Vec::new();
        for (name, value) in [
            (":message-type", "event"),
            (":event-type", event_type),
            (":content-type", "application/json"),
        ] {
            headers.push(name.len() as u8);
            headers.extend_from_slice(name.as_bytes());
            headers.push(7);
            headers.extend_from_slice(&(value.len() as u16).to_be_bytes());
            headers.extend_from_slice(value.as_bytes());
        }
        let total = 12 + headers.len() + payload.len() + 4;
        let mut out = Vec::new();
        out.extend_from_slice(&(total as u32).to_be_bytes());
        out.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        let prelude_crc = crc32(&out);
        out.extend_from_slice(&prelude_crc.to_be_bytes());
        out.extend_from_slice(&headers);
        out.extend_from_slice(payload.as_bytes());
        let crc = crc32(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    #[test]
    fn frames_split_anywhere_are_read_whole_and_translated() {
        let mut stream_bytes = Vec::new();
        for (kind, payload) in [
            ("messageStart", r#"{"role":"assistant"}"#),
            ("contentBlockDelta", r#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#),
            (
                "contentBlockDelta",
                r#"{"contentBlockIndex":0,"delta":{"text":" there"}}"#,
            ),
            ("messageStop", r#"{"stopReason":"end_turn"}"#),
            (
                "metadata",
                r#"{"usage":{"inputTokens":8,"outputTokens":2,"totalTokens":10}}"#,
            ),
        ] {
            stream_bytes.extend(frame(kind, payload));
        }
        for cut in [1, 7, 13, 50, stream_bytes.len() - 1] {
            let mut reader = FrameReader::default();
            let mut stream = Stream::new("claude", true);
            let mut analytics = Analytics::new("bedrock", "claude".into());
            let mut out = Vec::new();
            for part in [&stream_bytes[..cut], &stream_bytes[cut..]] {
                reader
                    .feed(part, |event| stream.event(&event, &mut out, &mut analytics))
                    .unwrap();
            }
            stream.end(&mut out, &mut analytics);
            assert_eq!(reader.pending(), 0);
            let text = String::from_utf8(out).unwrap();
            assert!(text.contains(r#""content":" there""#), "{text}");
            assert!(text.contains(r#""finish_reason":"stop""#), "{text}");
            assert!(text.contains(r#""total_tokens":10"#), "{text}");
            assert!(text.ends_with("data: [DONE]\n\n"));
            assert!(analytics.exact && analytics.complete);
        }
        let mut corrupt = frame("messageStart", "{}");
        let last = corrupt.len() - 1;
        corrupt[last] ^= 1;
        assert!(
            FrameReader::default().feed(&corrupt, |_| {}).is_err(),
            "a bad checksum is refused"
        );
    }
}
