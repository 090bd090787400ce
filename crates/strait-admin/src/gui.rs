//! The admin web UI on `admin_gui_listen` (Kong Manager's place): static
//! files built into the binary from `crates/strait-admin/ui/`, under
//! `admin_gui_path`, and `kconfig.js`, which tells the page where the
//! Admin API is. The page talks to the Admin API from the browser; the
//! Admin API serves it because its origin is the UI's (see `origin.rs`).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::body::AdminBody;

const INDEX: &str = include_str!("../ui/index.html");
const APP: &str = include_str!("../ui/app.js");
const FORMS: &str = include_str!("../ui/forms.js");
const STYLE: &str = include_str!("../ui/style.css");

/// Where the UI is served and which Admin API it calls.
#[derive(Debug, Clone)]
pub struct GuiConfig {
    /// `admin_gui_path`, without a trailing slash (`""` for `/`).
    pub path: String,
    /// `admin_gui_api_url`; unset: the page's host on `admin_port`.
    pub api_url: Option<String>,
    /// The first plain `admin_listen` port.
    pub admin_port: Option<u16>,
    /// The first `ssl` `admin_listen` port.
    pub admin_ssl_port: Option<u16>,
}

/// Serve the UI on `listener` until shutdown.
pub async fn serve_gui(listener: TcpListener, config: Arc<GuiConfig>, shutdown: watch::Receiver<bool>) {
    let mut stop = shutdown.clone();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "admin UI accept failed");
                    continue;
                }
            },
            _ = strait_runtime::stopped(&mut stop) => return,
        };
        let config = config.clone();
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let config = config.clone();
                async move { Ok::<_, Infallible>(answer(&config, &request)) }
            });
            crate::server::serve_http1(TokioIo::new(stream), service, &mut shutdown).await;
        });
    }
}

fn answer(config: &GuiConfig, request: &Request<Incoming>) -> Response<AdminBody> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "GET only\n".into(),
        );
    }
    let path = request.uri().path();
    let Some(rest) = path.strip_prefix(config.path.as_str()) else {
        return reply(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "Not found\n".into());
    };
    match rest {
        "" => {
            // `/manager` → `/manager/`, so relative asset paths resolve.
            let mut response = reply(StatusCode::MOVED_PERMANENTLY, "text/plain; charset=utf-8", Bytes::new());
            if let Ok(location) = HeaderValue::from_str(&format!("{}/", config.path)) {
                response.headers_mut().insert(header::LOCATION, location);
            }
            response
        }
        "/app.js" => reply(StatusCode::OK, "text/javascript; charset=utf-8", APP.into()),
        "/forms.js" => reply(StatusCode::OK, "text/javascript; charset=utf-8", FORMS.into()),
        "/style.css" => reply(StatusCode::OK, "text/css; charset=utf-8", STYLE.into()),
        "/kconfig.js" => reply(StatusCode::OK, "text/javascript; charset=utf-8", kconfig(config).into()),
        // Every other path is a page of the app (its router reads the hash).
        _ if rest.starts_with('/') => reply(StatusCode::OK, "text/html; charset=utf-8", INDEX.into()),
        _ => reply(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "Not found\n".into()),
    }
}

/// Kong Manager's `kconfig.js`: the page's settings as a global.
fn kconfig(config: &GuiConfig) -> String {
    let settings = serde_json::json!({
        "ADMIN_GUI_PATH": if config.path.is_empty() { "/" } else { config.path.as_str() },
        "ADMIN_API_URL": config.api_url,
        "ADMIN_API_PORT": config.admin_port,
        "ADMIN_API_SSL_PORT": config.admin_ssl_port,
        "KONG_VERSION": crate::KONG_COMPATIBLE_VERSION,
        "STRAIT_VERSION": strait_core::VERSION,
    });
    format!("window.K_CONFIG = {settings};\n")
}

fn reply(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<AdminBody> {
    let mut response = Response::new(AdminBody::whole(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // The page runs only its own scripts, and no other site may frame it.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self' http: https:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kconfig_names_the_admin_api() {
        let config = GuiConfig {
            path: "/manager".into(),
            api_url: None,
            admin_port: Some(8001),
            admin_ssl_port: None,
        };
        let text = kconfig(&config);
        assert!(text.starts_with("window.K_CONFIG = {"), "{text}");
        assert!(text.contains("\"ADMIN_API_PORT\":8001"), "{text}");
        assert!(text.contains("\"ADMIN_GUI_PATH\":\"/manager\""), "{text}");
    }
}
