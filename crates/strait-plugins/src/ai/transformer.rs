//! What ai-request-transformer and ai-response-transformer share (Kong
//! 3.9's `ai_introspect_body`): their schema, and one call to the
//! configured LLM that rewrites a text with the configured prompt (the
//! prompt as the system message, the text as the user's), its answer
//! optionally cut to the first match of `transformation_extract_pattern`.
//! The call is the plugin's own (not proxied), made with the provider's
//! format, address, auth and signature as ai-proxy makes them.

use std::time::Duration;

use http::{HeaderMap, Method};
use regex::Regex;
use serde_json::{json, Map, Value};
use strait_core::schema::field::Field;
use strait_core::schema::{formats, PluginSchema};

use super::config::{LlmConfig, RouteType};
use super::{providers, Analytics};
use crate::bundled::ai_proxy::failover::ClientRequest;
use crate::bundled::ai_proxy::{analytics_for, build};
use crate::config::ConfigReader;
use crate::PluginError;

/// The transformers' fields (Kong 3.9's), the response transformer's with
/// `parse_llm_response_json_instructions`.
pub fn schema(response: bool) -> PluginSchema {
    let mut llm = super::config::llm_fields();
    llm.retain(|(name, _)| *name != "logging");
    llm.push((
        "logging",
        Field::record(vec![
            ("log_statistics", Field::boolean().required().default(json!(false))),
            ("log_payloads", Field::boolean().required().default(json!(false))),
        ])
        .required()
        .default_record(),
    ));
    let mut fields = vec![
        ("prompt", Field::string().required()),
        ("transformation_extract_pattern", Field::string()),
        ("http_timeout", Field::integer().required().default(json!(60000))),
        ("https_verify", Field::boolean().required().default(json!(true))),
        ("max_request_body_size", Field::integer().default(json!(8 * 1024)).gt(0)),
        ("http_proxy_host", Field::string().check(formats::host)),
        ("http_proxy_port", Field::integer().between(0, 65535)),
        ("https_proxy_host", Field::string().check(formats::host)),
        ("https_proxy_port", Field::integer().between(0, 65535)),
        ("llm", Field::record(llm).required()),
    ];
    if response {
        fields.push((
            "parse_llm_response_json_instructions",
            Field::boolean().required().default(json!(false)),
        ));
    }
    let schema = PluginSchema::new(fields).check(check);
    match response {
        true => schema,
        false => PluginSchema {
            no_consumer: true,
            ..schema
        },
    }
}

/// Kong's checks: the proxy host and port together, the `llm` record's
/// own, and a chat route type.
fn check(config: &Map<String, Value>) -> Result<(), String> {
    for (host, port) in [
        ("http_proxy_host", "http_proxy_port"),
        ("https_proxy_host", "https_proxy_port"),
    ] {
        let set = |f: &str| config.get(f).is_some_and(|v| !v.is_null());
        if set(host) != set(port) {
            return Err(format!(
                "all or none of these fields must be set: 'config.{host}', 'config.{port}'"
            ));
        }
    }
    let llm = config
        .get("llm")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    super::config::llm_check(&llm).map_err(|e| format!("llm: {e}"))?;
    if llm.get("route_type").and_then(Value::as_str) != Some("llm/v1/chat") {
        return Err("'config.llm.route_type' must be 'llm/v1/chat' for AI transformer plugins".into());
    }
    Ok(())
}

/// A transformer's configuration, read once.
#[derive(Debug)]
pub struct Transformer {
    pub name: &'static str,
    pub llm: LlmConfig,
    pub prompt: String,
    pub extract: Option<Regex>,
    pub timeout: Duration,
    pub verify: bool,
    pub max_body: usize,
    pub plugin_id: Option<uuid::Uuid>,
}

impl Transformer {
    pub fn read(
        config: &Map<String, Value>,
        name: &'static str,
        plugin_id: Option<uuid::Uuid>,
    ) -> Result<Transformer, PluginError> {
        let c = ConfigReader::new(config);
        if c.string("http_proxy_host")?.is_some() || c.string("https_proxy_host")?.is_some() {
            return Err(PluginError::invalid(
                "http_proxy_host",
                "calls through a forward proxy are not supported by this Strait build (docs/ai.md)",
            ));
        }
        let llm = LlmConfig::read(&c.record("llm")?)?;
        providers::supported(&llm).map_err(|why| PluginError::invalid("llm.model.provider", why))?;
        let extract =
            match c.string("transformation_extract_pattern")? {
                None => None,
                // Kong matches with PCRE's `ijom`: case-insensitive, multi-line.
                Some(pattern) => Some(Regex::new(&format!("(?im){pattern}")).map_err(|e| {
                    PluginError::invalid("transformation_extract_pattern", format!("invalid regex: {e}"))
                })?),
            };
        Ok(Transformer {
            name,
            llm,
            prompt: c.string("prompt")?.unwrap_or_default(),
            extract,
            timeout: Duration::from_millis(c.integer("http_timeout", 60000)?.max(1) as u64),
            verify: c.bool("https_verify", true)?,
            max_body: usize::try_from(c.integer("max_request_body_size", 8 * 1024)?).unwrap_or(usize::MAX),
            plugin_id,
        })
    }

    /// `input` rewritten by the LLM, with the call's accounting; errors
    /// are Kong's messages (the plugins answer them with 400).
    pub async fn introspect(&self, input: &str) -> Result<(String, Analytics), String> {
        let model = self.llm.model_name.clone().unwrap_or_default();
        let mut config = self.llm.clone();
        config.route_type = RouteType::Chat;
        let mut fields = json!({
            "messages": [{"role": "system", "content": self.prompt}, {"role": "user", "content": input}],
            "stream": false,
        })
        .as_object()
        .cloned()
        .unwrap_or_default();
        let client = ClientRequest {
            method: Method::POST,
            path: "/".into(),
            query: String::new(),
            headers: HeaderMap::new(),
            body: Map::new(),
            raw: bytes::Bytes::new(),
            asked_model: None,
            stream: false,
            include_usage: false,
        };
        let mut headers = HeaderMap::new();
        let built = build(&config, &client, &model, &mut fields, &mut headers).map_err(|e| e.message().to_string())?;
        headers.insert(http::header::ACCEPT, http::HeaderValue::from_static("application/json"));
        let mut analytics = analytics_for(&config, &model, self.plugin_id);
        analytics.request_payload = built.payload;
        let server = strait_runtime::http_client::Server {
            host: built.target.host.clone(),
            port: built.target.port,
            tls: built.target.tls,
            verify: self.verify,
            timeout: self.timeout,
            keepalive: Duration::from_secs(60),
        };
        let path_and_query = match built.query.is_empty() {
            true => built.path.clone(),
            false => format!("{}?{}", built.path, built.query),
        };
        let answer = server
            .send(strait_runtime::http_client::Request {
                method: Method::POST,
                path_and_query,
                headers,
                body: built.body,
            })
            .await
            .map_err(|e| format!("failed to introspect request with AI service: request to ai service failed: {e}"))?;
        if !answer.status.is_success() {
            return Err(format!(
                "failed to introspect request with AI service: status code {}",
                answer.status.as_u16()
            ));
        }
        let translated = providers::from_format(&config, &answer.body, &mut analytics)
            .map_err(|e| format!("failed to convert AI response to Kong format: {e}"))?;
        analytics.finish();
        let openai = translated.unwrap_or_else(|| answer.body.to_vec());
        if config.log_payloads {
            analytics.response_payload = Some(String::from_utf8_lossy(&openai).into_owned());
        }
        let parsed: Value =
            serde_json::from_slice(&openai).map_err(|e| format!("failed to convert AI response to JSON: {e}"))?;
        let Some(text) = parsed.pointer("/choices/0/message/content").and_then(Value::as_str) else {
            return Err("no 'choices' in upstream AI service response".into());
        };
        let text = match &self.extract {
            None => text.to_string(),
            Some(pattern) => match pattern.find(text) {
                Some(found) => found.as_str().to_string(),
                None => return Err("AI response did not match specified regular expression".into()),
            },
        };
        Ok((text, analytics))
    }
}

/// The accounting of the transformers' LLM calls in a request, logged
/// under `ai.<plugin name>` as Kong does.
#[derive(Debug, Default)]
pub struct TransformerCalls(pub Vec<(&'static str, Analytics)>);

impl TransformerCalls {
    pub fn record(shared: &mut crate::SharedStore, name: &'static str, analytics: Analytics) {
        match shared.get_mut::<TransformerCalls>() {
            Some(calls) => calls.0.push((name, analytics)),
            None => shared.insert(TransformerCalls(vec![(name, analytics)])),
        }
    }
}
