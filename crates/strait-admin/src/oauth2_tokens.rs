//! `/oauth2_tokens`: Kong's token migration API, over the node's token
//! store (runtime data, not configuration: no write lock, no config
//! version, nothing recompiled). `{key}` is a token's id or its access
//! token, as Kong's `endpoint_key`.

use http::{Method, StatusCode};
use serde_json::{json, Map, Value};
use strait_core::{EntityKind, FieldError};
use strait_runtime::oauth2::{self as store, OauthToken, TokenStore, TokenStoreError};
use uuid::Uuid;

use crate::crud::body::parse_body;
use crate::crud::pagination::parse_args;
use crate::errors::{foreign_key_violation, kong_error, schema_violation, unique_violation};
use crate::request::AdminRequest;
use crate::response::{empty_response, failure, internal_error, json_response, not_found, AdminResponse};
use crate::AdminState;

/// Kong's JSON of a token (`ttl`: the seconds the row has left, when it has
/// a TTL).
fn token_json(token: &OauthToken) -> Value {
    let mut out = json!({
        "id": token.id,
        "created_at": token.created_at,
        "service": token.service.map(|id| json!({ "id": id })),
        "credential": { "id": token.credential },
        "token_type": token.token_type,
        "expires_in": token.expires_in,
        "access_token": token.access_token,
        "refresh_token": token.refresh_token,
        "authenticated_userid": token.authenticated_userid,
        "scope": token.scope,
    });
    if let Some(at) = token.ttl.filter(|t| *t > 0).map(|t| token.created_at + t) {
        out["ttl"] = json!((at - store::now()).max(0));
    }
    out
}

fn no_store() -> AdminResponse {
    internal_error("this node has no OAuth2 token store")
}

fn store_failed(error: TokenStoreError) -> AdminResponse {
    match error {
        TokenStoreError::Conflict { field, value } => {
            let mut fields = Map::new();
            fields.insert(field.to_string(), json!(value));
            unique_violation(fields)
        }
        TokenStoreError::NotFound => not_found(),
        TokenStoreError::BadCursor => kong_error(StatusCode::BAD_REQUEST, 7, "invalid offset", Value::Null),
        TokenStoreError::Unavailable(detail) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({ "message": format!("the OAuth2 token store is unavailable: {detail}") }),
        ),
        TokenStoreError::Failed(detail) => internal_error(&detail),
    }
}

/// A foreign key given as `{"id": "..."}` or as the id itself.
fn foreign_id(value: &Value) -> Option<Result<Uuid, ()>> {
    let text = match value {
        Value::Null => return None,
        Value::Object(map) => match map.get("id") {
            None | Some(Value::Null) => return None,
            Some(Value::String(s)) => s.as_str(),
            Some(_) => return Some(Err(())),
        },
        Value::String(s) => s.as_str(),
        _ => return Some(Err(())),
    };
    Some(Uuid::parse_str(text).map_err(|_| ()))
}

fn integer(value: &Value) -> Option<Result<i64, ()>> {
    match value {
        Value::Null => None,
        Value::Number(n) => Some(n.as_i64().ok_or(())),
        Value::String(s) => Some(s.trim().parse().map_err(|_| ())),
        _ => Some(Err(())),
    }
}

fn text(value: &Value) -> Option<Result<String, ()>> {
    match value {
        Value::Null => None,
        Value::String(s) => Some(Ok(s.clone())),
        _ => Some(Err(())),
    }
}

/// Validate a body into a token over `base` (a PATCH's current token, or
/// `None`), with every problem listed as Kong's schema violation.
fn token_from(
    state: &AdminState,
    input: &Map<String, Value>,
    base: Option<OauthToken>,
) -> Result<OauthToken, AdminResponse> {
    let mut errors = Vec::new();
    const FIELDS: &[&str] = &[
        "id",
        "created_at",
        "service",
        "credential",
        "token_type",
        "expires_in",
        "access_token",
        "refresh_token",
        "authenticated_userid",
        "scope",
        "ttl",
    ];
    for name in input.keys() {
        if !FIELDS.contains(&name.as_str()) {
            errors.push(FieldError::new(name.as_str(), "unknown field"));
        }
    }
    let get = |name: &str| input.get(name).unwrap_or(&Value::Null);
    let uuid_field = |name: &str, errors: &mut Vec<FieldError>| match foreign_id(get(name)) {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(())) => {
            errors.push(FieldError::new(name, "expected a valid UUID"));
            None
        }
    };
    let service = uuid_field("service", &mut errors);
    let credential = uuid_field("credential", &mut errors);
    let id = match get("id") {
        Value::Null => None,
        Value::String(s) => match Uuid::parse_str(s) {
            Ok(id) => Some(id),
            Err(_) => {
                errors.push(FieldError::new("id", "expected a valid UUID"));
                None
            }
        },
        _ => {
            errors.push(FieldError::new("id", "expected a string"));
            None
        }
    };
    let int_field = |name: &str, errors: &mut Vec<FieldError>| match integer(get(name)) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(())) => {
            errors.push(FieldError::new(name, "expected an integer"));
            None
        }
    };
    let expires_in = int_field("expires_in", &mut errors);
    let created_at = int_field("created_at", &mut errors);
    let ttl = int_field("ttl", &mut errors);
    if ttl.is_some_and(|t| !(0..=100_000_000).contains(&t)) {
        errors.push(FieldError::new("ttl", "value should be between 0 and 100000000"));
    }
    let text_field = |name: &str, errors: &mut Vec<FieldError>| match text(get(name)) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(())) => {
            errors.push(FieldError::new(name, "expected a string"));
            None
        }
    };
    let token_type = text_field("token_type", &mut errors);
    let access_token = text_field("access_token", &mut errors);
    let refresh_token = text_field("refresh_token", &mut errors);
    let authenticated_userid = text_field("authenticated_userid", &mut errors);
    let scope = text_field("scope", &mut errors);
    if token_type.as_deref().is_some_and(|t| t != "bearer") {
        errors.push(FieldError::new("token_type", "expected one of: bearer"));
    }
    let patch = base.is_some();
    let given = |name: &str| input.contains_key(name);
    let mut token = base.unwrap_or_else(|| OauthToken {
        id: id.unwrap_or_else(Uuid::new_v4),
        created_at: store::now(),
        service: None,
        credential: Uuid::nil(),
        token_type: "bearer".into(),
        expires_in: 0,
        access_token: String::new(),
        refresh_token: None,
        authenticated_userid: None,
        scope: None,
        ttl: None,
    });
    if !patch && credential.is_none() {
        errors.push(FieldError::new("credential", "required field missing"));
    }
    if !patch && expires_in.is_none() {
        errors.push(FieldError::new("expires_in", "required field missing"));
    }
    if !errors.is_empty() {
        return Err(schema_violation(errors));
    }
    if let Some(credential) = credential {
        token.credential = credential;
    }
    if given("service") {
        token.service = service;
    }
    if let Some(expires_in) = expires_in {
        token.expires_in = expires_in;
    }
    if let Some(created_at) = created_at {
        token.created_at = created_at;
    }
    if given("ttl") {
        token.ttl = ttl.filter(|t| *t > 0);
    }
    if let Some(access_token) = access_token {
        token.access_token = access_token;
    }
    if token.access_token.is_empty() {
        token.access_token = store::random_token();
    }
    if given("refresh_token") {
        token.refresh_token = refresh_token;
    }
    if given("authenticated_userid") {
        token.authenticated_userid = authenticated_userid;
    }
    if given("scope") {
        token.scope = scope;
    }
    // Foreign keys name configuration that exists.
    match state.store.get(EntityKind::Oauth2Credentials, token.credential) {
        Ok(Some(_)) => {}
        Ok(None) => {
            return Err(foreign_key_violation(
                "credential",
                EntityKind::Oauth2Credentials,
                token.credential,
            ))
        }
        Err(error) => return Err(failure(&error)),
    }
    if let Some(service) = token.service {
        match state.store.get(EntityKind::Services, service) {
            Ok(Some(_)) => {}
            Ok(None) => return Err(foreign_key_violation("service", EntityKind::Services, service)),
            Err(error) => return Err(failure(&error)),
        }
    }
    Ok(token)
}

/// The token `key` names: an id, or else an access token.
async fn find(tokens: &dyn TokenStore, key: &str) -> Result<Option<OauthToken>, TokenStoreError> {
    if let Ok(id) = Uuid::parse_str(key) {
        if let Some(token) = tokens.token_by_id(id).await? {
            return Ok(Some(token));
        }
    }
    tokens.token_by_access(key).await
}

/// `GET|POST /oauth2_tokens`.
pub async fn collection(state: &AdminState, request: &AdminRequest) -> AdminResponse {
    let Some(tokens) = store::installed() else {
        return no_store();
    };
    if request.method == Method::POST {
        let input = match parse_body(request) {
            Ok((input, _)) => input,
            Err(response) => return response,
        };
        let token = match token_from(state, &input, None) {
            Ok(token) => token,
            Err(response) => return response,
        };
        // Keys the client did not give were drawn here.
        let drawn = store::Drawn {
            id: !input.contains_key("id"),
            access_token: input
                .get("access_token")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty),
            refresh_token: false,
        };
        return match tokens.insert_drawn_token(token.clone(), drawn).await {
            Ok(()) => json_response(StatusCode::CREATED, &token_json(&token)),
            Err(error) => store_failed(error),
        };
    }
    let args = match parse_args(&request.query) {
        Ok(args) => args,
        Err(response) => return response,
    };
    match tokens.list_tokens(args.after.as_deref(), args.size).await {
        Ok(page) => {
            let data: Vec<Value> = page.tokens.iter().map(token_json).collect();
            let (next, offset) = match &page.next {
                Some(cursor) => (json!(args.next_link("/oauth2_tokens", cursor)), json!(cursor)),
                None => (Value::Null, Value::Null),
            };
            let mut body = json!({ "data": data, "next": next });
            if !offset.is_null() {
                body["offset"] = offset;
            }
            json_response(StatusCode::OK, &body)
        }
        Err(error) => store_failed(error),
    }
}

/// `GET|PATCH|PUT|DELETE /oauth2_tokens/{id or access_token}`.
pub async fn entity(state: &AdminState, key: &str, request: &AdminRequest) -> AdminResponse {
    let Some(tokens) = store::installed() else {
        return no_store();
    };
    let tokens: &dyn TokenStore = &**tokens;
    let existing = match find(tokens, key).await {
        Ok(existing) => existing,
        Err(error) => return store_failed(error),
    };
    match request.method {
        Method::GET | Method::HEAD => match existing {
            Some(token) => json_response(StatusCode::OK, &token_json(&token)),
            None => not_found(),
        },
        Method::DELETE => match existing {
            Some(token) => match tokens.delete_token(token.id).await {
                Ok(_) => empty_response(StatusCode::NO_CONTENT),
                Err(error) => store_failed(error),
            },
            None => empty_response(StatusCode::NO_CONTENT),
        },
        Method::PATCH => {
            let Some(current) = existing else { return not_found() };
            let input = match parse_body(request) {
                Ok((input, _)) => input,
                Err(response) => return response,
            };
            if input
                .get("id")
                .and_then(Value::as_str)
                .is_some_and(|id| id != current.id.to_string())
            {
                return schema_violation(vec![FieldError::new("id", "cannot change the id of a token")]);
            }
            let token = match token_from(state, &input, Some(current)) {
                Ok(token) => token,
                Err(response) => return response,
            };
            match tokens.replace_token(token.clone()).await {
                Ok(()) => json_response(StatusCode::OK, &token_json(&token)),
                Err(error) => store_failed(error),
            }
        }
        _ => {
            // PUT: the whole token, created or replaced, under the key.
            let mut input = match parse_body(request) {
                Ok((input, _)) => input,
                Err(response) => return response,
            };
            let id = existing.as_ref().map(|t| t.id).or_else(|| Uuid::parse_str(key).ok());
            match id {
                Some(id) => {
                    input.insert("id".into(), json!(id));
                }
                None => {
                    input.insert("access_token".into(), json!(key));
                }
            }
            let mut token = match token_from(state, &input, None) {
                Ok(token) => token,
                Err(response) => return response,
            };
            if let Some(current) = &existing {
                token.created_at = input
                    .get("created_at")
                    .and_then(Value::as_i64)
                    .unwrap_or(current.created_at);
            }
            let saved = match existing {
                Some(_) => tokens.replace_token(token.clone()).await,
                None => tokens.insert_token(token.clone()).await,
            };
            match saved {
                Ok(()) => json_response(StatusCode::OK, &token_json(&token)),
                Err(error) => store_failed(error),
            }
        }
    }
}
