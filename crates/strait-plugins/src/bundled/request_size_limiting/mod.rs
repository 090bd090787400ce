//! `request-size-limiting` (Kong priority 951): refuse request bodies
//! larger than `allowed_payload_size` (in `size_unit`s), by
//! `Content-Length`, or by reading a body sent without one.

mod schema;

/// `request-size-limiting` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "request-size-limiting",
    priority: 951,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(RequestSizeLimiting::from_config(config)?)),
};

use serde_json::{Map, Value};

use crate::config::ConfigReader;
use crate::context::{BodyLimit, RequestCtx};
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::PluginError;

#[derive(Debug)]
pub struct RequestSizeLimiting {
    allowed_bytes: u64,
    require_content_length: bool,
}

/// 417 when the client waits for `100 Continue`, 413 otherwise.
fn too_large(expects_continue: bool) -> PluginResponse {
    let status = if expects_continue { 417 } else { 413 };
    PluginResponse::message(status, "Request size limit exceeded")
}

impl RequestSizeLimiting {
    pub fn from_config(config: &Map<String, Value>) -> Result<RequestSizeLimiting, PluginError> {
        let c = ConfigReader::new(config);
        let size = c.integer("allowed_payload_size", 128)?;
        let factor: u64 = match c.string("size_unit")?.as_deref().unwrap_or("megabytes") {
            "megabytes" => 1 << 20,
            "kilobytes" => 1 << 10,
            "bytes" => 1,
            other => return Err(PluginError::invalid("size_unit", format!("unknown unit '{other}'"))),
        };
        Ok(RequestSizeLimiting {
            allowed_bytes: (size.max(0) as u64).saturating_mul(factor),
            require_content_length: c.bool("require_content_length", false)?,
        })
    }
}

impl Plugin for RequestSizeLimiting {
    fn name(&self) -> &'static str {
        "request-size-limiting"
    }

    fn priority(&self) -> i32 {
        951
    }

    /// Reads none of Kong's identity fields (identity.rs).
    fn reads_identity_fields(&self) -> bool {
        false
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let expects_continue = ctx
            .header("expect")
            .is_some_and(|e| e.trim().eq_ignore_ascii_case("100-continue"));
        match ctx.header("content-length").and_then(|l| l.trim().parse::<u64>().ok()) {
            Some(length) if length > self.allowed_bytes => Flow::Respond(too_large(expects_continue)),
            Some(_) => Flow::Continue,
            None => {
                let chunked = ctx
                    .header("transfer-encoding")
                    .is_some_and(|t| t.eq_ignore_ascii_case("chunked"));
                if self.require_content_length && !chunked {
                    return Flow::Respond(PluginResponse::message(
                        411,
                        "A valid Content-Length header is required",
                    ));
                }
                let max_bytes = match &ctx.request_body_limit {
                    Some(limit) => limit.max_bytes.min(self.allowed_bytes),
                    None => self.allowed_bytes,
                };
                ctx.request_body_limit = Some(BodyLimit {
                    max_bytes,
                    exceeded: too_large(expects_continue),
                });
                Flow::Continue
            }
        }
    }
}
