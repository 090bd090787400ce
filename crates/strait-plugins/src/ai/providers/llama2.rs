//! llama2's `raw` format (Kong's): the chat or prompt as one Llama 2
//! prompt string (`[INST]`, `<<SYS>>` markers) in `inputs`, the answer's
//! `data[0].generated_text` after its last `[/INST]`. Whole answers only
//! (Kong has no stream for it either; a stream is refused).

use serde_json::{json, Map, Value};

use super::{text_of, unix_now, Translated};
use crate::ai::config::{LlmConfig, RouteType};
use crate::ai::Analytics;

/// Kong's Llama 2 prompt for a chat: the first message as the system
/// block, the second closing the first instruction, then each user message
/// an instruction and each system message a closed turn (assistant
/// messages are left out, as Kong).
fn chat_prompt(messages: &[Value]) -> String {
    let mut prompt = String::new();
    for (at, message) in messages.iter().enumerate() {
        let content = text_of(message.get("content").unwrap_or(&Value::Null));
        let role = message.get("role").and_then(Value::as_str).unwrap_or("user");
        match (at, role) {
            (0, _) => prompt.push_str(&format!("<s>[INST] <<SYS>> {content} <</SYS>>")),
            (1, _) => prompt.push_str(&format!(" {content} [/INST]")),
            (_, "system") => prompt.push_str(&format!(" {content} </s>")),
            (_, "user") => prompt.push_str(&format!(" <s>[INST] {content} [/INST]")),
            _ => {}
        }
    }
    prompt
}

/// The request body.
pub fn to_format(body: &Map<String, Value>, config: &LlmConfig) -> Result<Value, String> {
    let mut body = body.clone();
    super::merge_options(&mut body, config);
    if body.get("stream") == Some(&Value::Bool(true)) {
        return Err("streaming is not supported with llama2_format raw".into());
    }
    let inputs = match config.route_type {
        RouteType::Completions => format!(
            "<s> [INST] <<SYS>> You are a helpful assistant. <<SYS>> {} [/INST]",
            body.get("prompt").and_then(Value::as_str).unwrap_or_default()
        ),
        _ => chat_prompt(body.get("messages").and_then(Value::as_array).map_or(&[][..], |m| m)),
    };
    let mut parameters = Map::new();
    super::copy_fields(
        &body,
        &[
            ("max_tokens", "max_new_tokens"),
            ("top_p", "top_p"),
            ("top_k", "top_k"),
            ("temperature", "temperature"),
        ],
        &mut parameters,
    );
    parameters.insert("stream".into(), json!(false));
    Ok(json!({"inputs": inputs, "parameters": parameters}))
}

/// A whole answer (`{"data": [{"generated_text"}]}`) in OpenAI's format.
pub fn from_format(route: RouteType, body: &[u8], model: &str, analytics: &mut Analytics) -> Translated {
    let failed = |why: &str| {
        Err(format!(
            "transformation failed from type llama2://{}: {why}",
            route.name()
        ))
    };
    let Ok(Value::Object(answer)) = serde_json::from_slice::<Value>(body) else {
        return failed("failed to decode llama2 response");
    };
    let Some(data) = answer.get("data").and_then(Value::as_array).filter(|d| d.len() == 1) else {
        return failed("cannot parse response from llama2 endpoint");
    };
    let Some(generated) = data[0].get("generated_text").and_then(Value::as_str) else {
        return failed("response data is empty from llama2 endpoint");
    };
    let text = generated.rsplit("[/INST]").next().unwrap_or(generated).trim();
    if let Some(usage) = answer.get("usage") {
        analytics.usage(
            usage.get("prompt_tokens").and_then(Value::as_u64),
            usage.get("completion_tokens").and_then(Value::as_u64),
            true,
        );
    }
    let usage = super::usage_json(analytics);
    let out = match route {
        RouteType::Completions => {
            json!({"id": null, "object": "text_completion", "created": unix_now(), "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": "stop"}], "usage": usage})
        }
        _ => json!({"id": null, "object": "chat.completion", "created": unix_now(), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": usage}),
    };
    Ok(Some(out.to_string().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chats_become_llama2_prompts_and_answers_come_back_after_the_last_instruction() {
        let messages = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "ignored"}, {"role": "user", "content": "Again"}]);
        assert_eq!(
            chat_prompt(messages.as_array().unwrap()),
            "<s>[INST] <<SYS>> Be brief. <</SYS>> Hi [/INST] <s>[INST] Again [/INST]"
        );
        let mut analytics = Analytics::new("llama2", "llama2".into());
        let answer = br#"{"data":[{"generated_text":"<s>[INST] x [/INST] Hello there "}],"usage":{"prompt_tokens":4,"completion_tokens":2}}"#;
        let out = from_format(RouteType::Chat, answer, "llama2", &mut analytics)
            .unwrap()
            .unwrap();
        let out: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(out["choices"][0]["message"]["content"], "Hello there");
        assert_eq!(analytics.total_tokens(), 6);
    }
}
