//! `ai-proxy` (Kong 3.9, priority 770): a client speaking OpenAI's chat or
//! completions format reaches the configured LLM provider in that
//! provider's format, and the answer comes back in OpenAI's, whole or as a
//! stream translated event by event (docs/ai.md). The request goes through
//! the proxy's own upstream path: the plugin names the provider as the
//! request's target ([`crate::UpstreamTarget`]), asks for a whole answer
//! before the header filters when it must translate one
//! ([`crate::BufferUpstreamResponse`]), and counts tokens from the
//! provider's usage fields for the log and metrics
//! ([`crate::ai::Analytics`]). With `fallbacks`, the next provider takes a
//! request the first one refuses (failover.rs).

pub(crate) mod failover;
mod schema;

pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "ai-proxy",
    priority: 770,
    schema: schema::schema,
    build: |config, scope| Ok(std::sync::Arc::new(AiProxy::from_config(config, scope.plugin)?)),
};

use std::io::Read;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};

use self::failover::{ClientRequest, EntryHealth, Plan};
use crate::ai::config::{LlmConfig, ParamLocation, Provider, RouteType};
use crate::ai::providers::{self, StreamTranslator};
use crate::ai::request::{self, refusal, Streaming};
use crate::ai::stream::StreamState;
use crate::ai::{AiRequest, Analytics};
use crate::config::ConfigReader;
use crate::context::{BodyChunk, RequestCtx, ResponseCtx, ResponseSource, SharedStore};
use crate::phase::{
    BufferUpstreamResponse, Failover, Flow, Plugin, ServiceResponseBody, StreamResponse, UpstreamTarget,
};
use crate::PluginError;

const MODEL_HEADER: HeaderName = HeaderName::from_static("x-kong-llm-model");

#[derive(Debug)]
pub struct AiProxy {
    /// The configured provider first, then each fallback.
    entries: Arc<Vec<LlmConfig>>,
    health: Arc<Vec<EntryHealth>>,
    streaming: Streaming,
    max_body: usize,
    model_name_header: bool,
    failover_statuses: Vec<u16>,
    cooldown_ms: u64,
    plugin_id: Option<uuid::Uuid>,
}

/// A request made for one provider.
pub(crate) struct Built {
    pub target: UpstreamTarget,
    pub path: String,
    pub query: String,
    pub body: Bytes,
    pub hide_usage: bool,
    /// The body as logged (`log_payloads`): without an auth parameter.
    pub payload: Option<String>,
}

impl AiProxy {
    pub fn from_config(config: &Map<String, Value>, plugin_id: Option<uuid::Uuid>) -> Result<AiProxy, PluginError> {
        let c = ConfigReader::new(config);
        let mut entries = vec![LlmConfig::read(&c)?];
        for (at, record) in schema::fallback_records(config).iter().enumerate() {
            let entry = LlmConfig::read(&ConfigReader::new(record))
                .map_err(|e| PluginError::invalid(&format!("fallbacks.{}", at + 1), e.to_string()))?;
            entries.push(entry);
        }
        for (at, entry) in entries.iter().enumerate() {
            providers::supported(entry).map_err(|why| {
                let field = match at {
                    0 => "model.provider".to_string(),
                    n => format!("fallbacks.{n}.model.provider"),
                };
                PluginError::invalid(&field, why)
            })?;
        }
        if c.string("llm_format")?.as_deref().is_some_and(|f| f != "openai") {
            return Err(PluginError::invalid(
                "llm_format",
                "only the openai format is supported by this Strait build (docs/ai.md)",
            ));
        }
        let streaming = match c.string("response_streaming")?.as_deref() {
            Some("deny") => Streaming::Deny,
            Some("always") => Streaming::Always,
            _ => Streaming::Allow,
        };
        let failover_statuses = match config.get("failover_statuses").and_then(Value::as_array) {
            Some(statuses) => statuses.iter().filter_map(Value::as_u64).map(|s| s as u16).collect(),
            None => vec![429, 500, 502, 503, 504],
        };
        Ok(AiProxy {
            health: Arc::new(entries.iter().map(|_| EntryHealth::default()).collect()),
            entries: Arc::new(entries),
            streaming,
            max_body: usize::try_from(c.integer("max_request_body_size", 8 * 1024)?).unwrap_or(usize::MAX),
            model_name_header: c.bool("model_name_header", true)?,
            failover_statuses,
            cooldown_ms: (c.number("failover_cooldown", 30.0)?.max(0.0) * 1000.0) as u64,
            plugin_id,
        })
    }

    /// The request readied for the provider, or Kong's refusal.
    fn prepare(&self, ctx: &mut RequestCtx<'_>) -> Result<(), crate::PluginResponse> {
        let bad = |message: &str| refusal(400, message);
        let primary = request::resolved_config(&self.entries[0], ctx).map_err(|e| bad(&e))?;
        let body = ctx.body.take();
        if body.as_ref().is_some_and(|b| b.len() > self.max_body) {
            return Err(bad(&format!(
                "request body is larger than max_request_body_size ({} bytes)",
                self.max_body
            )));
        }
        let accepted = request::accept(body.as_deref(), primary.model_name.clone(), primary.route_type, self.streaming)
            .map_err(|e| bad(&e))?;
        let include_usage = accepted
            .body
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            == Some(&Value::Bool(true));
        let asked_model = accepted.body.get("model").and_then(Value::as_str).map(str::to_string);
        let order = failover::order(&self.health);
        let first = order[0];
        // Every entry's references resolved now, while the request is here.
        let configs: Vec<LlmConfig> = match self.entries.len() {
            1 => vec![primary.into_owned()],
            _ => self
                .entries
                .iter()
                .map(|entry| request::resolved_config(entry, ctx).map(|c| c.into_owned()))
                .collect::<Result<_, _>>()
                .map_err(|e| bad(&e))?,
        };
        let client = ClientRequest {
            method: ctx.method.clone(),
            path: ctx.path().to_string(),
            query: ctx.query().to_string(),
            headers: match self.entries.len() {
                1 => HeaderMap::new(),
                _ => ctx.headers.clone(),
            },
            body: match (self.entries.len(), config_route(&configs[0])) {
                (1, _) | (_, RouteType::Preserve) => Map::new(),
                _ => accepted.body.clone(),
            },
            raw: body.clone().unwrap_or_default(),
            asked_model,
            stream: accepted.stream,
            include_usage,
        };
        let model = model_for(&configs[first], &client, &accepted.model);
        let config = &configs[first];
        let mut fields = accepted.body;
        let built = build(config, &client, &model, &mut fields, ctx.headers).map_err(|e| e.response())?;
        let mut analytics = self.analytics(config, &model);
        analytics.request_payload = built.payload;
        ctx.body = Some(built.body);
        ctx.set_path_and_query(&built.path, &built.query).map_err(|e| {
            tracing::error!(plugin = "ai-proxy", error = %e, "failed to configure the request for the AI service");
            crate::PluginResponse::message(500, crate::kong_error_message(500))
        })?;
        ctx.exact_path = true;
        ctx.shared.insert(built.target);
        let stream = client
            .stream
            .then(|| stream_state(config, &model, client.include_usage, built.hide_usage));
        match stream.is_some() {
            true => ctx.shared.insert(StreamResponse),
            false => ctx.shared.insert(BufferUpstreamResponse),
        }
        ctx.shared.insert(AiRequest {
            analytics,
            stream,
            entry: first,
        });
        if self.entries.len() > 1 {
            ctx.shared.insert(Failover(Box::new(Plan {
                proxy: self.failover_view(),
                configs,
                client,
                remaining: order[1..].to_vec(),
                current: first,
            })));
        }
        Ok(())
    }

    /// What the failover plan needs of the plugin.
    fn failover_view(&self) -> failover::ProxyView {
        failover::ProxyView {
            health: self.health.clone(),
            statuses: self.failover_statuses.clone(),
            cooldown_ms: self.cooldown_ms,
            plugin_id: self.plugin_id,
        }
    }

    fn analytics(&self, config: &LlmConfig, model: &str) -> Analytics {
        analytics_for(config, model, self.plugin_id)
    }
}

fn config_route(config: &LlmConfig) -> RouteType {
    config.route_type
}

/// The model an entry runs: its configured one, else the client's, else
/// what the checks settled.
fn model_for(config: &LlmConfig, client: &ClientRequest, settled: &str) -> String {
    config
        .model_name
        .clone()
        .or_else(|| client.asked_model.clone().filter(|m| !m.is_empty()))
        .unwrap_or_else(|| settled.to_string())
}

/// The accounting of a request to `config`'s provider.
pub(crate) fn analytics_for(config: &LlmConfig, model: &str, plugin_id: Option<uuid::Uuid>) -> Analytics {
    let mut analytics = Analytics::new(config.provider.name(), model.to_string());
    analytics.plugin_id = plugin_id;
    analytics.input_cost = config.options.input_cost;
    analytics.output_cost = config.options.output_cost;
    analytics.log_statistics = config.log_statistics;
    analytics.log_payloads = config.log_payloads;
    if config.provider == Provider::Azure && config.log_statistics {
        let o = &config.options;
        for (name, value) in [
            ("azure_instance_id", &o.azure_instance),
            ("azure_deployment_id", &o.azure_deployment_id),
            ("azure_api_version", &o.azure_api_version),
        ] {
            if let Some(value) = value {
                analytics.extra_meta.push((name, value.clone()));
            }
        }
    }
    analytics
}

fn stream_state(config: &LlmConfig, model: &str, include_usage: bool, hide_usage: bool) -> StreamState {
    let translator = StreamTranslator::new(config, model, include_usage, hide_usage);
    StreamState::new(translator, config.route_type == RouteType::Preserve)
}

/// Why a request could not be made for a provider.
pub(crate) enum BuildError {
    /// The client's request does not fit the provider's format (400).
    Refused(String),
    /// The provider's address or headers cannot be made (500).
    Failed(String),
}

impl BuildError {
    /// What went wrong, in words.
    pub(crate) fn message(&self) -> &str {
        match self {
            BuildError::Refused(message) | BuildError::Failed(message) => message,
        }
    }

    fn response(self) -> crate::PluginResponse {
        match self {
            BuildError::Refused(message) => refusal(400, &message),
            BuildError::Failed(error) => {
                tracing::error!(plugin = "ai-proxy", %error, "failed to configure the request for the AI service");
                crate::PluginResponse::message(500, crate::kong_error_message(500))
            }
        }
    }
}

/// The request for `config`'s provider: `fields` (the client's body,
/// checked) translated, `headers` (the client's) given the provider's auth
/// and headers, the provider's address, path and query.
pub(crate) fn build(
    config: &LlmConfig,
    client: &ClientRequest,
    model: &str,
    fields: &mut Map<String, Value>,
    headers: &mut HeaderMap,
) -> Result<Built, BuildError> {
    let mut hide_usage = false;
    let mut payload = None;
    let body = if config.route_type == RouteType::Preserve {
        client.raw.clone()
    } else {
        let (translated, hide) = providers::to_format(fields, config, model).map_err(BuildError::Refused)?;
        hide_usage = hide;
        let mut translated = translated.unwrap_or_else(|| Value::Object(std::mem::take(fields)));
        if config.log_payloads {
            payload = Some(translated.to_string());
        }
        if let (Some((name, value, ParamLocation::Body)), Some(object)) = (&config.auth.param, translated.as_object_mut())
        {
            if !object.contains_key(name) || !config.auth.allow_override {
                object.insert(name.clone(), Value::String(value.clone()));
            }
        }
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Bytes::from(translated.to_string())
    };
    let destination =
        providers::destination(config, &client.path, model, client.stream).map_err(BuildError::Failed)?;
    let mut query: Vec<(String, String)> = url::form_urlencoded::parse(client.query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let has = |query: &[(String, String)], name: &str| query.iter().any(|(k, _)| k == name);
    for (name, value) in &destination.query {
        query.retain(|(k, _)| k != name);
        query.push((name.to_string(), value.to_string()));
    }
    if config.provider == Provider::Azure && !has(&query, "api-version") {
        if let Some(version) = &config.options.azure_api_version {
            query.push(("api-version".into(), version.clone()));
        }
    }
    let auth = &config.auth;
    if let Some((name, value, ParamLocation::Query)) = &auth.param {
        if !has(&query, name) || !auth.allow_override {
            query.retain(|(k, _)| k != name);
            query.push((name.clone(), value.clone()));
        }
    }
    if let Some((name, value)) = &auth.header {
        if !headers.contains_key(name) || !auth.allow_override {
            headers.insert(name.clone(), value.clone());
        }
    }
    if let (Provider::Anthropic, Some(version)) = (config.provider, &config.options.anthropic_version) {
        let version = HeaderValue::try_from(version.as_str()).map_err(|e| BuildError::Failed(format!("anthropic_version: {e}")))?;
        headers.insert(HeaderName::from_static("anthropic-version"), version);
    }
    // The answer is read here: no compression to undo.
    headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    if config.provider == Provider::Bedrock {
        sign_for_bedrock(config, &destination, &query, &body, headers)?;
    }
    let query = match query.is_empty() {
        true => String::new(),
        // Sent encoded as SigV4 signs it.
        false if config.provider == Provider::Bedrock => query
            .iter()
            .map(|(k, v)| {
                format!(
                    "{}={}",
                    strait_runtime::aws::uri_encode(k, false),
                    strait_runtime::aws::uri_encode(v, false)
                )
            })
            .collect::<Vec<_>>()
            .join("&"),
        false => url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(query.iter())
            .finish(),
    };
    Ok(Built {
        target: UpstreamTarget {
            host: destination.host,
            port: destination.port,
            tls: destination.tls,
        },
        path: destination.path,
        query,
        payload: payload.or_else(|| config.log_payloads.then(|| String::from_utf8_lossy(&body).into_owned())),
        body,
        hide_usage,
    })
}

/// Bedrock's SigV4 signature (service `bedrock`) over the request as it
/// goes: its `Host`, path, query and body.
fn sign_for_bedrock(
    config: &LlmConfig,
    destination: &providers::Destination,
    query: &[(String, String)],
    body: &[u8],
    headers: &mut HeaderMap,
) -> Result<(), BuildError> {
    let region = providers::bedrock_region(config).ok_or(BuildError::Failed("AWS region not specified anywhere".into()))?;
    let credentials = providers::bedrock_credentials(config)
        .ok_or(BuildError::Failed("no AWS credentials for bedrock".into()))?;
    let default_port = if destination.tls { 443 } else { 80 };
    let host = match destination.port == default_port {
        true => destination.host.clone(),
        false => format!("{}:{}", destination.host, destination.port),
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let signed = strait_runtime::aws::sign(
        &strait_runtime::aws::ToSign {
            method: "POST",
            path: &destination.path,
            query,
            host: &host,
            payload: body,
            region: &region,
            service: "bedrock",
        },
        &credentials,
        now,
    );
    for (name, value) in signed {
        let value = HeaderValue::try_from(value).map_err(|e| BuildError::Failed(format!("signature: {e}")))?;
        headers.insert(name, value);
    }
    Ok(())
}

/// A body the provider compressed anyway, inflated.
fn inflate(body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(body)
        .take(crate::ai::stream::MAX_LOGGED as u64 * 64)
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}

impl Plugin for AiProxy {
    fn name(&self) -> &'static str {
        "ai-proxy"
    }

    fn priority(&self) -> i32 {
        770
    }

    fn reads_request_body(&self) -> bool {
        true
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        match self.prepare(ctx) {
            Ok(()) => Flow::Continue,
            Err(response) => Flow::Respond(response),
        }
    }

    fn filters_headers(&self) -> bool {
        true
    }

    fn header_filter(&self, ctx: &mut ResponseCtx<'_>) {
        let proxied = ctx.source == ResponseSource::Service;
        let status = ctx.status.as_u16();
        let buffered = ctx.shared.remove::<ServiceResponseBody>();
        let compressed = ctx
            .headers
            .get(header::CONTENT_ENCODING)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
        let Some(state) = ctx.shared.get_mut::<AiRequest>() else {
            if let Some(body) = buffered {
                ctx.shared.insert(body);
            }
            return;
        };
        if !proxied || status != 200 {
            // Errors, the provider's included, go on as they came.
            state.analytics.finish();
            if let Some(body) = buffered {
                ctx.shared.insert(body);
            }
            return;
        }
        let entry = state.entry.min(self.entries.len() - 1);
        failover::answered(&self.health, entry);
        let config = &self.entries[entry];
        let analytics = &mut state.analytics;
        let model_header = model_header(config.provider, analytics);
        let mut failed = None;
        let answer = match (&mut state.stream, buffered) {
            (Some(stream), _) => {
                stream.active = !compressed;
                None
            }
            (None, Some(ServiceResponseBody(body))) => {
                let body = match compressed {
                    true => inflate(&body).map(Bytes::from).unwrap_or(body),
                    false => body,
                };
                let answer = match providers::from_format(config, &body, analytics) {
                    Ok(None) => body,
                    Ok(Some(translated)) => Bytes::from(translated),
                    Err(error) => {
                        failed = Some(());
                        Bytes::from(serde_json::json!({"error": {"message": error}}).to_string())
                    }
                };
                analytics.finish();
                if analytics.log_payloads {
                    analytics.response_payload = Some(String::from_utf8_lossy(&answer).into_owned());
                }
                Some(answer)
            }
            (None, None) => None,
        };
        let streams = state.stream.is_some();
        if let Some(answer) = answer {
            ctx.headers.remove(header::CONTENT_ENCODING);
            ctx.shared.insert(ServiceResponseBody(answer));
        }
        if failed.is_some() {
            *ctx.status = http::StatusCode::INTERNAL_SERVER_ERROR;
            ctx.headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json; charset=utf-8"),
            );
        }
        if streams && config.route_type != RouteType::Preserve {
            ctx.headers
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        }
        if matches!(
            config.provider,
            Provider::OpenAi | Provider::Azure | Provider::Mistral | Provider::Gemini | Provider::Bedrock
        ) {
            ctx.headers.remove(header::SET_COOKIE);
        }
        if self.model_name_header && failed.is_none() {
            if let Some(value) = model_header {
                ctx.headers.insert(MODEL_HEADER, value);
            }
        }
    }

    fn filters_body(&self) -> bool {
        true
    }

    fn body_filter(&self, shared: &mut SharedStore, chunk: &mut BodyChunk) {
        let Some(AiRequest {
            analytics,
            stream: Some(stream),
            ..
        }) = shared.get_mut::<AiRequest>()
        else {
            return;
        };
        if !stream.active {
            return;
        }
        if let Some(data) = stream.chunk(&chunk.data, chunk.end, analytics) {
            chunk.data = data;
        }
    }
}

/// `X-Kong-LLM-Model`: `<provider>/<model>`.
fn model_header(provider: Provider, analytics: &Analytics) -> Option<HeaderValue> {
    let model = match analytics.request_model.is_empty() {
        true => analytics.response_model.as_deref()?,
        false => &analytics.request_model,
    };
    HeaderValue::try_from(format!("{}/{}", provider.name(), model)).ok()
}
