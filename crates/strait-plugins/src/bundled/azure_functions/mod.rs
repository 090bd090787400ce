//! `azure-functions` (Kong priority 749): answers the request with what an
//! Azure Function answers, called at `http(s)://<appname>.<hostdomain>`
//! `/<routeprefix>/<functionname>` with the request's method, query,
//! headers (but `Host`) and body, plus `x-functions-key` and
//! `x-functions-clientid` when configured. The upstream is not called.

mod schema;

/// `azure-functions` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "azure-functions",
    priority: 749,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(AzureFunctions::from_config(config)?)),
};

use http::{HeaderName, HeaderValue};
use serde_json::{Map, Value};
use strait_runtime::http_client::{Request, Server};

use crate::config::ConfigReader;
use crate::context::RequestCtx;
use crate::phase::{AccessFuture, Flow, Plugin, PluginResponse};
use crate::PluginError;

#[derive(Debug)]
pub struct AzureFunctions {
    server: Server,
    /// `/<routeprefix>/<functionname>`, slashes around each trimmed.
    path: String,
    apikey: Option<HeaderValue>,
    clientid: Option<HeaderValue>,
}

/// Fields of the function's answer that belong to its connection.
const HOP_BY_HOP: [&str; 6] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "upgrade",
    "transfer-encoding",
    "content-length",
];

/// Kong's path: the prefix and the function's name without the slashes
/// around them, an empty prefix left out.
fn function_path(prefix: &str, function: &str) -> String {
    let prefix = prefix.trim_matches('/');
    let function = function.trim_matches('/');
    match prefix.is_empty() {
        true => format!("/{function}"),
        false => format!("/{prefix}/{function}"),
    }
}

impl AzureFunctions {
    pub fn from_config(config: &Map<String, Value>) -> Result<AzureFunctions, PluginError> {
        let c = ConfigReader::new(config);
        let required = |field: &str| -> Result<String, PluginError> {
            c.string(field)?
                .ok_or_else(|| PluginError::invalid(field, "required field missing"))
        };
        let appname = required("appname")?;
        let hostdomain = c.string("hostdomain")?.unwrap_or_else(|| "azurewebsites.net".into());
        let https = c.bool("https", true)?;
        let header = |field: &str| -> Result<Option<HeaderValue>, PluginError> {
            c.string(field)?
                .map(|v| HeaderValue::from_str(&v).map_err(|_| PluginError::invalid(field, "not a header value")))
                .transpose()
        };
        Ok(AzureFunctions {
            server: Server {
                host: format!("{appname}.{hostdomain}"),
                port: if https { 443 } else { 80 },
                tls: https,
                verify: c.bool("https_verify", false)?,
                timeout: crate::observability::millis(c.number("timeout", 600_000.0)?),
                keepalive: crate::observability::millis(c.number("keepalive", 60_000.0)?),
            },
            path: function_path(
                &c.string("routeprefix")?.unwrap_or_default(),
                &required("functionname")?,
            ),
            apikey: header("apikey")?,
            clientid: header("clientid")?,
        })
    }

    async fn call(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let mut headers = ctx.headers.clone();
        headers.remove(http::header::HOST);
        if let Some(key) = &self.apikey {
            headers.insert(HeaderName::from_static("x-functions-key"), key.clone());
        }
        if let Some(id) = &self.clientid {
            headers.insert(HeaderName::from_static("x-functions-clientid"), id.clone());
        }
        let path_and_query = match ctx.query() {
            "" => self.path.clone(),
            query => format!("{}?{query}", self.path),
        };
        let request = Request {
            method: ctx.method.clone(),
            path_and_query,
            headers,
            body: ctx.body.clone().unwrap_or_default(),
        };
        match self.server.send(request).await {
            Ok(answer) => {
                let headers = answer
                    .headers
                    .iter()
                    .filter(|(name, _)| !HOP_BY_HOP.contains(&name.as_str()))
                    .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
                    .collect();
                Flow::Respond(PluginResponse {
                    status: answer.status.as_u16(),
                    headers,
                    body: answer.body,
                })
            }
            Err(error) => {
                tracing::error!(function = %self.path, %error, "azure-functions: the function could not be called");
                Flow::Respond(PluginResponse::message(500, "An unexpected error occurred"))
            }
        }
    }
}

impl Plugin for AzureFunctions {
    fn name(&self) -> &'static str {
        "azure-functions"
    }

    fn priority(&self) -> i32 {
        749
    }

    fn reads_request_body(&self) -> bool {
        true
    }

    fn waits(&self) -> bool {
        true
    }

    fn access_async<'a>(&'a self, ctx: &'a mut RequestCtx<'_>) -> AccessFuture<'a> {
        Box::pin(self.call(ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_is_kongs_with_slashes_trimmed() {
        assert_eq!(function_path("api", "hello"), "/api/hello");
        assert_eq!(function_path("/api/", "/hello/"), "/api/hello");
        assert_eq!(function_path("", "hello"), "/hello");
        assert_eq!(function_path("v1/fn", "hello"), "/v1/fn/hello");
    }
}
