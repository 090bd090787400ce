//! The client's request as ai-proxy checks it (Kong's `parse-request` and
//! `normalize-request` filters): a JSON body in the route type's OpenAI
//! format, the model settled between the configuration and the body,
//! streaming allowed or not, Kong's `$(source.key)` references in the
//! model's settings resolved from the request; every refusal a 400 with
//! Kong's `{"error":{"message":...}}` body.

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::config::{LlmConfig, RouteType};
use crate::context::RequestCtx;
use crate::phase::PluginResponse;

/// Kong's refusal body for an LLM request.
pub fn refusal(status: u16, message: &str) -> PluginResponse {
    PluginResponse {
        status,
        headers: vec![("content-type".into(), "application/json; charset=utf-8".into())],
        body: Bytes::from(json!({"error": {"message": message}}).to_string()),
    }
}

/// The request body as a JSON object, when it is one and no longer than
/// `max` bytes (the AI plugins' `max_request_body_size`).
pub fn body_object(body: Option<&Bytes>, max: usize) -> Option<Map<String, Value>> {
    match serde_json::from_slice::<Value>(body.filter(|b| b.len() <= max)?) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

/// `response_streaming`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streaming {
    Allow,
    Deny,
    Always,
}

/// A request ai-proxy accepted.
#[derive(Debug)]
pub struct Accepted {
    /// The body, a JSON object.
    pub body: Map<String, Value>,
    /// The model it runs on.
    pub model: String,
    pub stream: bool,
}

/// Checks `body` against the route type and settles the model (`model`:
/// the configured name with its references resolved).
pub fn accept(
    body: Option<&[u8]>,
    model: Option<String>,
    route_type: RouteType,
    streaming: Streaming,
) -> Result<Accepted, String> {
    const BAD_JSON: &str = "content-type header does not match request body, or bad JSON formatting";
    let mut body = match body.map(serde_json::from_slice::<Value>) {
        Some(Ok(Value::Object(map))) => map,
        _ => return Err(BAD_JSON.into()),
    };
    let has_messages = body
        .get("messages")
        .and_then(Value::as_array)
        .is_some_and(|m| !m.is_empty());
    let has_prompt = body.get("prompt").is_some_and(Value::is_string);
    // Kong 3.9.1 on: a `preserve` body is the provider's own, unchecked.
    if route_type != RouteType::Preserve && !has_messages && !has_prompt {
        return Err("request body doesn't contain valid prompts".into());
    }
    let asked = body.get("model").and_then(Value::as_str).map(str::to_string);
    let model = match (model, asked) {
        (Some(configured), Some(asked)) if !asked.is_empty() && asked != configured => {
            return Err(format!("cannot use own model - must be: {configured}"));
        }
        (Some(configured), _) => Some(configured),
        (None, asked) => asked.filter(|a| !a.is_empty()),
    };
    let model = match (model, route_type) {
        (Some(model), _) => model,
        (None, RouteType::Preserve) => String::new(),
        (None, _) => return Err("model parameter not found in request, nor in gateway configuration".into()),
    };
    if route_type != RouteType::Preserve {
        let format = match (has_messages, has_prompt) {
            (true, true) => return Err("request matches multiple LLM request formats".into()),
            (true, false) => RouteType::Chat,
            (false, true) => RouteType::Completions,
            (false, false) => return Err("request format not recognised".into()),
        };
        if format != route_type {
            return Err(format!(
                "[{}] message format is not compatible with [{}] route type",
                format.name(),
                route_type.name()
            ));
        }
    }
    let asked_stream = body
        .get("stream")
        .is_some_and(|s| !matches!(s, Value::Null | Value::Bool(false)));
    let stream = asked_stream || streaming == Streaming::Always;
    if stream {
        if streaming == Streaming::Deny {
            return Err("response streaming is not enabled for this LLM".into());
        }
        body.insert("stream".into(), Value::Bool(true));
    }
    Ok(Accepted { body, model, stream })
}

/// Kong's `$(source.key)` references (sources `headers`, `query_params`,
/// `uri_captures`) in `template`, each replaced by the request's value
/// (Kong 3.9.1's substitution); `field` names it in errors.
pub fn resolve(template: &str, field: &str, ctx: &RequestCtx<'_>) -> Result<String, String> {
    if !template.contains("$(") {
        return Ok(template.to_string());
    }
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("$(") {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find(')') else {
            return Err(format!("cannot parse expression for field '{field}'"));
        };
        let expression = &rest[start + 2..start + end];
        let Some((source, key)) = expression.split_once('.').filter(|(_, k)| !k.contains('.')) else {
            return Err(format!("cannot parse expression for field '{field}'"));
        };
        let value = match source {
            "headers" => ctx.header(key).map(str::to_string),
            "query_params" => ctx.query_arg(key).map(|v| v.into_owned()),
            "uri_captures" => ctx.captures.iter().find(|(n, _)| n == key).map(|(_, v)| v.clone()),
            other => return Err(format!("source '{other}' is not supported")),
        };
        match value {
            Some(value) => out.push_str(&value),
            None => return Err(format!("'{source}', key '{key}' was not provided")),
        }
        rest = &rest[start + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The configuration with every reference in the model's settings
/// resolved for this request (a copy only when one holds a reference).
pub fn resolved_config<'c>(
    config: &'c LlmConfig,
    ctx: &RequestCtx<'_>,
) -> Result<std::borrow::Cow<'c, LlmConfig>, String> {
    if !config.templated {
        return Ok(std::borrow::Cow::Borrowed(config));
    }
    let mut owned = config.clone();
    let one = |value: &mut Option<String>, field: &str| -> Result<(), String> {
        if let Some(text) = value.as_mut() {
            *text = resolve(text, field, ctx)?;
        }
        Ok(())
    };
    one(&mut owned.model_name, "model.name")?;
    let o = &mut owned.options;
    one(&mut o.anthropic_version, "model.options.anthropic_version")?;
    one(&mut o.azure_instance, "model.options.azure_instance")?;
    one(&mut o.azure_api_version, "model.options.azure_api_version")?;
    one(&mut o.azure_deployment_id, "model.options.azure_deployment_id")?;
    one(&mut o.upstream_path, "model.options.upstream_path")?;
    Ok(std::borrow::Cow::Owned(owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept_json(
        body: Value,
        model: Option<&str>,
        route: RouteType,
        streaming: Streaming,
    ) -> Result<Accepted, String> {
        accept(
            Some(body.to_string().as_bytes()),
            model.map(str::to_string),
            route,
            streaming,
        )
    }

    #[test]
    fn kongs_refusals_in_kongs_order() {
        let chat = json!({"messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(
            accept(Some(b"not json"), None, RouteType::Chat, Streaming::Allow).unwrap_err(),
            "content-type header does not match request body, or bad JSON formatting"
        );
        assert_eq!(
            accept(None, None, RouteType::Chat, Streaming::Allow).unwrap_err(),
            "content-type header does not match request body, or bad JSON formatting"
        );
        assert_eq!(
            accept_json(json!({"messages": []}), Some("m"), RouteType::Chat, Streaming::Allow).unwrap_err(),
            "request body doesn't contain valid prompts"
        );
        let mut own = chat.clone();
        own["model"] = json!("other");
        assert_eq!(
            accept_json(own, Some("gpt-4o"), RouteType::Chat, Streaming::Allow).unwrap_err(),
            "cannot use own model - must be: gpt-4o"
        );
        assert_eq!(
            accept_json(chat.clone(), None, RouteType::Chat, Streaming::Allow).unwrap_err(),
            "model parameter not found in request, nor in gateway configuration"
        );
        assert_eq!(
            accept_json(chat.clone(), Some("m"), RouteType::Completions, Streaming::Allow).unwrap_err(),
            "[llm/v1/chat] message format is not compatible with [llm/v1/completions] route type"
        );
        let both = json!({"messages": [{"role": "user", "content": "x"}], "prompt": "y"});
        assert_eq!(
            accept_json(both, Some("m"), RouteType::Chat, Streaming::Allow).unwrap_err(),
            "request matches multiple LLM request formats"
        );
        let mut streamed = chat.clone();
        streamed["stream"] = json!(true);
        assert_eq!(
            accept_json(streamed.clone(), Some("m"), RouteType::Chat, Streaming::Deny).unwrap_err(),
            "response streaming is not enabled for this LLM"
        );
        let ok = accept_json(streamed, Some("m"), RouteType::Chat, Streaming::Allow).unwrap();
        assert!(ok.stream);
        let forced = accept_json(chat.clone(), Some("m"), RouteType::Chat, Streaming::Always).unwrap();
        assert!(forced.stream);
        assert_eq!(forced.body["stream"], true);
        let mut named = chat;
        named["model"] = json!("from-body");
        assert_eq!(
            accept_json(named, None, RouteType::Chat, Streaming::Allow)
                .unwrap()
                .model,
            "from-body"
        );
        let preserve = accept_json(json!({"anything": 1}), None, RouteType::Preserve, Streaming::Allow).unwrap();
        assert_eq!(preserve.model, "");
    }
}
