//! What aws-lambda answers with: Lambda's status, headers and payload, or
//! with `is_proxy_integration` the API Gateway response the function built
//! (`statusCode`, `headers`, `multiValueHeaders`, `body`, `isBase64Encoded`).

use base64::Engine as _;
use serde_json::{json, Value};
use strait_runtime::http_client::Response;

use super::AwsLambda;
use crate::phase::{Flow, PluginResponse};

/// Fields of Lambda's answer that belong to its connection or its length.
const DROPPED: [&str; 6] = [
    "content-length",
    "connection",
    "keep-alive",
    "proxy-connection",
    "upgrade",
    "transfer-encoding",
];

fn bad_gateway(error: &str) -> Flow {
    let body = json!({
        "message": "Bad Gateway",
        "error": format!("could not JSON decode Lambda function response: {error}"),
    });
    Flow::Respond(PluginResponse {
        status: 502,
        headers: vec![("content-type".into(), "application/json; charset=utf-8".into())],
        body: bytes::Bytes::from(body.to_string()),
    })
}

/// A function's own API Gateway response: status, headers, body.
type OwnResponse = (u16, Vec<(String, String)>, Vec<u8>);

/// The function's own response, checked as Kong checks it.
fn proxy_response(body: &[u8]) -> Result<OwnResponse, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let status = match &value["statusCode"] {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
    .filter(|s| (100..=599).contains(s))
    .ok_or("statusCode validation failed")? as u16;
    let headers = match &value["headers"] {
        Value::Null => serde_json::Map::new(),
        Value::Object(map) => map.clone(),
        _ => return Err("headers must be a table".into()),
    };
    let body = match &value["body"] {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        _ => return Err("body must be a string".into()),
    };
    let encoded = match &value["isBase64Encoded"] {
        Value::Null => false,
        Value::Bool(b) => *b,
        _ => return Err("isBase64Encoded must be a boolean".into()),
    };
    let body = match encoded {
        true => base64::engine::general_purpose::STANDARD
            .decode(body.as_bytes())
            .unwrap_or_default(),
        false => body.into_bytes(),
    };
    let mut out: Vec<(String, String)> = Vec::new();
    let mut put = |name: &str, value: &Value| match value {
        Value::Array(values) => {
            out.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            for v in values {
                out.push((name.to_string(), text(v)));
            }
        }
        other => {
            out.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            out.push((name.to_string(), text(other)));
        }
    };
    for (name, value) in &headers {
        put(name, value);
    }
    if let Value::Object(multi) = &value["multiValueHeaders"] {
        for (name, values) in multi {
            put(name, values);
        }
    }
    Ok((status, out, body))
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(super) fn answer(plugin: &AwsLambda, answer: Response) -> Flow {
    if answer.status.as_u16() >= 400 {
        let message = serde_json::from_slice::<Value>(&answer.body)
            .ok()
            .and_then(|v| v["Message"].as_str().or(v["message"].as_str()).map(str::to_string))
            .unwrap_or_default();
        tracing::error!(status = answer.status.as_u16(), %message, "aws-lambda: Lambda refused the invocation");
        return Flow::Respond(PluginResponse::message(500, "An unexpected error occurred"));
    }
    let mut headers: Vec<(String, String)> = answer
        .headers
        .iter()
        .filter(|(name, _)| !DROPPED.contains(&name.as_str()))
        .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
        .collect();
    let unhandled = answer
        .headers
        .get("x-amz-function-error")
        .is_some_and(|v| v.as_bytes() == b"Unhandled");
    let (status, body) = match plugin.is_proxy_integration {
        true => match proxy_response(&answer.body) {
            Ok((status, own, body)) => {
                for (name, value) in own {
                    headers.retain(|(n, _)| !n.eq_ignore_ascii_case(&name) || n == &name);
                    headers.push((name, value));
                }
                (Some(status), body)
            }
            Err(error) => {
                tracing::error!(%error, "aws-lambda: the function's response is not an API Gateway response");
                return bad_gateway(&error);
            }
        },
        false => (None, answer.body.to_vec()),
    };
    let status = status.unwrap_or_else(|| match (plugin.unhandled_status, unhandled) {
        (Some(status), true) => status,
        _ => answer.status.as_u16(),
    });
    Flow::Respond(PluginResponse {
        status,
        headers,
        body: bytes::Bytes::from(body),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_responses_are_checked_and_decoded() {
        let (status, headers, body) = proxy_response(
            br#"{"statusCode": "201", "headers": {"x-a": "1"}, "multiValueHeaders": {"x-b": ["2", "3"]},
                "body": "aGk=", "isBase64Encoded": true}"#,
        )
        .expect("valid");
        assert_eq!(status, 201);
        assert_eq!(body, b"hi");
        assert_eq!(headers, vec![("x-a".into(), "1".into()), ("x-b".into(), "2".into()), ("x-b".into(), "3".into())]);
        assert_eq!(proxy_response(br#"{"statusCode": 700}"#).err().as_deref(), Some("statusCode validation failed"));
        assert_eq!(proxy_response(br#"{"statusCode": 200, "body": 5}"#).err().as_deref(), Some("body must be a string"));
        assert!(proxy_response(b"not json").is_err());
    }
}
