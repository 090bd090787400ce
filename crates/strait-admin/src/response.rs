//! Response helpers: JSON bodies with the Admin API's headers (`Server` and
//! Kong's other headers are added to every response in `server.rs`).

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use serde_json::{json, Value};

pub use crate::body::AdminBody;

pub type AdminResponse = Response<AdminBody>;

pub fn json_response(status: StatusCode, body: &Value) -> AdminResponse {
    json_text_response(status, body.to_string().into_bytes())
}

/// A JSON response whose body is already JSON text.
pub fn json_text_response(status: StatusCode, body: impl Into<Bytes>) -> AdminResponse {
    let mut response = Response::new(AdminBody::whole(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    response
}

pub fn empty_response(status: StatusCode) -> AdminResponse {
    let mut response = Response::new(AdminBody::whole(Bytes::new()));
    *response.status_mut() = status;
    response
}

pub fn message(status: StatusCode, text: &str) -> AdminResponse {
    json_response(status, &json!({ "message": text }))
}

pub fn not_found() -> AdminResponse {
    message(StatusCode::NOT_FOUND, "Not found")
}

pub fn method_not_allowed(allow: &'static str) -> AdminResponse {
    let mut response = message(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed");
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

/// An error from below the Admin API: 503 when the shared database is
/// unreachable (the client may retry; nothing was written), else 500.
pub fn failure<E: std::fmt::Display + 'static>(error: &E) -> AdminResponse {
    match (error as &dyn std::any::Any).downcast_ref::<strait_store::StoreError>() {
        Some(unavailable @ strait_store::StoreError::Unavailable(_)) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({ "message": unavailable.to_string() }),
        ),
        _ => internal_error(&error.to_string()),
    }
}

pub fn internal_error(detail: &str) -> AdminResponse {
    tracing::error!(detail, "admin API internal error");
    message(StatusCode::INTERNAL_SERVER_ERROR, "An unexpected error occurred")
}
