//! Kong 3.9's `llm` configuration record (`kong/llm/schemas`), shared by
//! ai-proxy and the AI transformer plugins: the schema's fields and entity
//! checks, and the record read once into [`LlmConfig`] when a plugin is
//! built.

use http::{HeaderName, HeaderValue};
use serde_json::{json, Map, Value};
use strait_core::schema::field::Field;

use crate::config::ConfigReader;
use crate::PluginError;

/// The operation a route serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteType {
    Chat,
    Completions,
    /// The client's own provider format, passed through untranslated.
    Preserve,
}

impl RouteType {
    pub fn name(self) -> &'static str {
        match self {
            RouteType::Chat => "llm/v1/chat",
            RouteType::Completions => "llm/v1/completions",
            RouteType::Preserve => "preserve",
        }
    }
}

/// Kong's providers, by their configuration name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    OpenAi,
    Azure,
    Anthropic,
    Cohere,
    Mistral,
    Llama2,
    Gemini,
    Bedrock,
    HuggingFace,
}

pub const PROVIDERS: &[&str] = &[
    "openai",
    "azure",
    "anthropic",
    "cohere",
    "mistral",
    "llama2",
    "gemini",
    "bedrock",
    "huggingface",
];

impl Provider {
    pub fn parse(name: &str) -> Option<Provider> {
        Some(match name {
            "openai" => Provider::OpenAi,
            "azure" => Provider::Azure,
            "anthropic" => Provider::Anthropic,
            "cohere" => Provider::Cohere,
            "mistral" => Provider::Mistral,
            "llama2" => Provider::Llama2,
            "gemini" => Provider::Gemini,
            "bedrock" => Provider::Bedrock,
            "huggingface" => Provider::HuggingFace,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Azure => "azure",
            Provider::Anthropic => "anthropic",
            Provider::Cohere => "cohere",
            Provider::Mistral => "mistral",
            Provider::Llama2 => "llama2",
            Provider::Gemini => "gemini",
            Provider::Bedrock => "bedrock",
            Provider::HuggingFace => "huggingface",
        }
    }
}

/// Where `auth.param_*` goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamLocation {
    Query,
    Body,
}

/// `auth`: a header or a parameter the provider authenticates with.
#[derive(Clone, Default)]
pub struct Auth {
    pub header: Option<(HeaderName, HeaderValue)>,
    pub param: Option<(String, String, ParamLocation)>,
    /// The client's own header or parameter, when it sends one, is kept.
    pub allow_override: bool,
    pub aws_access_key_id: Option<String>,
    pub aws_secret_access_key: Option<String>,
    pub gcp_use_service_account: bool,
}

impl std::fmt::Debug for Auth {
    /// Names, never the keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("header", &self.header.as_ref().map(|(name, _)| name))
            .field("param", &self.param.as_ref().map(|(name, _, at)| (name, at)))
            .field("allow_override", &self.allow_override)
            .field("aws_access_key_id", &self.aws_access_key_id)
            .finish_non_exhaustive()
    }
}

/// `model.options`.
#[derive(Debug, Clone, Default)]
pub struct ModelOptions {
    pub max_tokens: Option<i64>,
    pub input_cost: Option<f64>,
    pub output_cost: Option<f64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub anthropic_version: Option<String>,
    pub azure_instance: Option<String>,
    pub azure_api_version: Option<String>,
    pub azure_deployment_id: Option<String>,
    pub llama2_format: Option<String>,
    pub mistral_format: Option<String>,
    pub upstream_url: Option<url::Url>,
    pub upstream_path: Option<String>,
    pub bedrock_region: Option<String>,
    pub gemini_api_endpoint: Option<String>,
    pub gemini_project_id: Option<String>,
    pub gemini_location_id: Option<String>,
    pub huggingface_use_cache: Option<bool>,
    pub huggingface_wait_for_model: Option<bool>,
}

/// The `llm` record, read once.
#[derive(Debug, Clone)]
pub struct LlmConfig {
    pub route_type: RouteType,
    pub auth: Auth,
    pub provider: Provider,
    /// `model.name`; may hold `$(headers.x)`-style references resolved per
    /// request (model.rs).
    pub model_name: Option<String>,
    pub options: ModelOptions,
    pub log_statistics: bool,
    pub log_payloads: bool,
    /// Some setting holds a `$(source.key)` reference (found once, here,
    /// not per request).
    pub templated: bool,
}

impl LlmConfig {
    pub(crate) fn read(config: &ConfigReader<'_>) -> Result<LlmConfig, PluginError> {
        let route_type = match config.string("route_type")?.as_deref() {
            Some("llm/v1/chat") => RouteType::Chat,
            Some("llm/v1/completions") => RouteType::Completions,
            Some("preserve") => RouteType::Preserve,
            other => {
                return Err(PluginError::invalid(
                    "route_type",
                    format!("unknown route type {other:?}"),
                ))
            }
        };
        let auth_record = config.record("auth")?;
        let header = match (auth_record.string("header_name")?, auth_record.string("header_value")?) {
            (Some(name), Some(value)) => Some((
                HeaderName::try_from(name.as_str())
                    .map_err(|_| PluginError::invalid("auth.header_name", "not a valid header name"))?,
                HeaderValue::try_from(value.as_str())
                    .map_err(|_| PluginError::invalid("auth.header_value", "not a valid header value"))?,
            )),
            _ => None,
        };
        let param = match (
            auth_record.string("param_name")?,
            auth_record.string("param_value")?,
            auth_record.string("param_location")?.as_deref(),
        ) {
            (Some(name), Some(value), Some(location)) => Some((
                name,
                value,
                match location {
                    "body" => ParamLocation::Body,
                    _ => ParamLocation::Query,
                },
            )),
            _ => None,
        };
        let auth = Auth {
            header,
            param,
            allow_override: auth_record.bool("allow_override", false)?,
            aws_access_key_id: auth_record.string("aws_access_key_id")?,
            aws_secret_access_key: auth_record.string("aws_secret_access_key")?,
            gcp_use_service_account: auth_record.bool("gcp_use_service_account", false)?,
        };
        let model = config.record("model")?;
        let provider_name = model.string("provider")?.unwrap_or_default();
        let provider = Provider::parse(&provider_name)
            .ok_or_else(|| PluginError::invalid("model.provider", format!("unknown provider {provider_name:?}")))?;
        let o = model.record("options")?;
        let upstream_url = match o.string("upstream_url")? {
            None => None,
            Some(text) => Some(
                url::Url::parse(&text)
                    .map_err(|e| PluginError::invalid("model.options.upstream_url", e.to_string()))?,
            ),
        };
        let gemini = o.record("gemini")?;
        let huggingface = o.record("huggingface")?;
        let options = ModelOptions {
            max_tokens: o.integer_opt("max_tokens")?,
            input_cost: o.number_opt("input_cost")?,
            output_cost: o.number_opt("output_cost")?,
            temperature: o.number_opt("temperature")?,
            top_p: o.number_opt("top_p")?,
            top_k: o.integer_opt("top_k")?,
            anthropic_version: o.string("anthropic_version")?,
            azure_instance: o.string("azure_instance")?,
            azure_api_version: o.string("azure_api_version")?,
            azure_deployment_id: o.string("azure_deployment_id")?,
            llama2_format: o.string("llama2_format")?,
            mistral_format: o.string("mistral_format")?,
            upstream_url,
            upstream_path: o.string("upstream_path")?,
            bedrock_region: o.record("bedrock")?.string("aws_region")?,
            gemini_api_endpoint: gemini.string("api_endpoint")?,
            gemini_project_id: gemini.string("project_id")?,
            gemini_location_id: gemini.string("location_id")?,
            huggingface_use_cache: huggingface.bool_opt("use_cache")?,
            huggingface_wait_for_model: huggingface.bool_opt("wait_for_model")?,
        };
        let logging = config.record("logging")?;
        let model_name = model.string("name")?;
        let o = &options;
        let templated = [
            model_name.as_deref(),
            o.anthropic_version.as_deref(),
            o.azure_instance.as_deref(),
            o.azure_api_version.as_deref(),
            o.azure_deployment_id.as_deref(),
            o.upstream_path.as_deref(),
        ]
        .iter()
        .any(|v| v.is_some_and(|v| v.contains("$(")));
        Ok(LlmConfig {
            route_type,
            auth,
            provider,
            model_name,
            options,
            log_statistics: logging.bool("log_statistics", false)?,
            log_payloads: logging.bool("log_payloads", false)?,
            templated,
        })
    }
}

/// The `llm` record's `auth` record.
pub fn auth_field() -> Field {
    let string = Field::string;
    Field::record(vec![
        ("header_name", string().referenceable()),
        ("header_value", string().referenceable()),
        ("param_name", string().referenceable()),
        ("param_value", string().referenceable()),
        ("param_location", string().one_of(&["query", "body"])),
        ("gcp_use_service_account", Field::boolean().default(json!(false))),
        ("gcp_service_account_json", string().referenceable()),
        ("aws_access_key_id", string().referenceable()),
        ("aws_secret_access_key", string().referenceable()),
        ("allow_override", Field::boolean().default(json!(false))),
    ])
}

/// The `llm` record's `model` record (Kong 3.9.1's: `max_tokens` has no
/// default).
pub fn model_field() -> Field {
    let string = Field::string;
    let options = Field::record(vec![
        ("max_tokens", Field::integer()),
        ("input_cost", Field::number().gt(0)),
        ("output_cost", Field::number().gt(0)),
        ("temperature", Field::number().between(0, 5)),
        ("top_p", Field::number().between(0, 1)),
        ("top_k", Field::integer().between(0, 500)),
        ("anthropic_version", string()),
        ("azure_instance", string()),
        ("azure_api_version", string().default(json!("2023-05-15"))),
        ("azure_deployment_id", string()),
        ("llama2_format", string().one_of(&["raw", "openai", "ollama"])),
        ("mistral_format", string().one_of(&["openai", "ollama"])),
        ("upstream_url", string().check(crate::config_fields::url)),
        ("upstream_path", string()),
        (
            "gemini",
            Field::record(vec![
                ("api_endpoint", string()),
                ("project_id", string()),
                ("location_id", string()),
            ]),
        ),
        ("bedrock", Field::record(vec![("aws_region", string())])),
        (
            "huggingface",
            Field::record(vec![
                ("use_cache", Field::boolean()),
                ("wait_for_model", Field::boolean()),
            ]),
        ),
    ]);
    Field::record(vec![
        ("provider", string().required().one_of(PROVIDERS)),
        ("name", string()),
        ("options", options),
    ])
    .required()
}

/// The `llm` record's fields, as Kong 3.9 declares them.
pub fn llm_fields() -> Vec<(&'static str, Field)> {
    vec![
        (
            "route_type",
            Field::string()
                .required()
                .one_of(&["llm/v1/chat", "llm/v1/completions", "preserve"]),
        ),
        ("auth", auth_field()),
        ("model", model_field()),
        (
            "logging",
            Field::record(vec![
                ("log_statistics", Field::boolean().required().default(json!(false))),
                ("log_payloads", Field::boolean().required().default(json!(false))),
            ])
            .required()
            .default_record(),
        ),
    ]
}

/// The `llm` record's entity checks, with Kong's messages.
pub fn llm_check(config: &Map<String, Value>) -> Result<(), String> {
    let at = |path: &str| -> Option<&Value> {
        let mut value = config.get(path.split('.').next()?)?;
        for part in path.split('.').skip(1) {
            value = value.get(part)?;
        }
        Some(value).filter(|v| !v.is_null())
    };
    let provider = at("model.provider").and_then(Value::as_str).unwrap_or_default();
    if matches!(provider, "bedrock" | "gemini") && at("auth.allow_override") == Some(&Value::Bool(true)) {
        return Err("bedrock and gemini only support auth.allow_override = false".into());
    }
    for group in [
        &["auth.header_name", "auth.header_value"][..],
        &["auth.param_name", "auth.param_value", "auth.param_location"][..],
    ] {
        let set = group.iter().filter(|path| at(path).is_some()).count();
        if set != 0 && set != group.len() {
            let names: Vec<String> = group.iter().map(|p| format!("'{p}'")).collect();
            return Err(format!("all or none of these fields must be set: {}", names.join(", ")));
        }
    }
    let required: &[(&str, &str, &str)] = &[
        ("llama2", "model.options.llama2_format", "for llama2 provider"),
        ("mistral", "model.options.mistral_format", "for mistral provider"),
        ("anthropic", "model.options.anthropic_version", "for anthropic provider"),
        ("azure", "model.options.azure_instance", "for azure provider"),
        ("azure", "model.options.azure_api_version", "for azure provider"),
        ("azure", "model.options.azure_deployment_id", "for azure provider"),
        (
            "llama2",
            "model.options.upstream_url",
            "for self-hosted providers/models",
        ),
    ];
    for (name, field, why) in required {
        if provider == *name && at(field).is_none() {
            return Err(format!("must set '{field}' {why}"));
        }
    }
    let gemini =
        ["api_endpoint", "project_id", "location_id"].map(|f| at(&format!("model.options.gemini.{f}")).is_some());
    if gemini.iter().any(|s| *s) && !gemini.iter().all(|s| *s) {
        return Err(
            "all or none of these fields must be set: 'model.options.gemini.api_endpoint', \
                    'model.options.gemini.project_id', 'model.options.gemini.location_id'"
                .into(),
        );
    }
    let statistics = at("logging.log_statistics") == Some(&Value::Bool(true));
    let route_type = at("route_type").and_then(Value::as_str).unwrap_or_default();
    if statistics && route_type == "llm/v1/completions" && provider == "anthropic" {
        return Err(format!(
            "{provider} does not support statistics when route_type is {route_type}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(config: Value) -> Result<(), String> {
        llm_check(config.as_object().unwrap())
    }

    #[test]
    fn kong_entity_checks_refuse_with_kongs_messages() {
        let base = json!({"route_type": "llm/v1/chat", "model": {"provider": "openai"}});
        assert_eq!(check(base.clone()), Ok(()));
        let mut half = base.clone();
        half["auth"] = json!({"header_name": "Authorization"});
        assert_eq!(
            check(half),
            Err("all or none of these fields must be set: 'auth.header_name', 'auth.header_value'".into())
        );
        let anthropic = json!({"route_type": "llm/v1/chat", "model": {"provider": "anthropic", "options": {}}});
        assert_eq!(
            check(anthropic),
            Err("must set 'model.options.anthropic_version' for anthropic provider".into())
        );
        let azure = json!({"route_type": "llm/v1/chat", "model": {"provider": "azure",
            "options": {"azure_instance": "i", "azure_api_version": "v"}}});
        assert_eq!(
            check(azure),
            Err("must set 'model.options.azure_deployment_id' for azure provider".into())
        );
        let gemini = json!({"route_type": "llm/v1/chat", "auth": {"allow_override": true},
            "model": {"provider": "gemini"}});
        assert_eq!(
            check(gemini),
            Err("bedrock and gemini only support auth.allow_override = false".into())
        );
        let stats = json!({"route_type": "llm/v1/completions", "logging": {"log_statistics": true},
            "model": {"provider": "anthropic", "options": {"anthropic_version": "2023-06-01"}}});
        assert_eq!(
            check(stats),
            Err("anthropic does not support statistics when route_type is llm/v1/completions".into())
        );
    }
}
