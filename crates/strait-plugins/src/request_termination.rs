//! `request-termination`: answer with a fixed status and body, never proxy.
//! Kong priority 2; config `status_code` (default 503), `message`, `body`,
//! `content_type`.

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::{Flow, Plugin, PluginError, PluginResponse, RequestContext};

#[derive(Debug)]
pub struct RequestTermination {
    response: PluginResponse,
}

fn invalid(field: &str, message: &str) -> PluginError {
    PluginError::InvalidConfig {
        field: field.to_string(),
        message: message.to_string(),
    }
}

fn optional_string(config: &Map<String, Value>, field: &str) -> Result<Option<String>, PluginError> {
    match config.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(invalid(field, "expected a string")),
    }
}

/// Kong's default message for a status when neither `message` nor `body` is set.
fn default_message(status: u16) -> String {
    http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Request terminated")
        .to_string()
}

impl RequestTermination {
    pub fn from_config(config: &Map<String, Value>) -> Result<RequestTermination, PluginError> {
        let status = match config.get("status_code") {
            None | Some(Value::Null) => 503,
            Some(v) => v
                .as_u64()
                .filter(|s| (100..=599).contains(s))
                .ok_or_else(|| invalid("status_code", "value should be between 100 and 599"))?,
        } as u16;
        let message = optional_string(config, "message")?;
        let body = optional_string(config, "body")?;
        let content_type = optional_string(config, "content_type")?;
        if message.is_some() && body.is_some() {
            return Err(invalid("message", "message cannot be used with content_type or body"));
        }
        let (content_type, body) = match body {
            Some(body) => (
                content_type.unwrap_or_else(|| "application/json; charset=utf-8".to_string()),
                body,
            ),
            None => {
                let message = message.unwrap_or_else(|| default_message(status));
                let json = serde_json::json!({ "message": message }).to_string();
                ("application/json; charset=utf-8".to_string(), json)
            }
        };
        Ok(RequestTermination {
            response: PluginResponse {
                status,
                headers: vec![("content-type".to_string(), content_type)],
                body: Bytes::from(body),
            },
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

    fn access(&self, _ctx: &RequestContext<'_>) -> Flow {
        Flow::Respond(self.response.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn body_with_content_type_and_defaults() {
        let plugin = build(json!({"status_code": 200, "body": "hi", "content_type": "text/plain"})).expect("valid");
        assert_eq!(plugin.response.headers[0].1, "text/plain");
        let default = build(json!({})).expect("valid");
        assert_eq!(default.response.status, 503);
        assert_eq!(
            default.response.body,
            Bytes::from(r#"{"message":"Service Unavailable"}"#)
        );
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
