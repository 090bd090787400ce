//! The registry: which bundled plugins this build runs, their Kong
//! priorities, and building an instance from a validated config.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::phase::Plugin;
pub use crate::traffic::rate_limiting::PluginScope;
use crate::{auth, grpc, observability, security, traffic, transform, PluginError};

/// Plugins this build can run.
pub const AVAILABLE: &[&str] = &[
    "acl",
    "basic-auth",
    "bot-detection",
    "correlation-id",
    "cors",
    "file-log",
    "grpc-gateway",
    "grpc-web",
    "hmac-auth",
    "http-log",
    "ip-restriction",
    "jwt",
    "key-auth",
    "mtls-auth",
    "oauth2",
    "opentelemetry",
    "prometheus",
    "proxy-cache",
    "rate-limiting",
    "request-size-limiting",
    "request-termination",
    "request-transformer",
    "response-ratelimiting",
    "response-transformer",
    "syslog",
    "tcp-log",
    "udp-log",
];

/// Kong's priority of a bundled plugin (higher runs first).
pub fn priority_of(name: &str) -> Option<i32> {
    Some(match name {
        "pre-function" => 1_000_000,
        "correlation-id" => 100_001,
        "zipkin" => 100_000,
        "bot-detection" => 2500,
        "cors" => 2000,
        "session" => 1900,
        "acme" => 1705,
        "jwt" => 1450,
        "mtls-auth" => 1600,
        "oauth2" => 1400,
        "key-auth" => 1250,
        "ldap-auth" => 1200,
        "basic-auth" => 1100,
        "hmac-auth" => 1030,
        "grpc-gateway" => 998,
        "ip-restriction" => 990,
        "request-size-limiting" => 951,
        "acl" => 950,
        "rate-limiting" => 910,
        "response-ratelimiting" => 900,
        "request-transformer" => 801,
        "response-transformer" => 800,
        "redirect" => 779,
        "standard-webhooks" => 760,
        "aws-lambda" => 750,
        "azure-functions" => 749,
        "proxy-cache" => 100,
        "opentelemetry" => 14,
        "prometheus" => 13,
        "http-log" => 12,
        "statsd" => 11,
        "datadog" => 10,
        "file-log" => 9,
        "udp-log" => 8,
        "tcp-log" => 7,
        "loggly" => 6,
        "syslog" => 4,
        "grpc-web" => 3,
        "request-termination" => 2,
        "post-function" => -1000,
        _ => return None,
    })
}

/// Build an instance of plugin `name` from its (defaults-filled) config,
/// scoped to no route or service.
pub fn build_plugin(name: &str, config: &Map<String, Value>) -> Result<Arc<dyn Plugin>, PluginError> {
    build_scoped_plugin(name, config, PluginScope::default())
}

/// [`build_plugin`] for a plugin entity scoped to `scope` (the route and
/// service it is configured on), which keys state that outlives instances.
pub fn build_scoped_plugin(
    name: &str,
    config: &Map<String, Value>,
    scope: PluginScope,
) -> Result<Arc<dyn Plugin>, PluginError> {
    // Counters are keyed by route and service as in Kong, never by the
    // plugin entity's id: a config re-posted with new ids keeps them.
    let counters = PluginScope { plugin: None, ..scope };
    Ok(match name {
        "rate-limiting" => Arc::new(traffic::rate_limiting::RateLimiting::from_config(config, counters)?),
        "response-ratelimiting" => Arc::new(traffic::response_ratelimiting::ResponseRateLimiting::from_config(
            config, counters,
        )?),
        "acl" => Arc::new(auth::acl::Acl::from_config(config)?),
        "opentelemetry" => Arc::new(observability::opentelemetry::OpenTelemetry::from_config(config)?),
        "prometheus" => Arc::new(observability::prometheus::Prometheus::from_config(config)?),
        "basic-auth" => Arc::new(auth::basic_auth::BasicAuth::from_config(config)?),
        "bot-detection" => Arc::new(security::bot_detection::BotDetection::from_config(config)?),
        "correlation-id" => Arc::new(transform::correlation_id::CorrelationId::from_config(config)?),
        "cors" => Arc::new(security::cors::Cors::from_config(config)?),
        "file-log" => Arc::new(observability::file_log::FileLog::from_config(config)?),
        "http-log" => Arc::new(observability::http_log::HttpLog::from_config(config)?),
        "syslog" => Arc::new(observability::syslog::Syslog::from_config(config)?),
        "tcp-log" => Arc::new(observability::tcp_log::TcpLog::from_config(config)?),
        "udp-log" => Arc::new(observability::udp_log::UdpLog::from_config(config)?),
        "grpc-gateway" => Arc::new(grpc::gateway::GrpcGateway::from_config(config)?),
        "grpc-web" => Arc::new(grpc::web::GrpcWeb::from_config(config)?),
        "hmac-auth" => Arc::new(auth::hmac_auth::HmacAuth::from_config(config)?),
        "ip-restriction" => Arc::new(security::ip_restriction::IpRestriction::from_config(config)?),
        "jwt" => Arc::new(auth::jwt::Jwt::from_config(config)?),
        "key-auth" => Arc::new(auth::key_auth::KeyAuth::from_config(config)?),
        "mtls-auth" => Arc::new(auth::mtls_auth::MtlsAuth::from_config(config)?),
        "oauth2" => Arc::new(auth::oauth2::OAuth2::from_config(config, scope.plugin)?),
        "proxy-cache" => Arc::new(traffic::proxy_cache::ProxyCache::from_config(config)?),
        "request-size-limiting" => Arc::new(security::request_size_limiting::RequestSizeLimiting::from_config(
            config,
        )?),
        "request-termination" => Arc::new(transform::request_termination::RequestTermination::from_config(config)?),
        "request-transformer" => Arc::new(transform::request_transformer::RequestTransformer::from_config(config)?),
        "response-transformer" => Arc::new(transform::response_transformer::ResponseTransformer::from_config(
            config,
        )?),
        other => return Err(PluginError::NotImplemented(other.to_string())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// strait-core validates configs by its schema list; every plugin this
    /// crate runs must have a schema there, and nothing else may.
    #[test]
    fn available_plugins_are_the_plugins_with_a_schema() {
        assert_eq!(AVAILABLE, strait_core::schema::PLUGINS_WITH_SCHEMA);
    }

    #[test]
    fn every_available_plugin_has_a_priority_matching_its_instance() {
        for name in AVAILABLE {
            let config = Map::new();
            let built = build_plugin(name, &config);
            if let Ok(plugin) = built {
                assert_eq!(Some(plugin.priority()), priority_of(name), "{name}");
                assert_eq!(plugin.name(), *name);
            }
        }
    }
}
