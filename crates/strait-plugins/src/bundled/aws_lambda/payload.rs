//! What aws-lambda sends a function (Kong's `request-util`): the query and
//! the parsed body merged; the request's parts with `forward_request_*`;
//! or an API Gateway proxy event with `awsgateway_compatible`.

use base64::Engine as _;
use serde_json::{json, Map, Value};

use crate::body::{kind_of, parse, ParsedBody};
use crate::context::RequestCtx;

/// Content types whose body is sent as text even when it cannot be parsed.
const RAW_TYPES: [&str; 5] = [
    "text/plain",
    "text/html",
    "application/xml",
    "text/xml",
    "application/soap+xml",
];

fn body_args(ctx: &RequestCtx<'_>) -> Option<Map<String, Value>> {
    let body = ctx.body.as_deref()?;
    match parse(kind_of(ctx.header("content-type")), body)? {
        ParsedBody::Json(map) => Some(map),
        ParsedBody::Form(pairs) => Some(pairs.into_iter().map(|(k, v)| (k, Value::String(v))).collect()),
    }
}

#[derive(Debug)]
pub(super) struct Forward {
    pub method: bool,
    pub uri: bool,
    pub headers: bool,
    pub body: bool,
    pub base64_encode_body: bool,
}

/// The default payload, or the request's parts.
pub(super) fn payload(ctx: &RequestCtx<'_>, forward: &Forward) -> Value {
    if !(forward.method || forward.uri || forward.headers || forward.body) {
        let mut merged = crate::form::query_object(ctx.query());
        if let Some(args) = body_args(ctx) {
            merged.extend(args);
        }
        return Value::Object(merged);
    }
    let mut out = Map::new();
    if forward.method {
        out.insert("request_method".into(), json!(ctx.method.as_str()));
    }
    if forward.headers {
        out.insert("request_headers".into(), Value::Object(ctx.headers_json()));
    }
    if forward.uri {
        let uri = match ctx.query() {
            "" => ctx.path().to_string(),
            query => format!("{}?{query}", ctx.path()),
        };
        out.insert("request_uri".into(), json!(uri));
        out.insert("request_uri_args".into(), Value::Object(crate::form::query_object(ctx.query())));
    }
    if forward.body {
        let raw = ctx.body.as_deref().unwrap_or_default();
        let content_type = ctx.header("content-type").unwrap_or("");
        let args = body_args(ctx);
        let raw_text = match args.is_none() && !RAW_TYPES.contains(&content_type) && forward.base64_encode_body {
            true => {
                out.insert("request_body_base64".into(), json!(true));
                base64::engine::general_purpose::STANDARD.encode(raw)
            }
            false => String::from_utf8_lossy(raw).into_owned(),
        };
        out.insert("request_body".into(), json!(raw_text));
        out.insert("request_body_args".into(), Value::Object(args.unwrap_or_default()));
    }
    Value::Object(out)
}

/// An API Gateway (REST, version 1.0) proxy event for the request.
pub(super) fn gateway_event(ctx: &RequestCtx<'_>, base64_encode_body: bool, request_id: &str, started_ms: u64) -> Value {
    let headers = ctx.headers_json();
    let single_headers: Map<String, Value> = headers
        .iter()
        .map(|(k, v)| (k.clone(), v.as_array().and_then(|a| a.first()).unwrap_or(v).clone()))
        .collect();
    let multi_headers: Map<String, Value> = headers
        .iter()
        .map(|(k, v)| (k.clone(), v.as_array().map_or_else(|| json!([v]), |a| json!(a))))
        .collect();
    let query = crate::form::query_object(ctx.query());
    let single_query: Map<String, Value> = query
        .iter()
        .map(|(k, v)| (k.clone(), v.as_array().and_then(|a| a.first()).unwrap_or(v).clone()))
        .collect();
    let multi_query: Map<String, Value> = query
        .iter()
        .map(|(k, v)| (k.clone(), v.as_array().map_or_else(|| json!([v]), |a| json!(a))))
        .collect();
    let path_parameters: Map<String, Value> = ctx
        .captures
        .iter()
        .filter(|(name, _)| name.parse::<usize>().is_err())
        .map(|(name, value)| (name.clone(), json!(value)))
        .collect();
    let raw = ctx.body.as_deref().unwrap_or_default();
    let (body, encoded) = match (raw.is_empty(), base64_encode_body) {
        (false, true) => (base64::engine::general_purpose::STANDARD.encode(raw), true),
        _ => (String::from_utf8_lossy(raw).into_owned(), false),
    };
    let protocol = match ctx.http_version {
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    };
    let secs = started_ms / 1000;
    let t = strait_runtime::clock::UtcTime::of(secs);
    let request_time = format!(
        "{:02}/{}/{}:{} +0000",
        t.day,
        t.month_name(),
        t.year,
        t.clock()
    );
    json!({
        "version": "1.0",
        "resource": ctx.path(),
        "path": ctx.path(),
        "httpMethod": ctx.method.as_str(),
        "headers": single_headers,
        "multiValueHeaders": multi_headers,
        "pathParameters": path_parameters,
        "queryStringParameters": single_query,
        "multiValueQueryStringParameters": multi_query,
        "body": body,
        "isBase64Encoded": encoded,
        "requestContext": {
            "path": ctx.path(),
            "protocol": protocol,
            "httpMethod": ctx.method.as_str(),
            "domainName": ctx.host,
            "domainPrefix": ctx.host.split('.').next().unwrap_or(""),
            "identity": { "sourceIp": ctx.client_ip.to_string(), "userAgent": ctx.header("user-agent") },
            "requestId": request_id,
            "requestTime": request_time,
            "requestTimeEpoch": started_ms,
            "resourcePath": ctx.path(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_read_as_kong_reads_them() {
        let query = crate::form::query_object("a=1&b&a=2&c=&d=x%20y");
        assert_eq!(Value::Object(query), json!({"a": ["1", "2"], "b": true, "c": "", "d": "x y"}));
    }
}
