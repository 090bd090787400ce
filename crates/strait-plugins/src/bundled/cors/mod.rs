//! `cors` (Kong priority 2000): answer preflight requests and add CORS
//! headers to every other response, with origins given literally, as `*`,
//! or as regular expressions (matched against the host when they hold no
//! `:`, else against scheme://host:port), as Kong does.

mod schema;

/// `cors` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "cors",
    priority: 2000,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(Cors::from_config(config)?)),
};

use http::{HeaderName, HeaderValue, Method};
use regex::Regex;
use serde_json::{Map, Value};

use crate::config::ConfigReader;
use crate::context::{RequestCtx, ResponseCtx};
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::PluginError;

const ALL_METHODS: &str = "GET,HEAD,PUT,PATCH,POST,DELETE,OPTIONS,TRACE,CONNECT";

#[derive(Debug)]
enum Origin {
    /// Normalized `scheme://host[:port]` (or the text as given).
    Exact(String),
    Pattern {
        regex: Regex,
        by_host: bool,
    },
}

#[derive(Debug)]
pub struct Cors {
    origins: Vec<String>,
    matchers: Vec<Origin>,
    any_origin: bool,
    headers: Option<String>,
    exposed_headers: Option<String>,
    methods: String,
    max_age: Option<String>,
    credentials: bool,
    private_network: bool,
    preflight_continue: bool,
    allow_origin_absent: bool,
}

/// A preflight this plugin answered or let through: no response headers.
struct PreflightSeen;

/// `scheme://host[:port]` without default ports, and the host.
fn normalize_origin(origin: &str) -> (String, String) {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return (origin.to_string(), origin.to_string());
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, Some(p)),
        _ => (authority, None),
    };
    let scheme = scheme.to_ascii_lowercase();
    let port = port.filter(|p| !((scheme == "http" && *p == "80") || (scheme == "https" && *p == "443")));
    let domain = match port {
        Some(port) => format!("{scheme}://{host}:{port}"),
        None => format!("{scheme}://{host}"),
    };
    (domain, host.to_string())
}

fn is_literal(origin: &str) -> bool {
    origin
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b".:/-".contains(&b))
}

fn set(headers: &mut http::HeaderMap, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(HeaderName::from_static(name), value);
    }
}

fn add_vary(headers: &mut http::HeaderMap) {
    let present = headers.get_all(http::header::VARY).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.split(',').any(|p| p.trim().eq_ignore_ascii_case("origin")))
    });
    if !present {
        headers.append(http::header::VARY, HeaderValue::from_static("Origin"));
    }
}

impl Cors {
    pub fn from_config(config: &Map<String, Value>) -> Result<Cors, PluginError> {
        let c = ConfigReader::new(config);
        let origins = c.strings("origins")?;
        let mut matchers = Vec::new();
        for entry in &origins {
            if entry == "*" {
                continue;
            }
            if is_literal(entry) {
                matchers.push(Origin::Exact(normalize_origin(entry).0));
            } else {
                let mut pattern = entry.strip_prefix('^').unwrap_or(entry).to_string();
                if !pattern.ends_with('$') {
                    pattern.push('$');
                }
                let regex = Regex::new(&format!("^(?:{pattern})"))
                    .map_err(|e| PluginError::invalid("origins", format!("'{entry}' is not a valid regex: {e}")))?;
                matchers.push(Origin::Pattern {
                    regex,
                    by_host: !entry.contains(':'),
                });
            }
        }
        let join = |list: Vec<String>| (!list.is_empty()).then(|| list.join(","));
        let methods = c.strings("methods")?;
        Ok(Cors {
            any_origin: origins.is_empty() || origins.iter().any(|o| o == "*"),
            origins,
            matchers,
            headers: join(c.strings("headers")?),
            exposed_headers: join(c.strings("exposed_headers")?),
            methods: join(methods).unwrap_or_else(|| ALL_METHODS.to_string()),
            max_age: match c.number("max_age", f64::NAN)? {
                n if n.is_nan() => None,
                n if n.fract() == 0.0 => Some(format!("{}", n as i64)),
                n => Some(n.to_string()),
            },
            credentials: c.bool("credentials", false)?,
            private_network: c.bool("private_network", false)?,
            preflight_continue: c.bool("preflight_continue", false)?,
            allow_origin_absent: c.bool("allow_origin_absent", true)?,
        })
    }

    /// Kong's `configure_origin`: sets `Access-Control-Allow-Origin`;
    /// returns true when every origin is allowed.
    fn configure_origin(&self, headers: &mut http::HeaderMap, request_origin: Option<&str>) -> bool {
        if self.origins.is_empty() || (self.origins.len() == 1 && self.origins[0] == "*") {
            set(headers, "access-control-allow-origin", "*");
            return true;
        }
        add_vary(headers);
        if self.origins.len() == 1 && is_literal(&self.origins[0]) {
            set(headers, "access-control-allow-origin", &self.origins[0]);
            return false;
        }
        if let Some(origin) = request_origin.filter(|o| !o.is_empty()) {
            if self.any_origin {
                set(headers, "access-control-allow-origin", "*");
                return true;
            }
            let (domain, host) = normalize_origin(origin);
            let found = self.matchers.iter().any(|m| match m {
                Origin::Exact(exact) => *exact == domain,
                Origin::Pattern { regex, by_host } => regex.is_match(if *by_host { &host } else { &domain }),
            });
            if found {
                set(headers, "access-control-allow-origin", &domain);
                return false;
            }
        }
        headers.remove("access-control-allow-origin");
        false
    }

    fn configure_credentials(&self, headers: &mut http::HeaderMap, allow_all: bool, request_origin: Option<&str>) {
        if !self.credentials {
            return;
        }
        if !allow_all {
            set(headers, "access-control-allow-credentials", "true");
            return;
        }
        if let Some(origin) = request_origin.filter(|o| !o.is_empty()) {
            add_vary(headers);
            set(headers, "access-control-allow-origin", origin);
            set(headers, "access-control-allow-credentials", "true");
        }
    }
}

impl Plugin for Cors {
    fn name(&self) -> &'static str {
        "cors"
    }

    fn priority(&self) -> i32 {
        2000
    }

    /// Reads none of Kong's identity fields (identity.rs).
    fn reads_identity_fields(&self) -> bool {
        false
    }

    fn reads_request_headers_in_response(&self) -> bool {
        true
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let origin = ctx.header("origin").filter(|o| !o.is_empty()).map(str::to_string);
        let preflight = *ctx.method == Method::OPTIONS
            && origin.is_some()
            && ctx.headers.contains_key("access-control-request-method");
        if !preflight {
            return Flow::Continue;
        }
        ctx.shared.insert(PreflightSeen);
        if self.preflight_continue {
            return Flow::Continue;
        }
        let mut headers = http::HeaderMap::new();
        let allow_all = self.configure_origin(&mut headers, origin.as_deref());
        self.configure_credentials(&mut headers, allow_all, origin.as_deref());
        match (&self.headers, ctx.header("access-control-request-headers")) {
            (Some(allowed), _) => set(&mut headers, "access-control-allow-headers", allowed),
            (None, Some(requested)) => set(&mut headers, "access-control-allow-headers", requested),
            (None, None) => {}
        }
        set(&mut headers, "access-control-allow-methods", &self.methods);
        if let Some(max_age) = &self.max_age {
            set(&mut headers, "access-control-max-age", max_age);
        }
        if self.private_network && ctx.header("access-control-request-private-network") == Some("true") {
            set(&mut headers, "access-control-allow-private-network", "true");
        }
        let mut response = PluginResponse {
            status: 200,
            headers: Vec::new(),
            body: bytes::Bytes::new(),
        };
        for (name, value) in headers.iter() {
            if let Ok(value) = value.to_str() {
                response.headers.push((name.as_str().to_string(), value.to_string()));
            }
        }
        Flow::Respond(response)
    }

    fn filters_headers(&self) -> bool {
        true
    }

    fn header_filter(&self, ctx: &mut ResponseCtx<'_>) {
        if ctx.shared.get::<PreflightSeen>().is_some() {
            return;
        }
        let origin = ctx
            .request
            .request_headers
            .as_ref()
            .and_then(|h| h.get("origin"))
            .and_then(|v| v.to_str().ok())
            .filter(|o| !o.is_empty())
            .map(str::to_string);
        if origin.is_none() && !self.allow_origin_absent {
            return;
        }
        let allow_all = self.configure_origin(ctx.headers, origin.as_deref());
        self.configure_credentials(ctx.headers, allow_all, origin.as_deref());
        if let Some(exposed) = &self.exposed_headers {
            set(ctx.headers, "access-control-expose-headers", exposed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_normalize_without_default_ports() {
        assert_eq!(normalize_origin("https://a.example:443").0, "https://a.example");
        assert_eq!(normalize_origin("http://a.example:8080").0, "http://a.example:8080");
        assert_eq!(normalize_origin("http://a.example/x").1, "a.example");
        assert_eq!(normalize_origin("null").0, "null");
    }
}
