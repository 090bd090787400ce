//! Outbound HTTP/1.1 requests for plugins that call services themselves
//! (azure-functions, aws-lambda): plain or TLS (verified against the
//! system's roots or not), one timeout for connecting, sending and reading,
//! and idle connections kept per server for `keepalive`.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

use crate::tls::ClientTls;

/// The most of an answer's body read.
pub const MAX_BODY: usize = 32 << 20;

/// Where a request goes.
#[derive(Debug, Clone)]
pub struct Server {
    pub host: String,
    pub port: u16,
    pub tls: bool,
    /// Check the certificate chain and name.
    pub verify: bool,
    pub timeout: Duration,
    pub keepalive: Duration,
}

/// A request: method, path and query, headers (`Host` and
/// `Content-Length` are set here), body.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    pub path_and_query: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Debug)]
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

type Key = (String, u16, bool, bool);
type Pool = Mutex<HashMap<Key, Vec<(SendRequest<Full<Bytes>>, Instant)>>>;

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(Default::default)
}

const IDLE_PER_SERVER: usize = 32;

impl Server {
    fn key(&self) -> Key {
        (self.host.to_ascii_lowercase(), self.port, self.tls, self.verify)
    }

    fn idle(&self) -> Option<SendRequest<Full<Bytes>>> {
        let mut pool = pool().lock().unwrap_or_else(|p| p.into_inner());
        let idle = pool.get_mut(&self.key())?;
        while let Some((sender, since)) = idle.pop() {
            if since.elapsed() < self.keepalive && !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn keep(&self, sender: SendRequest<Full<Bytes>>) {
        if self.keepalive.is_zero() || sender.is_closed() {
            return;
        }
        let mut pool = pool().lock().unwrap_or_else(|p| p.into_inner());
        let idle = pool.entry(self.key()).or_default();
        idle.retain(|(s, since)| since.elapsed() < self.keepalive && !s.is_closed());
        if idle.len() < IDLE_PER_SERVER {
            idle.push((sender, Instant::now()));
        }
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let tls = self.tls.then_some(ClientTls {
            server_name: &self.host,
            verify: self.verify,
        });
        let stream = crate::tls::connect(&self.host, self.port, tls).await?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }

    /// Sends `request` and reads the whole answer, within the timeout.
    pub async fn send(&self, request: Request) -> Result<Response, String> {
        let where_to = format!("{}:{}", self.host, self.port);
        match tokio::time::timeout(self.timeout, self.send_within(request)).await {
            Ok(result) => result.map_err(|e| format!("request to {where_to} failed: {e}")),
            Err(_) => Err(format!("request to {where_to} timed out after {:?}", self.timeout)),
        }
    }

    async fn send_within(&self, request: Request) -> Result<Response, String> {
        let mut sender = match self.idle() {
            Some(sender) => sender,
            None => self.connect().await?,
        };
        if sender.ready().await.is_err() {
            sender = self.connect().await?;
            sender.ready().await.map_err(|e| e.to_string())?;
        }
        let mut outbound = http::Request::new(Full::new(request.body.clone()));
        *outbound.method_mut() = request.method;
        *outbound.uri_mut() = request
            .path_and_query
            .parse()
            .map_err(|e| format!("path {:?}: {e}", request.path_and_query))?;
        let headers = outbound.headers_mut();
        *headers = request.headers;
        let default_port = if self.tls { 443 } else { 80 };
        let host = match self.port == default_port {
            true => self.host.clone(),
            false => format!("{}:{}", self.host, self.port),
        };
        let host = HeaderValue::from_str(&host).map_err(|e| format!("host {host:?}: {e}"))?;
        headers.insert(http::header::HOST, host);
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(request.body.len()));
        let response = sender.send_request(outbound).await.map_err(|e| e.to_string())?;
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, MAX_BODY)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
            .to_bytes();
        self.keep(sender);
        Ok(Response {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}
