//! `request-termination` (Kong priority 2): answer with a fixed status and
//! body instead of proxying, optionally only when a `trigger` header or
//! query argument is present, or echoing the request back (`echo`).

mod schema;

/// `request-termination` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "request-termination",
    priority: 2,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(RequestTermination::from_config(config)?)),
};

use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::config::ConfigReader;
use crate::context::RequestCtx;
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::PluginError;

#[derive(Debug)]
pub struct RequestTermination {
    status: u16,
    message: Option<String>,
    response: PluginResponse,
    echo: bool,
    trigger: Option<String>,
}

/// Kong's `DEFAULT_RESPONSE` messages; other statuses get no body.
fn default_message(status: u16) -> Option<&'static str> {
    Some(match status {
        401 => "Unauthorized",
        404 => "Not found",
        405 => "Method not allowed",
        500 => "An unexpected error occurred",
        502 => "Bad Gateway",
        503 => "Service unavailable",
        _ => return None,
    })
}

const JSON: &str = "application/json; charset=utf-8";

impl RequestTermination {
    pub fn from_config(config: &Map<String, Value>) -> Result<RequestTermination, PluginError> {
        let c = ConfigReader::new(config);
        let status = c.integer("status_code", 503)?;
        if !(100..=599).contains(&status) {
            return Err(PluginError::invalid(
                "status_code",
                "value should be between 100 and 599",
            ));
        }
        let status = status as u16;
        let message = c.string("message")?;
        let body = c.string("body")?;
        let content_type = c.string("content_type")?;
        if message.is_some() && body.is_some() {
            return Err(PluginError::invalid(
                "message",
                "message cannot be used with content_type or body",
            ));
        }
        let response = match body {
            Some(body) => PluginResponse {
                status,
                headers: vec![("content-type".into(), content_type.unwrap_or_else(|| JSON.into()))],
                body: Bytes::from(body),
            },
            None => match message.as_deref().or(default_message(status)) {
                Some(message) => PluginResponse::message(status, message),
                None => PluginResponse {
                    status,
                    headers: Vec::new(),
                    body: Bytes::new(),
                },
            },
        };
        Ok(RequestTermination {
            status,
            message,
            response,
            echo: c.bool("echo", false)?,
            trigger: c.string("trigger")?.map(|t| t.to_ascii_lowercase()),
        })
    }

    fn echo_body(&self, ctx: &RequestCtx<'_>) -> Value {
        let headers = ctx.headers_json();
        let mut query = Map::new();
        for (key, value) in crate::form::pairs(ctx.query()) {
            query.insert(key.into_owned(), Value::String(value.into_owned()));
        }
        let raw_body = ctx.body.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
        let kind = crate::body::kind_of(ctx.header("content-type"));
        let body = match ctx.body.as_deref().and_then(|b| crate::body::parse(kind, b)) {
            Some(crate::body::ParsedBody::Json(map)) => Value::Object(map),
            Some(crate::body::ParsedBody::Form(pairs)) => {
                Value::Object(pairs.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
            }
            None => Value::Null,
        };
        let captures: Map<String, Value> = ctx
            .captures
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        json!({
            "message": self.message.as_deref().or(default_message(self.status)),
            "kong": { "worker_pid": std::process::id() },
            "request": {
                "scheme": ctx.protocol.name(),
                "host": ctx.host,
                "headers": headers,
                "query": query,
                "body": body,
                "raw_body": raw_body,
                "method": ctx.method.as_str(),
                "path": ctx.path(),
                "uri_captures": { "named": captures },
            },
            "matched_route": ctx.route_id.map(|id| json!({ "id": id, "name": ctx.route_name })),
            "matched_service": ctx.service_id.map(|id| json!({ "id": id })),
        })
    }
}

impl Plugin for RequestTermination {
    fn name(&self) -> &'static str {
        "request-termination"
    }

    fn priority(&self) -> i32 {
        2
    }

    fn reads_request_body(&self) -> bool {
        self.echo
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        if let Some(trigger) = &self.trigger {
            let in_headers = ctx.headers.contains_key(trigger.as_str());
            let in_query = crate::form::pairs(ctx.query()).any(|(k, _)| k.eq_ignore_ascii_case(trigger));
            if !in_headers && !in_query {
                return Flow::Continue;
            }
        }
        if self.echo {
            return Flow::Respond(PluginResponse {
                status: self.status,
                headers: vec![("content-type".into(), JSON.into())],
                body: Bytes::from(self.echo_body(ctx).to_string()),
            });
        }
        Flow::Respond(self.response.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(config: Value) -> Result<RequestTermination, PluginError> {
        RequestTermination::from_config(config.as_object().expect("object"))
    }

    #[test]
    fn message_becomes_kong_json_body() {
        let plugin = build(json!({"status_code": 418, "message": "teapot"})).expect("valid");
        assert_eq!(plugin.response.status, 418);
        assert_eq!(plugin.response.body, Bytes::from(r#"{"message":"teapot"}"#));
    }

    #[test]
    fn body_with_content_type_and_kong_defaults() {
        let plugin = build(json!({"status_code": 200, "body": "hi", "content_type": "text/plain"})).expect("valid");
        assert_eq!(plugin.response.headers[0].1, "text/plain");
        let default = build(json!({})).expect("valid");
        assert_eq!(default.response.status, 503);
        assert_eq!(
            default.response.body,
            Bytes::from(r#"{"message":"Service unavailable"}"#)
        );
        let silent = build(json!({"status_code": 204})).expect("valid");
        assert!(silent.response.body.is_empty(), "no default message for 204");
    }

    #[test]
    fn bad_config_is_rejected_with_field() {
        assert_eq!(
            build(json!({"status_code": 700})).err().map(|e| e.to_string()),
            Some("config.status_code: value should be between 100 and 599".to_string())
        );
        assert!(build(json!({"message": "a", "body": "b"})).is_err());
    }
}
