//! A proxy-wasm filter reading one request header and setting one: the
//! request's `accept` into `x-seen` (or "none"), as wasm-cost's pre-function
//! does in Lua.

use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, LogLevel};

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Warn);
    proxy_wasm::set_http_context(|_, _| -> Box<dyn HttpContext> { Box::new(Seen) });
}}

struct Seen;

impl Context for Seen {}

impl HttpContext for Seen {
    fn on_http_request_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        let accept = self.get_http_request_header("accept");
        self.set_http_request_header("x-seen", Some(accept.as_deref().unwrap_or("none")));
        Action::Continue
    }
}
