//! Entry points for the fuzz targets (`fuzz/`): the Admin API's handling of
//! a request body up to the store, without a node. Not part of the API.

use bytes::Bytes;
use http::Method;
use serde_json::Value;
use strait_core::{validate_entity, EntityKind};

use crate::crud::body::{infer_entity, parse_body, Encoding};
use crate::request::{AdminRequest, Query};

/// Parses `body` as a write with `content_type` would (JSON, form,
/// multipart), applies Kong's form typing for every entity kind, and
/// validates the result as that kind. Must never panic, whatever the bytes.
pub fn write_body(content_type: &str, body: &[u8]) {
    let media_type = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let request = AdminRequest {
        method: Method::POST,
        query: Query::default(),
        raw_query: None,
        media_type,
        content_type: content_type.to_string(),
        body: Bytes::copy_from_slice(body),
    };
    let Ok((input, encoding)) = parse_body(&request) else {
        return;
    };
    for kind in EntityKind::ALL {
        let mut input = input.clone();
        if encoding == Encoding::Form {
            let plugin = input.get("name").and_then(Value::as_str).map(str::to_string);
            infer_entity(kind, &mut input, plugin.as_deref());
        }
        let _ = validate_entity(kind, &Value::Object(input), 0);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_encoding_reaches_validation_without_panicking() {
        super::write_body("application/json", br#"{"name":"s","url":"http://x","tags":["a"]}"#);
        super::write_body("application/x-www-form-urlencoded", b"name=s&paths[]=/a&config.x=1");
        super::write_body(
            "multipart/form-data; boundary=b",
            b"--b\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nx\r\n--b--\r\n",
        );
        super::write_body("", b"\xff\xfe{");
    }
}
