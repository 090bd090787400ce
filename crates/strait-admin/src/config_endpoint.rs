//! `GET /config` and `POST /config`: replace the whole configuration
//! atomically, with Kong's semantics (201, 400 with all errors, 304 for
//! `check_hash=1` when unchanged). A rejected configuration changes nothing.

use std::borrow::Cow;
use std::sync::Arc;

use http::StatusCode;
use serde_json::{json, Value};
use strait_core::declarative::parse_declarative_changes;
use strait_core::declarative::{config_to_declarative, top_level_member, DeclarativeFormat, Member};
use strait_core::{parse_declarative_memo, ConfigError, ConfigVersion, Memo, Parsed, RouterFlavor};
use strait_snapshot::compiler::{Part, ReplaceCommit, ReplaceCommitFn};
use strait_snapshot::{PublishError, SnapshotPublisher};
use strait_store::Store;

use crate::response::{empty_response, json_response, message, AdminResponse};
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
/// `memo`: what the last accepted document held (see
/// `strait_core::declarative::Memo`), replaced by this one's; when it
/// still describes the running configuration, a document that differs
/// from it in a few items is parsed and applied as those changes only.
pub async fn load_declarative(
    publisher: &SnapshotPublisher,
    store: &Arc<dyn Store>,
    memo: &mut Option<Memo>,
    bytes: &[u8],
    format: DeclarativeFormat,
    flavor: RouterFlavor,
) -> Result<ConfigVersion, LoadError> {
    let node = Node {
        publisher,
        store,
        flavor,
    };
    match load_with_memo(node, memo, bytes, format, Load::Any { hash: None }).await? {
        Loaded::Version(version) => Ok(version),
        Loaded::NotChanges { .. } => unreachable!("a load of any kind decides"),
    }
}

/// Where a load is applied: the compiler, the store, the node's router flavor.
#[derive(Clone, Copy)]
struct Node<'a> {
    publisher: &'a SnapshotPublisher,
    store: &'a Arc<dyn Store>,
    flavor: RouterFlavor,
}

/// What a load may do.
enum Load {
    /// Parse and apply the document whichever way; `hash`: its md5 when
    /// already known.
    Any { hash: Option<String> },
    /// Only apply it as changes to the memorized document (a JSON document
    /// `POST /config` has not yet looked into).
    ChangesOnly,
}

enum Loaded {
    Version(ConfigVersion),
    /// The document is not the memorized one with a few changes; its md5.
    NotChanges {
        hash: String,
    },
}

async fn load_with_memo(
    node: Node<'_>,
    memo: &mut Option<Memo>,
    bytes: &[u8],
    format: DeclarativeFormat,
    how: Load,
) -> Result<Loaded, LoadError> {
    let now = unix_now();
    let running = node.publisher.current().load().version;
    let mut last = memo.take().filter(|memo| memo.version() == running);
    match load(node, &mut last, bytes, format, now, how).await {
        Ok((Loaded::Version(version), next)) => {
            *memo = next;
            Ok(Loaded::Version(version))
        }
        // A load that failed, or did not happen, changed nothing: the memo
        // still holds.
        Ok((not_changes, _)) => {
            *memo = last;
            Ok(not_changes)
        }
        Err(error) => {
            *memo = last;
            Err(error)
        }
    }
}

/// [`load_declarative`] once the memo is checked: the outcome and the
/// memo of the accepted document. `last` is taken when it is advanced.
async fn load(
    node: Node<'_>,
    last: &mut Option<Memo>,
    bytes: &[u8],
    format: DeclarativeFormat,
    now: i64,
    how: Load,
) -> Result<(Loaded, Option<Memo>), LoadError> {
    let Node {
        publisher,
        store,
        flavor,
    } = node;
    let started = std::time::Instant::now();
    // The input's md5 (Kong's `configuration_hash`) is taken beside the
    // parse, on a second thread: for a re-post parsed as its changes it
    // costs as much as the parse.
    let (known, changes_only) = match how {
        Load::Any { hash } => (hash, false),
        Load::ChangesOnly => (None, true),
    };
    let (hash, parsed) = std::thread::scope(|scope| {
        let hashing = known.is_none().then(|| scope.spawn(|| input_hash(bytes)));
        let parsed = match changes_only {
            false => Some(parse_declarative_memo(bytes, format, now, flavor, last.as_ref())),
            true => last
                .as_ref()
                .and_then(|memo| parse_declarative_changes(bytes, now, flavor, memo))
                .map(|changes| Ok(Parsed::Changes(changes))),
        };
        let hash = match hashing {
            Some(hashing) => hashing.join().unwrap_or_else(|_| input_hash(bytes)),
            None => known.unwrap_or_default(),
        };
        (hash, parsed)
    });
    let Some(parsed) = parsed else {
        return Ok((Loaded::NotChanges { hash }, None));
    };
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        bytes = bytes.len(),
        as_changes = matches!(parsed, Ok(Parsed::Changes(_))),
        "declarative configuration parsed"
    );
    let parsed = parsed.map_err(LoadError::Invalid)?;
    let (config, next) = match parsed {
        Parsed::Changes(changes) => {
            let base = last.as_ref().map_or(0, Memo::version);
            let part = Part {
                base,
                upserts: changes.part,
                gone: changes.gone,
                hash: Some(hash.clone()),
                generated: now,
            };
            match publisher.sync_part(part, committer(store, &hash)).await {
                Ok(version) => {
                    let next = last.take().map(|last| last.advance(changes.plan, version));
                    return Ok((Loaded::Version(version), next));
                }
                // Whatever stopped the changes (another version running, a
                // compile or commit error), the whole path decides.
                Err(error) => {
                    tracing::info!(%error, "applying /config as changes failed; applying it whole");
                    match parse_declarative_memo(bytes, format, now, flavor, None).map_err(LoadError::Invalid)? {
                        Parsed::Whole(config, next) => (config, next),
                        Parsed::Changes(_) => unreachable!("no memo, no changes"),
                    }
                }
            }
        }
        Parsed::Whole(config, next) => (config, next),
    };
    let version = publisher
        .sync(Arc::new(config), Some(hash.clone()), now, committer(store, &hash))
        .await?;
    Ok((Loaded::Version(version), next.map(|next| next.at(version))))
}

/// The commit step of a replacement: the whole configuration or only its
/// changes, stored with the input's hash.
fn committer(store: &Arc<dyn Store>, hash: &str) -> ReplaceCommitFn {
    let store = store.clone();
    let hash = hash.to_string();
    Box::new(move |what: ReplaceCommit<'_>| {
        let committed = match what {
            ReplaceCommit::Whole(config) => store.replace_hashed(config, Some(&hash)),
            ReplaceCommit::Changes { base, changes } => store.apply_hashed_at(base, changes, Some(&hash)),
        };
        committed.map_err(|e| Box::new(e) as strait_snapshot::compiler::CommitError)
    })
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
        // A plain document (no top-level `config`) is recognized by a scan
        // of its structure; a wrapped one is decoded to take its member.
        "application/json" if top_level_member(body, "config") == Member::Absent => {
            Ok((Cow::Borrowed(body), DeclarativeFormat::Json))
        }
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

/// Loads the document a `POST /config` body holds. A JSON body is first
/// tried as changes to the memorized document: when that applies, the body
/// is a plain document (the memo's, whose top-level members it shares, has
/// no `config` member) and it was never decoded; else it is taken apart as
/// Kong does (a wrapped `config` member, forms, YAML) and loaded.
async fn load_posted(
    state: &AdminState,
    memo: &mut Option<Memo>,
    content_type: &str,
    check_hash: bool,
    body: &[u8],
) -> Result<Result<ConfigVersion, LoadError>, AdminResponse> {
    let node = Node {
        publisher: &state.publisher,
        store: &state.store,
        flavor: state.router_flavor,
    };
    let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let mut known_hash = None;
    if media == "application/json" && !check_hash {
        match load_with_memo(node, memo, body, DeclarativeFormat::Json, Load::ChangesOnly).await {
            Ok(Loaded::Version(version)) => return Ok(Ok(version)),
            Ok(Loaded::NotChanges { hash }) => known_hash = Some(hash),
            Err(error) => return Ok(Err(error)),
        }
    }
    let (document, format) = extract_document(content_type, body)?;
    // The md5 taken above is the document's when it is the body itself.
    let hash = known_hash.filter(|_| matches!(document, Cow::Borrowed(_)));
    if check_hash && state.publisher.current().load().hash == input_hash(&document) {
        return Err(empty_response(StatusCode::NOT_MODIFIED));
    }
    let loaded = load_with_memo(node, memo, &document, format, Load::Any { hash }).await;
    Ok(loaded.map(|loaded| match loaded {
        Loaded::Version(version) => version,
        Loaded::NotChanges { .. } => unreachable!("a load of any kind decides"),
    }))
}

fn compile_error_body(error: &strait_snapshot::CompileError) -> Value {
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
    let check_hash = query_flag(query, "check_hash");
    // Configuration writes are serialized (`AdminState::writes`): the memo
    // is taken for this request and put back after it.
    let mut memo = state.declarative_memo().take();
    let loaded = load_posted(state, &mut memo, content_type, check_hash, body).await;
    *state.declarative_memo() = memo;
    let loaded = match loaded {
        Ok(loaded) => loaded,
        Err(response) => return response,
    };
    // The parse's garbage, and the answer once it is sent, go back to the
    // OS shortly after; on this (the admin) thread's runtime.
    tokio::spawn(async {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        strait_runtime::background::release_memory();
    });
    match loaded {
        Ok(_) => {
            // Every entity: written while it is sent, never whole in memory.
            let snapshot = state.publisher.current().load_full();
            crate::body::json_written(StatusCode::CREATED, move |out| {
                snapshot.write_config_json(out).map(|_| ())
            })
            .await
        }
        Err(LoadError::Invalid(error)) => json_response(
            StatusCode::BAD_REQUEST,
            &error.to_kong_body(query_flag(query, "flatten_errors")),
        ),
        Err(LoadError::Publish(PublishError::Compile(error))) => {
            json_response(StatusCode::BAD_REQUEST, &compile_error_body(&error))
        }
        Err(LoadError::Publish(error)) => crate::response::failure(&error),
    }
}
