//! What a filter's callback sees of its request: moved into the filter's
//! store for the call (the header maps are moved, not copied; the strings
//! are buffers the store keeps and refills), and moved back after it.

use std::collections::HashMap;

use http::HeaderMap;
use strait_plugins::{LazyHeaders, PluginResponse};
use uuid::Uuid;

/// The callback being run, which decides what the host calls may touch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Phase {
    #[default]
    Idle,
    /// `proxy_on_vm_start` / `proxy_on_configure` / `proxy_on_tick`: the
    /// root context's callbacks, outside any request.
    Configure,
    RequestHeaders,
    /// `proxy_on_http_call_response`, in the access phase: the request's
    /// headers as in `RequestHeaders`, with the call's answer.
    CallResponse,
    ResponseHeaders,
    ResponseBody,
    Log,
}

/// The request a callback runs for.
#[derive(Debug, Default)]
pub(crate) struct Exchange {
    pub phase: Phase,
    pub request_headers: HeaderMap,
    /// Made into a map only when the filter reads it (strait-plugins'
    /// lazy_head.rs).
    pub response_headers: LazyHeaders,
    /// `:method`, `:path` (path and query), `:scheme`; `:authority` is the
    /// `Host` header.
    pub method: String,
    pub path: String,
    pub scheme: &'static str,
    /// The response's status (`:status`), in the response phases.
    pub status: u16,
    /// Set when the filter replaced `:method` or `:path`.
    pub method_changed: bool,
    pub path_changed: bool,
    /// The body a body callback sees (all of it the filter held back so
    /// far): the response's own bytes, copied only if the filter changes
    /// them.
    pub body: bytes::Bytes,
    /// The filter's configuration, during `proxy_on_configure`.
    pub configuration: Vec<u8>,
    /// What `proxy_set_tick_period_milliseconds` asked for (0: no ticks),
    /// during the root context's callbacks.
    pub tick_period: Option<u32>,
    /// HTTP calls the filter asked for in this callback.
    pub pending_calls: Vec<crate::calls::HttpCall>,
    /// The answer `proxy_on_http_call_response` is about.
    pub call_response: crate::calls::CallResponse,
    /// What `proxy_send_local_response` asked for.
    pub local_response: Option<PluginResponse>,
    pub properties: Properties,
    /// `kong.ctx.shared.*` of this request, shared by the route's filters.
    pub ctx_shared: HashMap<String, Vec<u8>>,
}

/// The `kong.*`, `request.*`, `source.*` properties a filter may read.
#[derive(Debug, Default)]
pub(crate) struct Properties {
    pub route_id: Option<Uuid>,
    pub route_name: String,
    pub service_id: Option<Uuid>,
    pub protocol: &'static str,
    pub http_version: &'static str,
    pub client_ip: Option<std::net::IpAddr>,
    pub client_port: u16,
    pub server_port: u16,
    pub consumer_id: Option<Uuid>,
}

impl Exchange {
    /// Whether the request's headers are the callback's to read and change.
    pub(crate) fn in_request(&self) -> bool {
        matches!(self.phase, Phase::RequestHeaders | Phase::CallResponse)
    }

    /// Forgets what the last callback left (buffers keep their capacity).
    pub(crate) fn clear(&mut self) {
        self.phase = Phase::Idle;
        self.request_headers.clear();
        self.response_headers = LazyHeaders::default();
        self.method.clear();
        self.path.clear();
        self.status = 0;
        self.method_changed = false;
        self.path_changed = false;
        self.body = bytes::Bytes::new();
        self.configuration.clear();
        self.local_response = None;
        self.tick_period = None;
        self.pending_calls.clear();
        self.call_response = Default::default();
        self.ctx_shared.clear();
    }
}

/// Kong's name of an HTTP version, as `request.protocol` shows it.
pub(crate) fn version_name(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2",
        http::Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}
