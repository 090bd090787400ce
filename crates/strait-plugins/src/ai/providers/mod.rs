//! Each provider's wire format, both ways (docs/ai.md has the mappings):
//! where a request goes ([`destination`]), the request body in the
//! provider's format ([`to_format`]), a whole answer back in OpenAI's
//! ([`from_format`]), and a stream translated event by event
//! ([`StreamTranslator`]). Every path reads the provider's usage fields
//! into the request's [`Analytics`].

pub mod anthropic;
pub mod bedrock;
pub mod cohere;
pub mod gemini;
pub mod huggingface;
pub mod llama2;
pub mod ollama;
pub mod openai;

use serde_json::{Map, Value};

use super::config::{LlmConfig, Provider, RouteType};
use super::sse::Event;
use super::Analytics;

/// A translated whole answer: `None` when it goes on as it came.
pub type Translated = Result<Option<Vec<u8>>, String>;

/// Where the provider is: scheme, host, port and path, and query
/// arguments the operation needs (Gemini's `alt=sse`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    pub path: String,
    pub query: Vec<(&'static str, &'static str)>,
}

/// The providers this build translates; the others are refused when a
/// plugin is configured (docs/ai.md).
pub fn supported(config: &LlmConfig) -> Result<(), String> {
    match config.provider {
        Provider::OpenAi | Provider::Azure | Provider::Anthropic => Ok(()),
        Provider::Gemini if config.auth.gcp_use_service_account => {
            Err("gcp_use_service_account is not supported by this Strait build yet (docs/ai.md)".into())
        }
        Provider::Gemini | Provider::Cohere | Provider::HuggingFace => Ok(()),
        Provider::Bedrock => {
            bedrock_region(config).ok_or("bedrock needs model.options.bedrock.aws_region (or AWS_REGION)")?;
            bedrock_credentials(config)
                .ok_or("bedrock needs auth.aws_access_key_id and auth.aws_secret_access_key (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")?;
            Ok(())
        }
        Provider::Mistral if matches!(config.options.mistral_format.as_deref(), Some("openai" | "ollama")) => Ok(()),
        Provider::Llama2 if config.options.llama2_format.is_some() => Ok(()),
        // Kong's checks require the format; a record read without them
        // (a fallback's) is refused here.
        provider => Err(format!(
            "provider {} needs model.options.{}_format",
            provider.name(),
            provider.name()
        )),
    }
}

/// Bedrock's region: `model.options.bedrock.aws_region`, else the
/// environment's (`AWS_REGION`, `AWS_DEFAULT_REGION`), as Kong.
pub fn bedrock_region(config: &LlmConfig) -> Option<String> {
    config.options.bedrock_region.clone().or_else(|| {
        ["AWS_REGION", "AWS_DEFAULT_REGION"]
            .iter()
            .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    })
}

/// Bedrock's credentials: the configured key pair, else the environment's.
pub fn bedrock_credentials(config: &LlmConfig) -> Option<strait_runtime::aws::Credentials> {
    match (&config.auth.aws_access_key_id, &config.auth.aws_secret_access_key) {
        (Some(key), Some(secret)) => Some(strait_runtime::aws::Credentials {
            access_key: key.clone(),
            secret_key: secret.clone(),
            session_token: None,
        }),
        _ => strait_runtime::aws::Credentials::from_env(),
    }
}

/// Where `config`'s provider serves `route` (Kong's `upstream_url_format`
/// and `operation_map`): `upstream_url` when set, else the provider's
/// public API; a `preserve` route keeps the client's path
/// (`request_path`) unless `upstream_path` says otherwise.
pub fn destination(config: &LlmConfig, request_path: &str, model: &str, stream: bool) -> Result<Destination, String> {
    let options = &config.options;
    let route = config.route_type;
    // A model name from the client goes into the path: encoded, so that it
    // names a model and nothing else.
    let model = &strait_runtime::aws::uri_encode(model, false);
    let gemini_operation = match stream {
        true => "streamGenerateContent",
        false => "generateContent",
    };
    let mut destination = match &options.upstream_url {
        Some(url) => {
            let tls = match url.scheme() {
                "https" => true,
                "http" => false,
                other => return Err(format!("upstream_url: unsupported scheme {other}")),
            };
            let mut path = url.path().to_string();
            // A stream of a URL written for whole answers.
            if config.provider == Provider::Gemini && stream && path.ends_with(":generateContent") {
                path = format!("{}:streamGenerateContent", path.trim_end_matches(":generateContent"));
            }
            if config.provider == Provider::Bedrock && stream && path.ends_with("/converse") {
                path.push_str("-stream");
            }
            // Hugging Face's chat is its model URL's OpenAI-compatible API.
            if config.provider == Provider::HuggingFace && route == RouteType::Chat {
                path = format!("{}/v1/chat/completions", path.trim_end_matches('/'));
            }
            Destination {
                tls,
                host: url.host_str().unwrap_or_default().to_string(),
                port: url.port_or_known_default().unwrap_or(if tls { 443 } else { 80 }),
                path,
                query: Vec::new(),
            }
        }
        None => {
            let (host, path) = match config.provider {
                Provider::OpenAi => (
                    "api.openai.com".to_string(),
                    match route {
                        RouteType::Completions => "/v1/completions",
                        _ => "/v1/chat/completions",
                    }
                    .to_string(),
                ),
                Provider::Anthropic => (
                    "api.anthropic.com".to_string(),
                    match route {
                        RouteType::Completions => "/v1/complete",
                        _ => "/v1/messages",
                    }
                    .to_string(),
                ),
                Provider::Azure => {
                    let instance = options.azure_instance.as_deref().unwrap_or_default();
                    let deployment = options.azure_deployment_id.as_deref().unwrap_or_default();
                    let operation = options.upstream_path.as_deref().unwrap_or(match route {
                        RouteType::Completions => "/completions",
                        _ => "/chat/completions",
                    });
                    (
                        format!("{instance}.openai.azure.com"),
                        format!("/openai/deployments/{deployment}{operation}"),
                    )
                }
                Provider::Mistral => ("api.mistral.ai".to_string(), "/v1/chat/completions".to_string()),
                Provider::HuggingFace => (
                    "api-inference.huggingface.co".to_string(),
                    match route {
                        RouteType::Chat => format!("/models/{model}/v1/chat/completions"),
                        _ => format!("/models/{model}"),
                    },
                ),
                Provider::Bedrock => (
                    format!(
                        "bedrock-runtime.{}.amazonaws.com",
                        bedrock_region(config).unwrap_or_default()
                    ),
                    format!(
                        "/model/{}/{}",
                        strait_runtime::aws::uri_encode(model, false),
                        if stream { "converse-stream" } else { "converse" }
                    ),
                ),
                Provider::Gemini => match (
                    &options.gemini_api_endpoint,
                    &options.gemini_project_id,
                    &options.gemini_location_id,
                ) {
                    (Some(endpoint), Some(project), Some(location)) => (
                        endpoint.clone(),
                        format!(
                            "/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:{gemini_operation}"
                        ),
                    ),
                    _ => (
                        "generativelanguage.googleapis.com".to_string(),
                        format!("/v1beta/models/{model}:{gemini_operation}"),
                    ),
                },
                Provider::Cohere => (
                    "api.cohere.com".to_string(),
                    match route {
                        RouteType::Completions => "/v1/generate",
                        _ => "/v1/chat",
                    }
                    .to_string(),
                ),
                other => return Err(format!("{} needs model.options.upstream_url", other.name())),
            };
            let path = match (config.provider, &options.upstream_path) {
                (Provider::Azure, _) | (_, None) => path,
                (_, Some(own)) => own.clone(),
            };
            Destination {
                tls: true,
                host,
                port: 443,
                path,
                query: Vec::new(),
            }
        }
    };
    if config.provider == Provider::Gemini && stream && route != RouteType::Preserve {
        destination.query.push(("alt", "sse"));
    }
    if route == RouteType::Preserve {
        destination.path = match &options.upstream_path {
            Some(path) if config.provider != Provider::Azure || options.upstream_url.is_some() => path.clone(),
            _ => request_path.to_string(),
        };
    }
    let trimmed = destination.path.trim_start_matches('/');
    destination.path = format!("/{trimmed}");
    if destination.host.is_empty() {
        return Err("the provider's address has no host".into());
    }
    Ok(destination)
}

/// Kong's `merge_config_defaults`: the configured options replace the
/// client's.
pub fn merge_options(body: &mut Map<String, Value>, config: &LlmConfig) {
    let o = &config.options;
    let set = |body: &mut Map<String, Value>, field: &str, value: Option<Value>| {
        if let Some(value) = value {
            body.insert(field.into(), value);
        }
    };
    set(body, "temperature", o.temperature.map(Value::from));
    set(body, "max_tokens", o.max_tokens.map(Value::from));
    set(body, "top_p", o.top_p.map(Value::from));
    set(body, "top_k", o.top_k.map(Value::from));
}

/// Whether the provider speaks OpenAI's format on the wire.
pub fn speaks_openai(provider: Provider) -> bool {
    matches!(
        provider,
        Provider::OpenAi | Provider::Azure | Provider::Mistral | Provider::Llama2
    )
}

/// Whether the configuration speaks Ollama's format (llama2's and
/// mistral's `ollama` format).
pub fn speaks_ollama(config: &LlmConfig) -> bool {
    match config.provider {
        Provider::Llama2 => config.options.llama2_format.as_deref() == Some("ollama"),
        Provider::Mistral => config.options.mistral_format.as_deref() == Some("ollama"),
        _ => false,
    }
}

/// Whether the provider streams a usage chunk when asked
/// (`stream_options.include_usage`): OpenAI, and Azure OpenAI from API
/// version 2024-09-01 on (earlier versions refuse the field).
pub fn streams_usage_when_asked(config: &LlmConfig) -> bool {
    match config.provider {
        Provider::OpenAi => true,
        Provider::Azure => config
            .options
            .azure_api_version
            .as_deref()
            .is_some_and(|version| version.get(..10).is_some_and(|date| date >= "2024-09-01")),
        _ => false,
    }
}

/// The request body in the provider's format, and whether the client
/// must not see a usage chunk it did not ask for.
pub fn to_format(
    body: &mut Map<String, Value>,
    config: &LlmConfig,
    model: &str,
) -> Result<(Option<Value>, bool), String> {
    match config.provider {
        Provider::Anthropic => Ok((
            Some(anthropic::to_format(body, config, model, config.route_type)?),
            false,
        )),
        Provider::Gemini => Ok((Some(gemini::to_format(body, config, model)?), false)),
        Provider::Bedrock => Ok((Some(bedrock::to_format(body, config)?), false)),
        Provider::Cohere => Ok((Some(cohere::to_format(body, config, model)?), false)),
        Provider::HuggingFace if config.route_type == RouteType::Completions => {
            Ok((Some(huggingface::to_format(body, config)), false))
        }
        // Its OpenAI-compatible API streams usage when asked, as OpenAI's.
        Provider::HuggingFace => Ok((None, openai::to_format(body, config, model, true))),
        Provider::Llama2 if config.options.llama2_format.as_deref() == Some("raw") => {
            Ok((Some(llama2::to_format(body, config)?), false))
        }
        _ if speaks_ollama(config) => Ok((Some(ollama::to_format(body, config, model)?), false)),
        provider if speaks_openai(provider) => {
            let hide = openai::to_format(body, config, model, streams_usage_when_asked(config));
            Ok((None, hide))
        }
        provider => Err(format!(
            "no transformer for {}://{}",
            provider.name(),
            config.route_type.name()
        )),
    }
}

/// A whole answer in OpenAI's format, its usage read; for `preserve`,
/// the usage alone (the answer goes on as it came).
pub fn from_format(config: &LlmConfig, body: &[u8], analytics: &mut Analytics) -> Translated {
    let route = config.route_type;
    if route == RouteType::Preserve {
        if let Ok(Value::Object(answer)) = serde_json::from_slice::<Value>(body) {
            match config.provider {
                Provider::Anthropic => anthropic::read_usage(&answer, analytics),
                Provider::Gemini => gemini::read_usage(&answer, analytics, true),
                Provider::Bedrock => bedrock::read_usage(&answer, analytics, true),
                Provider::Cohere => cohere::read_usage(&answer, analytics, true),
                _ if speaks_ollama(config) => ollama::read_usage(&answer, analytics, true),
                _ => openai::read_usage(&answer, analytics, true),
            }
        }
        return Ok(None);
    }
    match config.provider {
        Provider::Anthropic => anthropic::from_format(route, body, analytics),
        Provider::Gemini => {
            let model = analytics.request_model.clone();
            gemini::from_format(body, &model, analytics)
        }
        Provider::Bedrock => {
            let model = analytics.request_model.clone();
            bedrock::from_format(body, &model, analytics)
        }
        Provider::Cohere => {
            let model = analytics.request_model.clone();
            cohere::from_format(route, body, &model, analytics)
        }
        Provider::HuggingFace if route == RouteType::Completions => {
            let model = analytics.request_model.clone();
            huggingface::from_format(body, &model, analytics)
        }
        Provider::Llama2 if config.options.llama2_format.as_deref() == Some("raw") => {
            let model = analytics.request_model.clone();
            llama2::from_format(route, body, &model, analytics)
        }
        _ if speaks_ollama(config) => ollama::from_format(route, body, config, analytics),
        provider => openai::from_format(route, provider.name(), body, analytics),
    }
}

/// A stream's translation, one event at a time.
#[derive(Debug)]
pub enum StreamTranslator {
    OpenAi(openai::Stream),
    Anthropic(anthropic::Stream),
    Gemini(gemini::Stream),
    Bedrock(bedrock::Stream),
    Ollama(ollama::Stream),
    Cohere(cohere::Stream),
    HuggingFace(huggingface::Stream),
}

impl StreamTranslator {
    /// For `config`'s provider; `include_usage`: the client asked for the
    /// usage chunk; `hide_usage`: Strait asked for it, the client did not.
    pub fn new(config: &LlmConfig, model: &str, include_usage: bool, hide_usage: bool) -> StreamTranslator {
        if speaks_ollama(config) {
            return StreamTranslator::Ollama(ollama::Stream::new(
                config.route_type == RouteType::Completions,
                include_usage,
            ));
        }
        match config.provider {
            Provider::Gemini => StreamTranslator::Gemini(gemini::Stream::new(model, include_usage)),
            Provider::Bedrock => StreamTranslator::Bedrock(bedrock::Stream::new(model, include_usage)),
            Provider::HuggingFace if config.route_type == RouteType::Completions => {
                StreamTranslator::HuggingFace(huggingface::Stream::new(model, include_usage))
            }
            Provider::Cohere => StreamTranslator::Cohere(cohere::Stream::new(
                model,
                config.route_type == RouteType::Completions,
                include_usage,
            )),
            Provider::Anthropic => StreamTranslator::Anthropic(anthropic::Stream::new(
                config.route_type == RouteType::Completions,
                include_usage,
            )),
            _ => StreamTranslator::OpenAi(openai::Stream { hide_usage }),
        }
    }

    /// Translates one event into `out`.
    pub fn event(&mut self, event: &Event, out: &mut Vec<u8>, analytics: &mut Analytics) {
        match self {
            StreamTranslator::OpenAi(stream) => stream.event(event, out, analytics),
            StreamTranslator::Anthropic(stream) => stream.event(event, out, analytics),
            StreamTranslator::Gemini(stream) => stream.event(event, out, analytics),
            StreamTranslator::Bedrock(stream) => stream.event(event, out, analytics),
            StreamTranslator::Ollama(stream) => stream.event(event, out, analytics),
            StreamTranslator::Cohere(stream) => stream.event(event, out, analytics),
            StreamTranslator::HuggingFace(stream) => stream.event(event, out, analytics),
        }
    }

    /// The provider streams one JSON object a line, not server-sent
    /// events.
    pub fn line_framing(&self) -> bool {
        matches!(self, StreamTranslator::Ollama(_) | StreamTranslator::Cohere(_))
    }

    /// The provider frames its stream in AWS's binary event-stream, not
    /// server-sent events.
    pub fn aws_framing(&self) -> bool {
        matches!(self, StreamTranslator::Bedrock(_))
    }

    /// The stream ended: the end a provider's format does not send itself
    /// (the usage chunk when asked, `[DONE]`), once the provider said it
    /// was complete.
    pub fn end(&mut self, out: &mut Vec<u8>, analytics: &mut Analytics) {
        if !analytics.complete {
            return;
        }
        match self {
            StreamTranslator::OpenAi(_) => {}
            StreamTranslator::Anthropic(stream) => stream.end(out, analytics),
            StreamTranslator::Gemini(stream) => stream.end(out, analytics),
            StreamTranslator::Bedrock(stream) => stream.end(out, analytics),
            StreamTranslator::Ollama(stream) => stream.end(out, analytics),
            StreamTranslator::Cohere(stream) => stream.end(out, analytics),
            StreamTranslator::HuggingFace(stream) => stream.end(out, analytics),
        }
    }
}

/// A message's text: a string, or its text parts joined by newlines.
pub(crate) fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Each `from` field `body` sets (not null), into `out` as `to`.
pub(crate) fn copy_fields(body: &Map<String, Value>, pairs: &[(&str, &str)], out: &mut Map<String, Value>) {
    for (from, to) in pairs {
        if let Some(value) = body.get(*from).filter(|v| !v.is_null()) {
            out.insert((*to).into(), value.clone());
        }
    }
}

/// OpenAI's `stop` (a string or a list) as a list, into `out[field]`.
pub(crate) fn copy_stop(body: &Map<String, Value>, field: &str, out: &mut Map<String, Value>) {
    match body.get("stop") {
        Some(Value::String(stop)) => {
            out.insert(field.into(), Value::Array(vec![Value::String(stop.clone())]));
        }
        Some(Value::Array(stops)) => {
            out.insert(field.into(), Value::Array(stops.clone()));
        }
        _ => {}
    }
}

/// OpenAI's `usage` object for what was counted.
pub(crate) fn usage_json(analytics: &Analytics) -> Value {
    serde_json::json!({
        "prompt_tokens": analytics.prompt_tokens,
        "completion_tokens": analytics.completion(),
        "total_tokens": analytics.total_tokens(),
    })
}

/// A stream's end in OpenAI's form: when `include_usage`, a chunk with
/// `head`'s id, object, created and model, no choices and the usage; then
/// `[DONE]`.
pub(crate) fn write_stream_end(out: &mut Vec<u8>, analytics: &Analytics, include_usage: bool, mut head: Value) {
    if include_usage {
        head["choices"] = Value::Array(Vec::new());
        head["usage"] = usage_json(analytics);
        write_json_event(out, &head);
    }
    write_event(out, "[DONE]");
}

/// One `data:` event.
pub fn write_event(out: &mut Vec<u8>, data: &str) {
    for line in data.split('\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
}

/// One `data:` event holding `value`'s JSON, written straight into `out`.
pub fn write_json_event(out: &mut Vec<u8>, value: &Value) {
    out.extend_from_slice(b"data: ");
    // Writing JSON into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
    out.extend_from_slice(b"\n\n");
}

/// Seconds since the Unix epoch (OpenAI's `created`).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ai::config::{Auth, ModelOptions};

    fn config(provider: Provider, route_type: RouteType, options: ModelOptions) -> LlmConfig {
        LlmConfig {
            route_type,
            auth: Auth::default(),
            provider,
            model_name: None,
            options,
            log_statistics: false,
            log_payloads: false,
            templated: false,
        }
    }

    #[test]
    fn an_event_of_several_lines_keeps_each_line() {
        let mut out = Vec::new();
        write_event(&mut out, "a\nb");
        assert_eq!(out, b"data: a\ndata: b\n\n");
    }

    #[test]
    fn destinations_follow_kongs_tables() {
        let d = destination(
            &config(Provider::OpenAi, RouteType::Chat, ModelOptions::default()),
            "/x",
            "m",
            false,
        )
        .unwrap();
        assert_eq!(
            d,
            Destination {
                tls: true,
                host: "api.openai.com".into(),
                port: 443,
                path: "/v1/chat/completions".into(),
                query: Vec::new(),
            }
        );
        let azure = ModelOptions {
            azure_instance: Some("inst".into()),
            azure_deployment_id: Some("dep".into()),
            ..Default::default()
        };
        let d = destination(
            &config(Provider::Azure, RouteType::Completions, azure),
            "/x",
            "m",
            false,
        )
        .unwrap();
        assert_eq!(d.host, "inst.openai.azure.com");
        assert_eq!(d.path, "/openai/deployments/dep/completions");
        let own = ModelOptions {
            upstream_url: Some(url::Url::parse("http://127.0.0.1:9000//v1/messages").unwrap()),
            ..Default::default()
        };
        let d = destination(
            &config(Provider::Anthropic, RouteType::Chat, own.clone()),
            "/x",
            "m",
            false,
        )
        .unwrap();
        assert_eq!((d.tls, d.port, d.path.as_str()), (false, 9000, "/v1/messages"));
        let d = destination(
            &config(Provider::Anthropic, RouteType::Preserve, own),
            "/v1/messages",
            "m",
            false,
        )
        .unwrap();
        assert_eq!(d.path, "/v1/messages");
        let d = destination(
            &config(Provider::Gemini, RouteType::Chat, ModelOptions::default()),
            "/x",
            "gemini-2.0",
            true,
        )
        .unwrap();
        assert_eq!(d.host, "generativelanguage.googleapis.com");
        assert_eq!(d.path, "/v1beta/models/gemini-2.0:streamGenerateContent");
        assert_eq!(d.query, vec![("alt", "sse")]);
        let vertex = ModelOptions {
            gemini_api_endpoint: Some("us-central1-aiplatform.googleapis.com".into()),
            gemini_project_id: Some("p".into()),
            gemini_location_id: Some("us-central1".into()),
            ..Default::default()
        };
        let d = destination(
            &config(Provider::Gemini, RouteType::Chat, vertex),
            "/x",
            "gemini-2.0",
            false,
        )
        .unwrap();
        assert_eq!(
            d.path,
            "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.0:generateContent"
        );
    }
}
