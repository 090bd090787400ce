//! The bundled plugins, one folder each (schema, defaults, factory and
//! implementation together), and the registry that lists them: the one
//! list the schema endpoints, `GET /`'s `available_on_server`, the
//! generated docs and the snapshot compiler all read.
//!
//! Adding a bundled plugin is a folder here with a `PLUGIN` entry and one
//! line in [`registry!`] below (docs/plugins.md, "Writing a plugin").

/// Declares each plugin folder as a module and lists its `PLUGIN` entry in
/// [`BUNDLED`], in the order given (alphabetical by name).
macro_rules! registry {
    ($($plugin:ident),* $(,)?) => {
        $(pub mod $plugin;)*

        /// Every bundled plugin this build runs.
        pub const BUNDLED: &[crate::BundledPlugin] = &[$($plugin::PLUGIN),*];
    };
}

registry! {
    acl,
    acme,
    ai_prompt_decorator,
    ai_prompt_guard,
    ai_prompt_template,
    ai_proxy,
    ai_request_transformer,
    ai_response_transformer,
    aws_lambda,
    azure_functions,
    basic_auth,
    bot_detection,
    correlation_id,
    cors,
    datadog,
    file_log,
    grpc_gateway,
    grpc_web,
    hmac_auth,
    http_log,
    ip_restriction,
    jwt,
    kafka_log,
    kafka_upstream,
    key_auth,
    ldap_auth,
    loggly,
    mtls_auth,
    oauth2,
    opentelemetry,
    prometheus,
    proxy_cache,
    rate_limiting,
    redirect,
    request_size_limiting,
    request_termination,
    request_transformer,
    response_ratelimiting,
    response_transformer,
    session,
    standard_webhooks,
    statsd,
    syslog,
    tcp_log,
    udp_log,
    zipkin,
}
