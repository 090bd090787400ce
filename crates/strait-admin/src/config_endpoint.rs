//! `GET /config` and `POST /config`: replace the whole configuration
//! atomically, with Kong's semantics (201, 400 with all errors, 304 for
//! `check_hash=1` when unchanged). A rejected configuration changes nothing.

use std::borrow::Cow;
use std::sync::Arc;

use http::StatusCode;
use serde_json::{json, Value};
use strait_core::declarative::{config_to_declarative, DeclarativeFormat};
use strait_core::{parse_declarative_for, ConfigError, ConfigVersion, RouterFlavor};
use strait_proxy::compiler::ReplaceCommit;
use strait_proxy::{PublishError, SnapshotPublisher};
use strait_store::Store;

use crate::response::{empty_response, json_response, json_text_response, message, AdminResponse};
use crate::AdminState;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Invalid(ConfigError),
    #[error(transparent)]
    Publish(#[from] PublishError),
}

/// md5 hex of the configuration as received (Kong's `configuration_hash`).
pub fn input_hash(bytes: &[u8]) -> String {
    use md5::{Digest, Md5};
    Md5::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Parse, compile, commit and publish a declarative configuration: the one
/// path used by `POST /config` and by `declarative_config` at startup.
pub async fn load_declarative(
    publisher: &SnapshotPublisher,
    store: &Arc<dyn Store>,
    bytes: &[u8],
    format: DeclarativeFormat,
    flavor: RouterFlavor,
) -> Result<ConfigVersion, LoadError> {
    let now = unix_now();
    let config = Arc::new(parse_declarative_for(bytes, format, now, flavor).map_err(LoadError::Invalid)?);
    let store = store.clone();
    let hash = input_hash(bytes);
    let stored_hash = hash.clone();
    // Only what differs from the running configuration is committed when
    // that is a small part of it (see SnapshotPublisher::sync).
    let commit = Box::new(move |what: ReplaceCommit<'_>| {
        let committed = match what {
            ReplaceCommit::Whole(config) => store.replace_hashed(config, Some(&stored_hash)),
            ReplaceCommit::Changes(changes) => store.apply_hashed(changes, Some(&stored_hash)),
        };
        committed.map_err(|e| Box::new(e) as strait_proxy::compiler::CommitError)
    });
    Ok(publisher.sync(config, Some(hash), now, commit).await?)
}

pub fn get_config(state: &AdminState) -> AdminResponse {
    let snapshot = state.publisher.current().load_full();
    let document = config_to_declarative(&snapshot.config());
    let text = serde_yaml::to_string(&document).unwrap_or_default();
    json_response(StatusCode::OK, &json!({ "config": text }))
}

fn query_flag(query: Option<&str>, name: &str) -> bool {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .any(|pair| pair == name || pair == format!("{name}=1") || pair == format!("{name}=true"))
}

/// The declarative document inside a `/config` request body.
/// A plain document is the body itself, borrowed (not copied: it can be megabytes).
fn extract_document<'b>(
    content_type: &str,
    body: &'b [u8],
) -> Result<(Cow<'b, [u8]>, DeclarativeFormat), AdminResponse> {
    let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match media.as_str() {
        "" => Ok((Cow::Borrowed(body), DeclarativeFormat::Auto)),
        "application/json" => match serde_json::from_slice::<ConfigMember>(body) {
            Ok(ConfigMember(Some(Value::String(inner)))) => {
                Ok((Cow::Owned(inner.into_bytes()), DeclarativeFormat::Auto))
            }
            Ok(ConfigMember(Some(inner @ Value::Object(_)))) => {
                Ok((Cow::Owned(inner.to_string().into_bytes()), DeclarativeFormat::Json))
            }
            Ok(_) | Err(_) => Ok((Cow::Borrowed(body), DeclarativeFormat::Json)),
        },
        "application/x-yaml" | "application/yaml" | "text/yaml" | "text/x-yaml" => {
            Ok((Cow::Borrowed(body), DeclarativeFormat::Yaml))
        }
        "application/x-www-form-urlencoded" => crate::server::form_field(body, "config")
            .map(|v| (Cow::Owned(v), DeclarativeFormat::Auto))
            .ok_or_else(|| message(StatusCode::BAD_REQUEST, "expected a 'config' field")),
        "multipart/form-data" => crate::server::multipart_field(content_type, body, "config")
            .map(|v| (Cow::Owned(v), DeclarativeFormat::Auto))
            .ok_or_else(|| message(StatusCode::BAD_REQUEST, "expected a 'config' field")),
        _ => Err(message(StatusCode::UNSUPPORTED_MEDIA_TYPE, "Unsupported Content-Type")),
    }
}

/// The `config` member of a top-level JSON object (a wrapped document),
/// read without building a JSON tree of the rest: a plain declarative
/// document is only scanned here, and parsed once, by the loader.
struct ConfigMember(Option<Value>);

impl<'de> serde::Deserialize<'de> for ConfigMember {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = ConfigMember;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<ConfigMember, A::Error> {
                let mut config = None;
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "config" => config = Some(map.next_value::<Value>()?),
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(ConfigMember(config))
            }
        }
        deserializer.deserialize_map(Members)
    }
}

fn compile_error_body(error: &strait_proxy::CompileError) -> Value {
    let mut fields = serde_json::Map::new();
    for problem in &error.problems {
        fields.insert(problem.entity.clone(), Value::String(problem.message.clone()));
    }
    json!({
        "code": 14,
        "name": "invalid declarative configuration",
        "message": format!("declarative config is invalid: {error}"),
        "fields": fields,
    })
}

pub async fn post_config(state: &AdminState, content_type: &str, query: Option<&str>, body: &[u8]) -> AdminResponse {
    let (document, format) = match extract_document(content_type, body) {
        Ok(found) => found,
        Err(response) => return response,
    };
    if query_flag(query, "check_hash") && state.publisher.current().load().hash == input_hash(&document) {
        return empty_response(StatusCode::NOT_MODIFIED);
    }
    let loaded = load_declarative(&state.publisher, &state.store, &document, format, state.router_flavor).await;
    drop(document);
    // The parse's garbage, and the answer once it is sent, go back to the
    // OS shortly after; on this (the admin) thread's runtime.
    tokio::spawn(async {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        strait_proxy::background::release_memory();
    });
    match loaded {
        Ok(_) => {
            let snapshot = state.publisher.current().load_full();
            json_text_response(StatusCode::CREATED, snapshot.config_json())
        }
        Err(LoadError::Invalid(error)) => json_response(
            StatusCode::BAD_REQUEST,
            &error.to_kong_body(query_flag(query, "flatten_errors")),
        ),
        Err(LoadError::Publish(PublishError::Compile(error))) => {
            json_response(StatusCode::BAD_REQUEST, &compile_error_body(&error))
        }
        Err(LoadError::Publish(error)) => crate::response::internal_error(&error.to_string()),
    }
}
