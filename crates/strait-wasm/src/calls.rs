//! HTTP calls out (`proxy_http_call`, the SDKs' `dispatch_http_call`): the
//! filter names an upstream (`host:port`) and gives the request as a header
//! map with `:method`, `:path` and `:authority`, a body and a timeout; the
//! host sends it once the callback returns, then hands the answer to
//! `proxy_on_http_call_response` (headers as map 6, body as buffer 4). A call
//! that fails (refused, timed out, a bad answer) is reported to the filter as
//! an answer without headers or body, as Envoy does, and logged.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;

/// The most of an answer's body handed to the filter.
const MAX_BODY: usize = 8 << 20;

/// The longest a call may take, whatever the filter asks: Kong's default
/// for proxy-wasm sockets (`proxy_wasm_socket_read_timeout`, 60 s).
const MAX_TIMEOUT: Duration = Duration::from_secs(60);

/// The filter's timeout (milliseconds, unsigned), at least 1 ms and at
/// most [`MAX_TIMEOUT`], so no request waits on a call for ever.
pub(crate) fn timeout(millis: i32) -> Duration {
    Duration::from_millis(u64::from(millis as u32)).clamp(Duration::from_millis(1), MAX_TIMEOUT)
}

/// A call a filter asked for.
#[derive(Debug)]
pub(crate) struct HttpCall {
    pub token: u32,
    /// `host:port`.
    pub upstream: String,
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub body: Vec<u8>,
    pub timeout: Duration,
}

/// An answer as the filter reads it.
#[derive(Debug, Default)]
pub(crate) struct CallResponse {
    /// `:status` first, then the answer's headers.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// Checks what `proxy_http_call` was given: `Err` is the status code.
pub(crate) fn check(headers: &[(Vec<u8>, Vec<u8>)]) -> Result<(), i32> {
    let has = |name: &[u8]| headers.iter().any(|(k, v)| k == name && !v.is_empty());
    match has(b":method") && has(b":path") && has(b":authority") {
        true => Ok(()),
        false => Err(crate::host::status::BAD_ARGUMENT),
    }
}

/// Sends `call` and reads its answer; a failure is an empty answer.
pub(crate) async fn perform(call: HttpCall, filter: &str) -> CallResponse {
    let upstream = call.upstream.clone();
    match tokio::time::timeout(call.timeout, exchange(call)).await {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => {
            tracing::warn!(filter, upstream = %upstream, error = %error, "wasm filter's HTTP call failed");
            CallResponse::default()
        }
        Err(_) => {
            tracing::warn!(filter, upstream = %upstream, "wasm filter's HTTP call timed out");
            CallResponse::default()
        }
    }
}

async fn exchange(call: HttpCall) -> Result<CallResponse, String> {
    let stream = tokio::net::TcpStream::connect(call.upstream.as_str())
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut builder = http::Request::builder();
    for (name, value) in &call.headers {
        match name.as_slice() {
            b":method" => builder = builder.method(value.as_slice()),
            b":path" => builder = builder.uri(value.as_slice()),
            b":authority" => builder = builder.header(http::header::HOST, value.as_slice()),
            name if name.starts_with(b":") => {}
            name => builder = builder.header(name, value.as_slice()),
        }
    }
    let request = builder
        .body(Full::new(Bytes::from(call.body)))
        .map_err(|e| format!("the request: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("sending: {e}"))?;
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|e| format!("reading the body: {e}"))?
        .to_bytes();
    let mut headers = vec![(b":status".to_vec(), parts.status.as_str().as_bytes().to_vec())];
    headers.extend(
        parts
            .headers
            .iter()
            .map(|(name, value)| (name.as_str().as_bytes().to_vec(), value.as_bytes().to_vec())),
    );
    Ok(CallResponse {
        headers,
        body: body.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_waits_at_most_a_minute_and_at_least_a_millisecond() {
        assert_eq!(timeout(5_000), Duration::from_secs(5));
        assert_eq!(timeout(0), Duration::from_millis(1));
        assert_eq!(timeout(-1), MAX_TIMEOUT, "u32::MAX ms, as the filter passed it");
        assert!(check(&[(b":method".to_vec(), b"GET".to_vec())]).is_err());
    }
}
