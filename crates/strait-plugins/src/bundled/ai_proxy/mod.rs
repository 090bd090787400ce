//! `ai-proxy` (Kong 3.9, priority 770): a client speaking OpenAI's chat or
//! completions format reaches the configured LLM provider in that
//! provider's format, and the answer comes back in OpenAI's, whole or as a
//! stream translated event by event (docs/ai.md). The request goes through
//! the proxy's own upstream path: the plugin names the provider as the
//! request's target ([`crate::UpstreamTarget`]), asks for a whole answer
//! before the header filters when it must translate one
//! ([`crate::BufferUpstreamResponse`]), and counts tokens from the
//! provider's usage fields for the log and metrics
//! ([`crate::ai::Analytics`]).

mod schema;

pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "ai-proxy",
    priority: 770,
    schema: schema::schema,
    build: |config, scope| Ok(std::sync::Arc::new(AiProxy::from_config(config, scope.plugin)?)),
};

use std::io::Read;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use serde_json::{Map, Value};

use crate::ai::config::{LlmConfig, ParamLocation, Provider, RouteType};
use crate::ai::providers::{self, StreamTranslator};
use crate::ai::request::{self, refusal, Streaming};
use crate::ai::stream::StreamState;
use crate::ai::{AiRequest, Analytics};
use crate::config::ConfigReader;
use crate::context::{BodyChunk, RequestCtx, ResponseCtx, ResponseSource, SharedStore};
use crate::phase::{BufferUpstreamResponse, Flow, Plugin, ServiceResponseBody, StreamResponse, UpstreamTarget};
use crate::PluginError;

const MODEL_HEADER: HeaderName = HeaderName::from_static("x-kong-llm-model");

#[derive(Debug)]
pub struct AiProxy {
    llm: LlmConfig,
    streaming: Streaming,
    max_body: usize,
    model_name_header: bool,
    plugin_id: Option<uuid::Uuid>,
}

impl AiProxy {
    pub fn from_config(config: &Map<String, Value>, plugin_id: Option<uuid::Uuid>) -> Result<AiProxy, PluginError> {
        let c = ConfigReader::new(config);
        let llm = LlmConfig::read(&c)?;
        providers::supported(&llm).map_err(|why| PluginError::invalid("model.provider", why))?;
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
        Ok(AiProxy {
            llm,
            streaming,
            max_body: usize::try_from(c.integer("max_request_body_size", 8 * 1024)?).unwrap_or(usize::MAX),
            model_name_header: c.bool("model_name_header", true)?,
            plugin_id,
        })
    }

    /// The request readied for the provider, or Kong's refusal.
    fn prepare(&self, ctx: &mut RequestCtx<'_>) -> Result<(), crate::PluginResponse> {
        let bad = |message: &str| refusal(400, message);
        let config = request::resolved_config(&self.llm, ctx).map_err(|e| bad(&e))?;
        let body = ctx.body.take();
        if body.as_ref().is_some_and(|b| b.len() > self.max_body) {
            return Err(bad(&format!(
                "request body is larger than max_request_body_size ({} bytes)",
                self.max_body
            )));
        }
        let accepted = request::accept(body.as_deref(), config.model_name.clone(), config.route_type, self.streaming)
            .map_err(|e| bad(&e))?;
        let include_usage = accepted
            .body
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            == Some(&Value::Bool(true));
        let model = accepted.model.clone();
        let mut analytics = Analytics::new(config.provider.name(), model.clone());
        analytics.plugin_id = self.plugin_id;
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
        // The body for the provider (a `preserve` body goes as it came).
        let mut hide_usage = false;
        let outgoing = if config.route_type == RouteType::Preserve {
            body.unwrap_or_default()
        } else {
            let mut fields = accepted.body;
            let (translated, hide) = providers::to_format(&mut fields, &config, &model).map_err(|e| bad(&e))?;
            hide_usage = hide;
            let mut translated = translated.unwrap_or(Value::Object(fields));
            if let (Some((name, value, ParamLocation::Body)), Some(object)) =
                (&config.auth.param, translated.as_object_mut())
            {
                if !object.contains_key(name) || !config.auth.allow_override {
                    object.insert(name.clone(), Value::String(value.clone()));
                }
            }
            ctx.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            Bytes::from(translated.to_string())
        };
        if config.log_payloads {
            analytics.request_payload = Some(String::from_utf8_lossy(&outgoing).into_owned());
        }
        ctx.body = Some(outgoing);
        self.route(ctx, &config).map_err(|e| {
            tracing::error!(plugin = "ai-proxy", error = %e, "failed to configure the request for the AI service");
            crate::PluginResponse::message(500, crate::kong_error_message(500))
        })?;
        let stream = accepted.stream.then(|| {
            let translator = StreamTranslator::new(&config, include_usage, hide_usage);
            StreamState::new(translator, config.route_type == RouteType::Preserve)
        });
        match stream.is_some() {
            true => ctx.shared.insert(StreamResponse),
            false => ctx.shared.insert(BufferUpstreamResponse),
        }
        ctx.shared.insert(AiRequest { analytics, stream });
        Ok(())
    }

    /// The provider as the request's target: address, path, query, auth
    /// and the provider's own headers.
    fn route(&self, ctx: &mut RequestCtx<'_>, config: &LlmConfig) -> Result<(), String> {
        let destination = providers::destination(config, ctx.path())?;
        let mut query: Vec<(String, String)> = url::form_urlencoded::parse(ctx.query().as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let has = |query: &[(String, String)], name: &str| query.iter().any(|(k, _)| k == name);
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
            if !ctx.headers.contains_key(name) || !auth.allow_override {
                ctx.headers.insert(name.clone(), value.clone());
            }
        }
        if let (Provider::Anthropic, Some(version)) = (config.provider, &config.options.anthropic_version) {
            let version = HeaderValue::try_from(version.as_str()).map_err(|e| format!("anthropic_version: {e}"))?;
            ctx.headers.insert(HeaderName::from_static("anthropic-version"), version);
        }
        // The answer is read here: no compression to undo.
        ctx.headers
            .insert(header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        let query = match query.is_empty() {
            true => String::new(),
            false => url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs(query.iter())
                .finish(),
        };
        ctx.set_path_and_query(&destination.path, &query)
            .map_err(|e| format!("path {}: {e}", destination.path))?;
        ctx.exact_path = true;
        ctx.shared.insert(UpstreamTarget {
            host: destination.host,
            port: destination.port,
            tls: destination.tls,
        });
        Ok(())
    }

    fn model_header(&self, analytics: &Analytics) -> Option<HeaderValue> {
        let model = match analytics.request_model.is_empty() {
            true => analytics.response_model.as_deref()?,
            false => &analytics.request_model,
        };
        HeaderValue::try_from(format!("{}/{}", self.llm.provider.name(), model)).ok()
    }
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
        let analytics = &mut state.analytics;
        let model_header = self.model_header(analytics);
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
                let answer = match providers::from_format(&self.llm, &body, analytics) {
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
        if streams && self.llm.route_type != RouteType::Preserve {
            ctx.headers
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        }
        if matches!(
            self.llm.provider,
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
