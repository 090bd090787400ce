//! `aws-lambda`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::{json, Map, Value};
use strait_core::schema::field::Field;
use strait_core::schema::{formats, PluginSchema};

fn proxy_url(value: &str) -> Result<(), String> {
    crate::config_fields::url(value)?;
    match value.to_ascii_lowercase().starts_with("http://") {
        true => Ok(()),
        false => Err("proxy_url scheme must be http".into()),
    }
}

pub(super) fn schema() -> PluginSchema {
    let flag = |default: bool| Field::boolean().default(json!(default));
    PluginSchema::new(vec![
        ("timeout", Field::number().required().default(json!(60000))),
        ("keepalive", Field::number().required().default(json!(60000))),
        ("aws_key", Field::string().referenceable()),
        ("aws_secret", Field::string().referenceable()),
        ("aws_assume_role_arn", Field::string().referenceable()),
        ("aws_role_session_name", Field::string().default(json!("kong"))),
        ("aws_sts_endpoint_url", Field::string().check(crate::config_fields::url)),
        ("aws_region", Field::string().check(formats::host)),
        ("function_name", Field::string()),
        ("qualifier", Field::string()),
        (
            "invocation_type",
            Field::string()
                .required()
                .default(json!("RequestResponse"))
                .one_of(&["RequestResponse", "Event", "DryRun"]),
        ),
        (
            "log_type",
            Field::string().required().default(json!("Tail")).one_of(&["Tail", "None"]),
        ),
        ("host", Field::string().check(formats::host)),
        ("port", Field::integer().default(json!(443)).between(0, 65535)),
        ("disable_https", flag(false)),
        ("unhandled_status", Field::integer().between(100, 999)),
        ("forward_request_method", flag(false)),
        ("forward_request_uri", flag(false)),
        ("forward_request_headers", flag(false)),
        ("forward_request_body", flag(false)),
        ("is_proxy_integration", flag(false)),
        ("awsgateway_compatible", flag(false)),
        ("proxy_url", Field::string().check(proxy_url)),
        ("skip_large_bodies", flag(true)),
        ("base64_encode_body", flag(true)),
        (
            "aws_imds_protocol_version",
            Field::string().required().default(json!("v1")).one_of(&["v1", "v2"]),
        ),
        (
            "empty_arrays_mode",
            Field::string()
                .required()
                .default(json!("legacy"))
                .one_of(&["legacy", "correct"]),
        ),
    ])
    .check(aws_lambda_check)
}

/// Kong's `mutually_required` check of the key pair.
fn aws_lambda_check(config: &Map<String, Value>) -> Result<(), String> {
    let set = |field: &str| config.get(field).is_some_and(|v| !v.is_null());
    if set("aws_key") != set("aws_secret") {
        return Err("all or none of these fields must be set: 'config.aws_key', 'config.aws_secret'".into());
    }
    Ok(())
}
