//! Shortcuts for Admin API calls in tests: JSON, form and multipart bodies,
//! and assertions on Kong's error bodies.

use serde_json::Value;

use crate::client::Reply;
use crate::gateway::Gateway;

/// `method path` with a JSON body.
pub async fn send_json(gw: &Gateway, method: &str, path: &str, body: &Value) -> Reply {
    gw.admin(method, path, &[("content-type", "application/json")], body.to_string())
        .await
}

/// `method path` with an `application/x-www-form-urlencoded` body (already encoded).
pub async fn send_form(gw: &Gateway, method: &str, path: &str, form: &str) -> Reply {
    let headers = [("content-type", "application/x-www-form-urlencoded")];
    gw.admin(method, path, &headers, form.to_string()).await
}

/// `method path` with a `multipart/form-data` body of text fields.
pub async fn send_multipart(gw: &Gateway, method: &str, path: &str, fields: &[(&str, &str)]) -> Reply {
    let boundary = "strait-e2e-boundary";
    let mut body = String::new();
    for (name, value) in fields {
        body.push_str(&format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
        ));
    }
    body.push_str(&format!("--{boundary}--\r\n"));
    let content_type = format!("multipart/form-data; boundary={boundary}");
    gw.admin(method, path, &[("content-type", &content_type)], body).await
}

/// Asserts `reply` has `status` and returns its JSON body (`null` when empty).
pub fn expect(reply: &Reply, status: u16, what: &str) -> Value {
    assert_eq!(reply.status.as_u16(), status, "{what}: {}", reply.text());
    if reply.body.is_empty() {
        Value::Null
    } else {
        reply.json()
    }
}

/// Asserts a Kong error body: status, `code` and `name`; returns the body.
pub fn expect_error(reply: &Reply, status: u16, code: u64, name: &str) -> Value {
    let body = expect(reply, status, name);
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["name"], name, "{body}");
    body
}

/// The `data` array of a list body.
pub fn data(body: &Value) -> Vec<Value> {
    body["data"].as_array().cloned().unwrap_or_default()
}
