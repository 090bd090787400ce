//! Cross-origin requests to the Admin API: only the admin UI's own origin
//! may drive it from a browser.
//!
//! Kong answers every origin with CORS headers (`admin_gui_url`'s origin,
//! else `*`) and refuses nothing, so a web page an operator happens to
//! open can still send a "simple" cross-site POST to a local Admin API
//! (CSRF): the browser sends it, only the answer is hidden. Strait refuses
//! such requests before they reach a handler. A request with an `Origin`
//! header is served only when that origin is the UI's: the origins of
//! `admin_gui_url`, or, when it is unset, the UI on this machine
//! (`http(s)://localhost|127.0.0.1|[::1]:<admin_gui_listen port>`); with
//! `Sec-Fetch-Site: cross-site` and no `Origin` it is refused too. Clients
//! that are not browsers (curl, decK, scripts) send neither and are
//! served as before.

use http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};

/// The origins allowed to drive the Admin API from a browser.
#[derive(Debug, Clone, Default)]
pub struct AllowedOrigins {
    origins: Vec<String>,
}

impl AllowedOrigins {
    /// `admin_gui_url`'s origins (comma-separated URLs), or, when there are
    /// none, the loopback origins of the UI's ports.
    pub fn new(gui_urls: &[String], gui_ports: &[u16]) -> AllowedOrigins {
        let mut origins: Vec<String> = gui_urls.iter().filter_map(|url| origin_of(url)).collect();
        if origins.is_empty() {
            for port in gui_ports {
                for scheme in ["http", "https"] {
                    for host in ["localhost", "127.0.0.1", "[::1]"] {
                        origins.push(format!("{scheme}://{host}:{port}"));
                    }
                }
            }
        }
        AllowedOrigins { origins }
    }

    pub fn contains(&self, origin: &str) -> bool {
        let origin = origin.trim_end_matches('/').to_ascii_lowercase();
        self.origins.contains(&origin)
    }

    /// The first allowed origin (`admin_gui_url`'s), for messages.
    pub fn first(&self) -> Option<&str> {
        self.origins.first().map(String::as_str)
    }
}

/// `scheme://host[:port]` of a URL, lowercased, the default port left out.
pub fn origin_of(url: &str) -> Option<String> {
    let url = url.trim();
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next()?.to_ascii_lowercase();
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    let authority = match (scheme.as_str(), authority.rsplit_once(':')) {
        ("http", Some((host, "80"))) | ("https", Some((host, "443"))) => host.to_string(),
        _ => authority,
    };
    Some(format!("{scheme}://{authority}"))
}

/// What to do with a request, from its headers.
pub enum Verdict {
    /// Not from a browser page of another origin: served as is.
    NotCrossOrigin,
    /// From the UI: served, with CORS headers for it.
    Allowed(HeaderValue),
    /// A CORS preflight from the UI: answered here.
    Preflight(HeaderValue),
    /// From another origin: refused with this answer.
    Refused(String),
}

pub fn judge(allowed: &AllowedOrigins, method: &Method, headers: &HeaderMap) -> Verdict {
    let Some(origin) = headers.get(header::ORIGIN) else {
        let cross_site = headers
            .get("sec-fetch-site")
            .is_some_and(|site| site.as_bytes().eq_ignore_ascii_case(b"cross-site"));
        return match cross_site {
            true => Verdict::Refused("a cross-site request (Sec-Fetch-Site: cross-site)".to_string()),
            false => Verdict::NotCrossOrigin,
        };
    };
    let text = origin.to_str().unwrap_or("");
    if !allowed.contains(text) {
        return Verdict::Refused(format!("origin {text:?}"));
    }
    if method == Method::OPTIONS && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD) {
        return Verdict::Preflight(origin.clone());
    }
    Verdict::Allowed(origin.clone())
}

/// The CORS headers for the UI's origin.
pub fn add_cors<B>(response: &mut Response<B>, origin: HeaderValue) {
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("X-Kong-Admin-Request-ID, X-Kong-Admin-Latency"),
    );
}

/// Make `response` (a 204) the answer to the UI's preflight: every Admin
/// API method, the headers it sends, cached for an hour.
pub fn preflight<B>(response: &mut Response<B>, origin: HeaderValue) {
    *response.status_mut() = StatusCode::NO_CONTENT;
    add_cors(response, origin);
    let headers = response.headers_mut();
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("Content-Type, Authorization, Kong-Admin-Token"),
    );
    headers.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("3600"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn only_the_uis_origin_may_drive_the_admin_api_from_a_browser() {
        let local = AllowedOrigins::new(&[], &[8002]);
        let post = Method::POST;
        assert!(matches!(judge(&local, &post, &headers(&[])), Verdict::NotCrossOrigin));
        assert!(matches!(
            judge(&local, &post, &headers(&[("origin", "http://localhost:8002")])),
            Verdict::Allowed(_)
        ));
        assert!(matches!(
            judge(&local, &post, &headers(&[("origin", "http://evil.example")])),
            Verdict::Refused(_)
        ));
        // DNS rebinding: another name on the UI's port is another origin.
        assert!(matches!(
            judge(&local, &post, &headers(&[("origin", "http://rebound.example:8002")])),
            Verdict::Refused(_)
        ));
        assert!(matches!(
            judge(&local, &post, &headers(&[("origin", "null")])),
            Verdict::Refused(_)
        ));
        assert!(matches!(
            judge(&local, &post, &headers(&[("sec-fetch-site", "cross-site")])),
            Verdict::Refused(_)
        ));
        assert!(matches!(
            judge(
                &local,
                &Method::OPTIONS,
                &headers(&[
                    ("origin", "http://127.0.0.1:8002"),
                    ("access-control-request-method", "DELETE")
                ])
            ),
            Verdict::Preflight(_)
        ));
        let configured = AllowedOrigins::new(&["https://Admin.Example.com:443/manager".to_string()], &[8002]);
        assert!(configured.contains("https://admin.example.com"));
        assert!(
            !configured.contains("http://localhost:8002"),
            "admin_gui_url replaces the default"
        );
    }

    #[test]
    fn origins_of_urls() {
        assert_eq!(origin_of("http://a.example:80/x").as_deref(), Some("http://a.example"));
        assert_eq!(
            origin_of("https://a.example:8443").as_deref(),
            Some("https://a.example:8443")
        );
        assert_eq!(origin_of("ftp://a.example"), None);
        assert_eq!(origin_of("http://user@a.example"), None);
    }
}
