//! `aws-lambda` (Kong priority 750): answers the request with an AWS Lambda
//! function's, invoked with a SigV4-signed `Invoke` call
//! (`strait_runtime::aws`) carrying the request as Kong builds it
//! (payload.rs); credentials from the configured key pair or the
//! environment, through STS `AssumeRole` when a role is set. The upstream
//! is not called.

mod payload;
mod response;
mod schema;

/// `aws-lambda` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "aws-lambda",
    priority: 750,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(AwsLambda::from_config(config)?)),
};

use std::time::{SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde_json::{Map, Value};
use strait_runtime::aws::{sign, uri_encode, AssumeRole, Credentials, ToSign};
use strait_runtime::http_client::{Request, Server};

use crate::config::ConfigReader;
use crate::context::RequestCtx;
use crate::phase::{AccessFuture, Flow, Plugin, PluginResponse};
use crate::PluginError;

#[derive(Debug)]
pub struct AwsLambda {
    /// `None`: no region configured nor in the environment (each request
    /// is then Kong's 500).
    region: Option<String>,
    server: Option<Server>,
    function_name: String,
    qualifier: Option<String>,
    invocation_type: HeaderValue,
    log_type: HeaderValue,
    credentials: Option<Credentials>,
    assume_role: Option<AssumeRole>,
    forward: payload::Forward,
    awsgateway_compatible: bool,
    is_proxy_integration: bool,
    unhandled_status: Option<u16>,
}

fn internal_error() -> Flow {
    Flow::Respond(PluginResponse::message(500, "An unexpected error occurred"))
}

impl AwsLambda {
    pub fn from_config(config: &Map<String, Value>) -> Result<AwsLambda, PluginError> {
        let c = ConfigReader::new(config);
        let region = c
            .string("aws_region")?
            .or_else(|| std::env::var("AWS_REGION").ok())
            .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
            .filter(|r| !r.is_empty());
        let timeout = crate::observability::millis(c.number("timeout", 60_000.0)?);
        let keepalive = crate::observability::millis(c.number("keepalive", 60_000.0)?);
        let tls = !c.bool("disable_https", false)?;
        let port = u16::try_from(c.integer("port", 443)?)
            .map_err(|_| PluginError::invalid("port", "value should be between 0 and 65535"))?;
        let server = region.as_ref().map(|region| Server {
            host: c
                .string("host")
                .ok()
                .flatten()
                .unwrap_or_else(|| format!("lambda.{region}.amazonaws.com")),
            port,
            tls,
            // Kong does not verify Lambda's certificate (lua-resty-aws: ssl_verify = false).
            verify: false,
            timeout,
            keepalive,
        });
        let credentials = match (c.string("aws_key")?, c.string("aws_secret")?) {
            (Some(key), Some(secret)) => Some(Credentials {
                access_key: key,
                secret_key: secret,
                session_token: None,
            }),
            _ => Credentials::from_env(),
        };
        let assume_role = match (c.string("aws_assume_role_arn")?, &region) {
            (Some(role_arn), Some(region)) => {
                let (endpoint, path) = match c.string("aws_sts_endpoint_url")? {
                    Some(url) => {
                        let (target, _) = crate::bundled::http_log::endpoint("aws_sts_endpoint_url", &url)?;
                        (
                            Server {
                                host: target.host,
                                port: target.port,
                                tls: target.tls,
                                verify: false,
                                timeout,
                                keepalive,
                            },
                            target.path,
                        )
                    }
                    None => (
                        Server {
                            host: format!("sts.{region}.amazonaws.com"),
                            port: 443,
                            tls: true,
                            verify: false,
                            timeout,
                            keepalive,
                        },
                        "/".to_string(),
                    ),
                };
                Some(AssumeRole {
                    role_arn,
                    session_name: c.string("aws_role_session_name")?.unwrap_or_else(|| "kong".into()),
                    region: region.clone(),
                    endpoint,
                    path,
                })
            }
            _ => None,
        };
        let header = |field: &str, default: &str| -> Result<HeaderValue, PluginError> {
            HeaderValue::from_str(&c.string(field)?.unwrap_or_else(|| default.into()))
                .map_err(|_| PluginError::invalid(field, "not a header value"))
        };
        Ok(AwsLambda {
            region,
            server,
            function_name: c.string("function_name")?.unwrap_or_default(),
            qualifier: c.string("qualifier")?,
            invocation_type: header("invocation_type", "RequestResponse")?,
            log_type: header("log_type", "Tail")?,
            credentials,
            assume_role,
            forward: payload::Forward {
                method: c.bool("forward_request_method", false)?,
                uri: c.bool("forward_request_uri", false)?,
                headers: c.bool("forward_request_headers", false)?,
                body: c.bool("forward_request_body", false)?,
                base64_encode_body: c.bool("base64_encode_body", true)?,
            },
            awsgateway_compatible: c.bool("awsgateway_compatible", false)?,
            is_proxy_integration: c.bool("is_proxy_integration", false)?,
            unhandled_status: c.integer_opt("unhandled_status")?.map(|s| s as u16),
        })
    }

    async fn invoke(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let (Some(region), Some(server)) = (&self.region, &self.server) else {
            tracing::error!("aws-lambda: no region specified");
            return internal_error();
        };
        let Some(base) = &self.credentials else {
            tracing::error!("aws-lambda: no credentials (aws_key and aws_secret, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)");
            return internal_error();
        };
        let credentials = match &self.assume_role {
            Some(role) => match role.credentials(base).await {
                Ok(credentials) => credentials,
                Err(error) => {
                    tracing::error!(%error, "aws-lambda: could not assume the role");
                    return internal_error();
                }
            },
            None => base.clone(),
        };
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let event = match self.awsgateway_compatible {
            true => {
                let id = ctx
                    .header("x-kong-request-id")
                    .map_or_else(|| format!("{:032x}", strait_runtime::random::next_u64()), str::to_string);
                payload::gateway_event(ctx, self.forward.base64_encode_body, &id, now.as_millis() as u64)
            }
            false => payload::payload(ctx, &self.forward),
        };
        let body = bytes::Bytes::from(serde_json::to_vec(&event).unwrap_or_default());
        let path = format!("/2015-03-31/functions/{}/invocations", uri_encode(&self.function_name, false));
        let query: Vec<(String, String)> = self
            .qualifier
            .iter()
            .map(|q| ("Qualifier".to_string(), q.clone()))
            .collect();
        let host = match (server.port, server.tls) {
            (443, true) | (80, false) => server.host.clone(),
            (port, _) => format!("{}:{port}", server.host),
        };
        let signed = sign(
            &ToSign {
                method: "POST",
                path: &path,
                query: &query,
                host: &host,
                payload: &body,
                region,
                service: "lambda",
            },
            &credentials,
            now.as_secs(),
        );
        let mut headers = HeaderMap::new();
        headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(HeaderName::from_static("x-amz-invocation-type"), self.invocation_type.clone());
        headers.insert(HeaderName::from_static("x-amz-log-type"), self.log_type.clone());
        for (name, value) in signed {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        }
        let path_and_query = match &self.qualifier {
            Some(q) => format!("{path}?Qualifier={}", uri_encode(q, false)),
            None => path,
        };
        let request = Request {
            method: Method::POST,
            path_and_query,
            headers,
            body,
        };
        match server.send(request).await {
            Ok(answer) => response::answer(self, answer),
            Err(error) => {
                tracing::error!(%error, function = %self.function_name, "aws-lambda: the invocation failed");
                internal_error()
            }
        }
    }
}

impl Plugin for AwsLambda {
    fn name(&self) -> &'static str {
        "aws-lambda"
    }

    fn priority(&self) -> i32 {
        750
    }

    fn reads_request_body(&self) -> bool {
        true
    }

    fn waits(&self) -> bool {
        true
    }

    fn access_async<'a>(&'a self, ctx: &'a mut RequestCtx<'_>) -> AccessFuture<'a> {
        Box::pin(self.invoke(ctx))
    }
}
