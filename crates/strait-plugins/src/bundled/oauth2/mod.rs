//! `oauth2` (Kong priority 1400): Kong's OAuth 2.0 provider. The proxy
//! answers `POST …/oauth2/authorize` and `POST …/oauth2/token` itself on
//! every route the plugin runs on (authorization code with PKCE, implicit,
//! client credentials, password and refresh token grants), and every other
//! request must carry an access token it issued or that was migrated in
//! through the Admin API's `/oauth2_tokens`.
//!
//! Client applications (`oauth2_credentials`) are configuration, found by
//! `client_id` in the snapshot. Tokens and codes are runtime data in the
//! node's token store ([`strait_runtime::oauth2`]), each found by the hash
//! of its secret: saving one rebuilds nothing.

mod schema;

/// `oauth2` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "oauth2",
    priority: 1400,
    schema: schema::schema,
    build: |config, scope| Ok(std::sync::Arc::new(OAuth2::from_config(config, scope.plugin)?)),
};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use bytes::Bytes;
use http::Method;
use serde_json::{json, Map, Value};
use strait_core::Oauth2Credential;
use strait_runtime::oauth2::{self as store, AuthCode, OauthToken, TokenStore};
use uuid::Uuid;

use crate::auth::{accept_credential, set_anonymous, set_or_clear};
use crate::body;
use crate::config::ConfigReader;
use crate::context::{AuthenticatedCredential, RequestCtx};
use crate::phase::{AccessFuture, Flow, Plugin, PluginResponse};
use crate::PluginError;

mod encoding;
use encoding::{canonical_challenge, redirect_with, sha256_base64url};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pkce {
    None,
    Lax,
    Strict,
}

/// What [`OAuth2::generate_token`] makes.
enum Issue {
    /// A token without a refresh token (client credentials, implicit).
    WithoutRefresh,
    /// A token with a refresh token, when tokens expire.
    WithRefresh,
    /// A refresh of this token.
    Refreshing(Box<OauthToken>),
}

#[derive(Debug)]
pub struct OAuth2 {
    scopes: Option<Vec<String>>,
    mandatory_scope: bool,
    provision_key: String,
    token_expiration: i64,
    enable_authorization_code: bool,
    enable_implicit_grant: bool,
    enable_client_credentials: bool,
    enable_password_grant: bool,
    hide_credentials: bool,
    accept_http_if_already_terminated: bool,
    anonymous: Option<String>,
    global_credentials: bool,
    /// `auth_header_name`, parsed once (None: not a valid header name,
    /// so never present).
    auth_header: Option<http::HeaderName>,
    refresh_token_ttl: Option<i64>,
    reuse_refresh_token: bool,
    persistent_refresh_token: bool,
    pkce: Pkce,
    realm: Option<String>,
    /// The plugin entity's id (authorization codes remember their issuer).
    plugin_id: Option<Uuid>,
}

const SCOPE_HEADER: http::HeaderName = http::HeaderName::from_static("x-authenticated-scope");
const USERID_HEADER: http::HeaderName = http::HeaderName::from_static("x-authenticated-userid");
const INVALID_REDIRECT: &str =
    "Invalid redirect_uri that does not match with any redirect_uri created with the application";

/// The `redirect_uri` asked for (the application's first when none was),
/// when the application registered it.
fn registered_redirect(params: &Params, uris: &[String]) -> Option<String> {
    let wanted = params
        .get("redirect_uri")
        .or_else(|| uris.first().map(String::as_str))?;
    uris.iter().find(|u| *u == wanted).cloned()
}

/// The request's OAuth2 parameters: the query, and for POST, PUT and
/// PATCH the body over it (Kong's `retrieve_parameters`). A name given
/// more than once holds `None` (not a string).
struct Params(Vec<(String, Option<String>)>);

impl Params {
    fn of(ctx: &RequestCtx<'_>) -> Params {
        let mut params: Vec<(String, Option<String>)> = Vec::new();
        let mut add =
            |name: String, value: Option<String>, over: bool| match params.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) if over => slot.1 = value,
                Some(slot) => slot.1 = None,
                None => params.push((name, value)),
            };
        for (name, value) in crate::form::pairs(ctx.query()) {
            add(name.into_owned(), Some(value.into_owned()), false);
        }
        if matches!(*ctx.method, Method::POST | Method::PUT | Method::PATCH) {
            let kind = body::kind_of(ctx.header("content-type"));
            match ctx.body.as_deref().and_then(|b| body::parse(kind, b)) {
                Some(body::ParsedBody::Form(pairs)) => {
                    let mut seen: Vec<String> = Vec::new();
                    for (name, value) in pairs {
                        let again = seen.contains(&name);
                        if again {
                            add(name, None, true);
                        } else {
                            seen.push(name.clone());
                            add(name, Some(value), true);
                        }
                    }
                }
                Some(body::ParsedBody::Json(map)) => {
                    for (name, value) in map {
                        let value = match value {
                            Value::String(s) => Some(s),
                            Value::Null => continue,
                            Value::Number(n) => Some(n.to_string()),
                            Value::Bool(b) => Some(b.to_string()),
                            _ => None,
                        };
                        add(name, value, true);
                    }
                }
                None => {}
            }
        }
        Params(params)
    }

    /// The value of `name` when it is one string.
    fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.as_deref())
    }

    /// True when `name` was given at all (even more than once).
    fn given(&self, name: &str) -> bool {
        self.0.iter().any(|(n, _)| n == name)
    }
}

/// Kong's error parameters `{error, error_description}`.
fn error(code: &str, description: impl Into<String>) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("error".into(), json!(code));
    out.insert("error_description".into(), json!(description.into()));
    out
}

fn is_error(params: &Map<String, Value>) -> bool {
    params.contains_key("error")
}

/// Kong's answer from the OAuth2 endpoints: JSON, never cached.
fn exit(status: u16, body: &Map<String, Value>, www_authenticate: Option<String>) -> Flow {
    let mut response = PluginResponse {
        status,
        headers: vec![
            ("content-type".into(), "application/json; charset=utf-8".into()),
            ("cache-control".into(), "no-store".into()),
            ("pragma".into(), "no-cache".into()),
        ],
        body: Bytes::from(serde_json::to_vec(body).unwrap_or_default()),
    };
    if let Some(value) = www_authenticate {
        response.headers.push(("www-authenticate".into(), value));
    }
    Flow::Respond(response)
}

/// A token store failure: the request cannot be decided.
fn unavailable(error: &store::TokenStoreError) -> Flow {
    tracing::error!(%error, "oauth2: the token store failed");
    Flow::Respond(PluginResponse::message(500, "An unexpected error occurred"))
}

fn strip(text: &str) -> &str {
    text.trim()
}

impl OAuth2 {
    pub fn from_config(config: &Map<String, Value>, plugin_id: Option<Uuid>) -> Result<OAuth2, PluginError> {
        let c = ConfigReader::new(config);
        let scopes = match config.get("scopes") {
            Some(Value::Array(_)) => Some(c.strings("scopes")?),
            _ => None,
        };
        let pkce = match c.string("pkce")?.as_deref().unwrap_or("lax") {
            "none" => Pkce::None,
            "strict" => Pkce::Strict,
            _ => Pkce::Lax,
        };
        let refresh_token_ttl = c.number("refresh_token_ttl", 1_209_600.0)? as i64;
        Ok(OAuth2 {
            scopes,
            mandatory_scope: c.bool("mandatory_scope", false)?,
            provision_key: c.string("provision_key")?.unwrap_or_default(),
            token_expiration: c.number("token_expiration", 7200.0)? as i64,
            enable_authorization_code: c.bool("enable_authorization_code", false)?,
            enable_implicit_grant: c.bool("enable_implicit_grant", false)?,
            enable_client_credentials: c.bool("enable_client_credentials", false)?,
            enable_password_grant: c.bool("enable_password_grant", false)?,
            hide_credentials: c.bool("hide_credentials", false)?,
            accept_http_if_already_terminated: c.bool("accept_http_if_already_terminated", false)?,
            anonymous: c.string("anonymous")?.filter(|a| !a.is_empty()),
            global_credentials: c.bool("global_credentials", false)?,
            auth_header: http::HeaderName::from_bytes(
                c.string("auth_header_name")?
                    .unwrap_or_else(|| "authorization".into())
                    .as_bytes(),
            )
            .ok(),
            refresh_token_ttl: Some(refresh_token_ttl).filter(|t| *t > 0),
            reuse_refresh_token: c.bool("reuse_refresh_token", false)?,
            persistent_refresh_token: c.bool("persistent_refresh_token", false)?,
            pkce,
            realm: c.string("realm")?.filter(|r| !r.is_empty()),
            plugin_id,
        })
    }

    fn www_authenticate(&self, error: Option<(&str, &str)>) -> String {
        let mut params = Vec::new();
        if let Some(realm) = &self.realm {
            params.push(format!("realm=\"{realm}\""));
        }
        if let Some((code, description)) = error {
            params.push(format!("error=\"{code}\""));
            params.push(format!("error_description=\"{description}\""));
        }
        match params.is_empty() {
            true => "Bearer".into(),
            false => format!("Bearer {}", params.join(", ")),
        }
    }

    /// Kong's `check_https`: the client spoke TLS, or (when configured) a
    /// TLS terminator in front said so with one `X-Forwarded-Proto: https`.
    fn https_error(&self, ctx: &RequestCtx<'_>) -> Option<String> {
        if matches!(
            ctx.protocol,
            strait_core::Protocol::Https | strait_core::Protocol::Grpcs
        ) {
            return None;
        }
        if !self.accept_http_if_already_terminated {
            return Some("You must use HTTPS".into());
        }
        let mut values = ctx.headers.get_all("x-forwarded-proto").iter();
        match (values.next(), values.next()) {
            (Some(_), Some(_)) => Some("Only one X-Forwarded-Proto header allowed".into()),
            (Some(v), None) if v.as_bytes().eq_ignore_ascii_case(b"https") => None,
            _ => Some("You must use HTTPS".into()),
        }
    }

    /// Kong's `retrieve_scope`: the requested scopes, each one allowed.
    fn scope(&self, params: &Params) -> Result<Option<String>, Map<String, Value>> {
        let given = params.given("scope");
        match (&self.scopes, given) {
            (Some(allowed), true) => {
                let Some(scope) = params.get("scope") else {
                    return Err(error("invalid_scope", "scope must be a string"));
                };
                let mut scopes = Vec::new();
                for v in scope.split_whitespace() {
                    if !allowed.iter().any(|a| a == v) {
                        return Err(error("invalid_scope", format!("\"{v}\" is an invalid scope")));
                    }
                    scopes.push(v);
                }
                Ok(Some(scopes.join(" ")).filter(|s| !s.is_empty()))
            }
            (_, false) if self.mandatory_scope => Err(error("invalid_scope", "You must specify a scope")),
            _ => Ok(None),
        }
    }

    fn requires_pkce(&self, client: &Oauth2Credential, used_pkce: bool) -> bool {
        used_pkce
            || (client.client_type == "public" && self.pkce != Pkce::None)
            || (client.client_type == "confidential" && self.pkce == Pkce::Strict)
    }

    fn service_for(&self, ctx: &RequestCtx<'_>) -> Option<Uuid> {
        match self.global_credentials {
            true => None,
            false => ctx.service_id,
        }
    }

    /// Kong's `generate_token`: a new token (or, refreshing with
    /// `reuse_refresh_token`, the old one with a new access token).
    async fn generate_token(
        &self,
        tokens: &dyn TokenStore,
        service: Option<Uuid>,
        client: &Oauth2Credential,
        authenticated_userid: Option<String>,
        scope: Option<String>,
        issue: Issue,
    ) -> Result<Map<String, Value>, store::TokenStoreError> {
        let (disable_refresh, existing) = match issue {
            Issue::WithoutRefresh => (true, None),
            Issue::WithRefresh => (false, None),
            Issue::Refreshing(token) => (false, Some(*token)),
        };
        let ttl = match self.token_expiration > 0 {
            true => self.refresh_token_ttl,
            false => None,
        };
        let now = store::now();
        let token = match existing.filter(|_| self.reuse_refresh_token) {
            Some(mut token) => {
                token.access_token = store::random_token();
                token.expires_in = self.token_expiration;
                token.created_at = now;
                token.ttl = ttl;
                tokens.replace_token(token.clone()).await?;
                token
            }
            None => {
                let refresh_token = match !disable_refresh && self.token_expiration > 0 {
                    true => Some(store::random_token()),
                    false => None,
                };
                let token = OauthToken {
                    id: Uuid::new_v4(),
                    created_at: now,
                    service,
                    credential: client.id,
                    token_type: "bearer".into(),
                    expires_in: self.token_expiration,
                    access_token: store::random_token(),
                    refresh_token,
                    authenticated_userid,
                    scope,
                    ttl,
                };
                tokens.insert_drawn_token(token.clone(), store::Drawn::ALL).await?;
                token
            }
        };
        let mut out = Map::new();
        out.insert("access_token".into(), json!(token.access_token));
        out.insert("token_type".into(), json!("bearer"));
        if self.token_expiration > 0 {
            out.insert("expires_in".into(), json!(token.expires_in));
        }
        if let Some(refresh) = &token.refresh_token {
            out.insert("refresh_token".into(), json!(refresh));
        }
        Ok(out)
    }

    /// `POST …/oauth2/authorize`.
    async fn authorize(&self, tokens: &dyn TokenStore, ctx: &mut RequestCtx<'_>) -> Flow {
        let directory = ctx.directory;
        let service = self.service_for(ctx);
        let params = Params::of(ctx);
        let state = params.get("state").map(str::to_string);
        let mut response = Map::new();
        let mut redirect_uri: Option<String> = None;
        let mut implicit = false;
        if let Some(message) = self.https_error(ctx) {
            response = error("access_denied", message);
        } else if params.get("provision_key") != Some(self.provision_key.as_str()) {
            response = error("invalid_provision_key", "Invalid provision_key");
        } else if params.get("authenticated_userid").is_none_or(|u| strip(u).is_empty()) {
            response = error("invalid_authenticated_userid", "Missing authenticated_userid parameter");
        } else {
            let response_type = params.get("response_type");
            if !((response_type == Some("code") && self.enable_authorization_code)
                || (response_type == Some("token") && self.enable_implicit_grant))
            {
                response = error("unsupported_response_type", "Invalid response_type");
            }
            let scopes = match self.scope(&params) {
                Ok(scopes) => scopes,
                Err(e) => {
                    response = e;
                    None
                }
            };
            let client = params
                .get("client_id")
                .filter(|c| !c.is_empty())
                .and_then(|c| directory.oauth2_credential(c));
            match client.and_then(|c| c.redirect_uris.as_ref().map(|uris| (c, uris))) {
                None => response = error("invalid_client", "Invalid client authentication"),
                Some((_, uris)) => match registered_redirect(&params, uris) {
                    Some(uri) => redirect_uri = Some(uri),
                    None => {
                        response = error("invalid_request", INVALID_REDIRECT);
                        redirect_uri = uris.first().cloned();
                    }
                },
            }
            let challenge = params.get("code_challenge");
            let method = params.get("code_challenge_method");
            let mut challenge_method = None;
            if method.is_some() && challenge.is_none() {
                response = error(
                    "invalid_request",
                    "code_challenge is required when code_method is present",
                );
            } else if method.is_some_and(|m| m != "S256" && m != "s256") {
                response = error(
                    "invalid_request",
                    "code_challenge_method is not supported, must be S256",
                );
            } else if let (Some(client), None) = (client, challenge) {
                if self.requires_pkce(client, false) {
                    response = error(
                        "invalid_request",
                        format!("code_challenge is required for {} clients", client.client_type),
                    );
                }
            } else if challenge.is_some() {
                challenge_method = Some("S256".to_string());
            }
            if !is_error(&response) {
                let client = client.expect("a client when no error was found");
                if response_type == Some("code") {
                    let code = AuthCode {
                        id: Uuid::new_v4(),
                        created_at: store::now(),
                        service,
                        credential: client.id,
                        code: store::random_token(),
                        authenticated_userid: params.get("authenticated_userid").map(str::to_string),
                        scope: scopes,
                        challenge: challenge.map(canonical_challenge),
                        challenge_method,
                        plugin: self.plugin_id,
                    };
                    if let Err(e) = tokens.insert_code(code.clone()).await {
                        return unavailable(&e);
                    }
                    response.insert("code".into(), json!(code.code));
                } else {
                    let userid = params.get("authenticated_userid").map(str::to_string);
                    match self
                        .generate_token(tokens, service, client, userid, scopes, Issue::WithoutRefresh)
                        .await
                    {
                        Ok(token) => response = token,
                        Err(e) => return unavailable(&e),
                    }
                    implicit = true;
                }
            }
        }
        if let Some(state) = state {
            response.insert("state".into(), json!(state));
        }
        let status = if is_error(&response) { 400 } else { 200 };
        match redirect_uri {
            Some(uri) => {
                let mut body = Map::new();
                body.insert("redirect_uri".into(), json!(redirect_with(&uri, &response, implicit)));
                exit(status, &body, None)
            }
            None => exit(status, &response, None),
        }
    }

    /// Kong's `retrieve_client_credentials`: from the parameters, or from
    /// `Authorization: Basic` (then true).
    fn client_credentials(&self, ctx: &RequestCtx<'_>, params: &Params) -> (Option<String>, Option<String>, bool) {
        if let (Some(id), Some(secret)) = (params.get("client_id"), params.get("client_secret")) {
            return (Some(id.into()), Some(secret.into()), false);
        }
        if let Some(header) = self
            .auth_header
            .as_ref()
            .and_then(|name| ctx.headers.get(name))
            .and_then(|v| v.to_str().ok())
        {
            let rest = header.trim_start();
            let basic = rest
                .get(..5)
                .filter(|p| p.eq_ignore_ascii_case("basic"))
                .map(|_| rest[5..].trim_start());
            let decoded = basic
                .and_then(|b| STANDARD.decode(b.trim_end()).ok())
                .and_then(|b| String::from_utf8(b).ok());
            return match decoded.as_deref().and_then(|d| d.split_once(':')) {
                Some((id, secret)) => (Some(id.into()), Some(secret.into()), true),
                None => (decoded, None, true),
            };
        }
        (params.get("client_id").map(str::to_string), None, false)
    }

    /// `POST …/oauth2/token`.
    async fn issue_token(&self, tokens: &dyn TokenStore, ctx: &mut RequestCtx<'_>) -> Flow {
        let directory = ctx.directory;
        let service = self.service_for(ctx);
        let params = Params::of(ctx);
        let state = params.get("state").map(str::to_string);
        let mut response = Map::new();
        let mut unauthorized_client = false;
        if let Some(message) = self.https_error(ctx) {
            response = error("access_denied", message);
            return self.token_answer(response, state, false);
        }
        let grant_type = params.get("grant_type");
        if !(grant_type == Some("authorization_code")
            || grant_type == Some("refresh_token")
            || (self.enable_client_credentials && grant_type == Some("client_credentials"))
            || (self.enable_password_grant && grant_type == Some("password")))
        {
            response = error("unsupported_grant_type", "Invalid grant_type");
        }
        let (client_id, client_secret, from_header) = self.client_credentials(ctx, &params);
        let client = client_id
            .as_deref()
            .filter(|c| !c.is_empty())
            .and_then(|c| directory.oauth2_credential(c));
        if grant_type != Some("client_credentials") {
            match client.and_then(|c| c.redirect_uris.as_ref()) {
                Some(uris) => {
                    if registered_redirect(&params, uris).is_none() {
                        response = error("invalid_request", INVALID_REDIRECT);
                    }
                }
                None => {
                    response = error("invalid_client", "Invalid client authentication");
                    unauthorized_client = from_header;
                }
            }
        }
        if let Some(client) = client {
            if client.client_type == "confidential" {
                let secret = client_secret.as_deref().unwrap_or("");
                let authenticated =
                    match client.hash_secret || strait_core::schema::is_oauth2_secret_hash(&client.client_secret) {
                        true => strait_core::schema::oauth2_secret_verify(secret, &client.client_secret),
                        false => client_secret.is_some() && client.client_secret == secret,
                    };
                if !authenticated {
                    response = error("invalid_client", "Invalid client authentication");
                    unauthorized_client = from_header;
                }
            } else if client.client_type == "public" && client_secret.as_deref().is_some_and(|s| !strip(s).is_empty()) {
                response = error("invalid_request", "client_secret is disallowed for public clients");
            }
        }
        if !is_error(&response) {
            let flow = match grant_type {
                Some("authorization_code") => self.code_grant(tokens, service, &params, client).await,
                Some("client_credentials") => self.client_credentials_grant(tokens, service, &params, client).await,
                Some("password") => self.password_grant(tokens, service, &params, client).await,
                _ => self.refresh_grant(tokens, service, &params, client).await,
            };
            match flow {
                Ok(params) => response = params,
                Err(e) => return unavailable(&e),
            }
        }
        self.token_answer(response, state, unauthorized_client)
    }

    fn token_answer(&self, mut response: Map<String, Value>, state: Option<String>, unauthorized_client: bool) -> Flow {
        if let Some(state) = state {
            response.insert("state".into(), json!(state));
        }
        match (is_error(&response), unauthorized_client) {
            (false, _) => exit(200, &response, None),
            (true, true) => exit(401, &response, Some("Basic realm=\"OAuth2.0\"".into())),
            (true, false) => exit(400, &response, None),
        }
    }

    async fn code_grant(
        &self,
        tokens: &dyn TokenStore,
        service: Option<Uuid>,
        params: &Params,
        client: Option<&Oauth2Credential>,
    ) -> Result<Map<String, Value>, store::TokenStoreError> {
        let invalid = || error("invalid_request", "Invalid code");
        let Some(client) = client else {
            return Ok(error("invalid_client", "Invalid client authentication"));
        };
        // A code is used once: taken from the store whatever follows.
        let code = match params.get("code") {
            Some(code) => tokens.take_code(code).await?,
            None => None,
        };
        let Some(code) = code else { return Ok(invalid()) };
        if (service.is_some() && code.service != service) || code.credential != client.id {
            return Ok(invalid());
        }
        if self.requires_pkce(client, code.challenge_method.is_some()) {
            let verifier = params.get("code_verifier");
            let Some(verifier) = verifier else {
                return Ok(match params.given("code_verifier") {
                    true => error("invalid_request", "code_verifier is not a string"),
                    false => error(
                        "invalid_request",
                        "code_verifier is required for PKCE authorization requests",
                    ),
                });
            };
            if verifier.len() < 43 || verifier.len() > 128 {
                return Ok(error(
                    "invalid_request",
                    "code_verifier must be between 43 and 128 characters",
                ));
            }
            if code.challenge.as_deref() != Some(sha256_base64url(verifier).as_str()) {
                return Ok(error("invalid_grant", "Invalid code"));
            }
        }
        if self.global_credentials && code.plugin.is_some() && code.plugin != self.plugin_id {
            return Ok(invalid());
        }
        let mut out = self
            .generate_token(
                tokens,
                service,
                client,
                code.authenticated_userid,
                code.scope,
                Issue::WithRefresh,
            )
            .await?;
        out.shift_remove("state");
        Ok(out)
    }

    async fn client_credentials_grant(
        &self,
        tokens: &dyn TokenStore,
        service: Option<Uuid>,
        params: &Params,
        client: Option<&Oauth2Credential>,
    ) -> Result<Map<String, Value>, store::TokenStoreError> {
        if params.given("authenticated_userid") && params.get("provision_key") != Some(self.provision_key.as_str()) {
            return Ok(error("invalid_provision_key", "Invalid provision_key"));
        }
        let Some(client) = client else {
            return Ok(error("invalid_client", "Invalid client authentication"));
        };
        match self.scope(params) {
            Err(e) => Ok(e),
            Ok(scope) => {
                let userid = params.get("authenticated_userid").map(str::to_string);
                self.generate_token(tokens, service, client, userid, scope, Issue::WithoutRefresh)
                    .await
            }
        }
    }

    async fn password_grant(
        &self,
        tokens: &dyn TokenStore,
        service: Option<Uuid>,
        params: &Params,
        client: Option<&Oauth2Credential>,
    ) -> Result<Map<String, Value>, store::TokenStoreError> {
        if params.get("provision_key") != Some(self.provision_key.as_str()) {
            return Ok(error("invalid_provision_key", "Invalid provision_key"));
        }
        let Some(userid) = params.get("authenticated_userid").filter(|u| !strip(u).is_empty()) else {
            return Ok(error(
                "invalid_authenticated_userid",
                "Missing authenticated_userid parameter",
            ));
        };
        let Some(client) = client else {
            return Ok(error("invalid_client", "Invalid client authentication"));
        };
        match self.scope(params) {
            Err(e) => Ok(e),
            Ok(scope) => {
                self.generate_token(
                    tokens,
                    service,
                    client,
                    Some(userid.to_string()),
                    scope,
                    Issue::WithRefresh,
                )
                .await
            }
        }
    }

    async fn refresh_grant(
        &self,
        tokens: &dyn TokenStore,
        service: Option<Uuid>,
        params: &Params,
        client: Option<&Oauth2Credential>,
    ) -> Result<Map<String, Value>, store::TokenStoreError> {
        let token = match params.get("refresh_token") {
            Some(refresh) => tokens.token_by_refresh(refresh).await?,
            None => None,
        };
        let Some(token) = token.filter(|t| service.is_none() || t.service == service) else {
            return Ok(error("invalid_request", "Invalid refresh_token"));
        };
        let Some(client) = client.filter(|c| c.id == token.credential) else {
            return Ok(error("invalid_client", "Invalid client authentication"));
        };
        if let Some(scope) = &token.scope {
            let allowed = self.scopes.as_deref().unwrap_or(&[]);
            if scope.split_whitespace().any(|s| !allowed.iter().any(|a| a == s)) {
                return Ok(error("invalid_scope", "Scope mismatch"));
            }
        }
        let out = self
            .generate_token(
                tokens,
                service,
                client,
                token.authenticated_userid.clone(),
                token.scope.clone(),
                Issue::Refreshing(Box::new(token.clone())),
            )
            .await?;
        if !self.reuse_refresh_token && !self.persistent_refresh_token {
            tokens.delete_token(token.id).await?;
        }
        Ok(out)
    }

    /// The access token of the request: `<auth_header_name>: Bearer <t>`
    /// (or `Token <t>`), else the `access_token` parameter. Hidden from
    /// the upstream when `hide_credentials`.
    fn access_token(&self, ctx: &mut RequestCtx<'_>) -> Option<String> {
        let header = self
            .auth_header
            .as_ref()
            .and_then(|name| ctx.headers.get(name))
            .and_then(|v| v.to_str().ok());
        let (token, in_header) = match header {
            Some(value) => {
                let mut parts = value.split_whitespace();
                match (parts.next(), parts.next(), parts.next()) {
                    (Some(kind), Some(token), None)
                        if kind.eq_ignore_ascii_case("bearer") || kind.eq_ignore_ascii_case("token") =>
                    {
                        (Some(token.to_string()), true)
                    }
                    _ => (Some(value.to_string()), false),
                }
            }
            None => (Params::of(ctx).get("access_token").map(str::to_string), false),
        };
        if self.hide_credentials {
            if let (true, Some(name)) = (in_header, &self.auth_header) {
                ctx.headers.remove(name);
            } else {
                self.hide_parameter(ctx);
            }
        }
        token
    }

    fn hide_parameter(&self, ctx: &mut RequestCtx<'_>) {
        ctx.remove_query_arg("access_token");
        let form = body::kind_of(ctx.header("content-type")) == body::BodyKind::Form;
        if *ctx.method != Method::GET && form {
            if let Some(mut parsed) = ctx.body.as_deref().and_then(|b| body::parse(body::BodyKind::Form, b)) {
                parsed.remove("access_token");
                ctx.body = Some(parsed.encode());
            }
        }
    }

    /// Kong's `do_authentication`: Ok, or the refusal.
    async fn authenticate(&self, tokens: &dyn TokenStore, ctx: &mut RequestCtx<'_>) -> Result<(), Flow> {
        let invalid = || {
            let mut body = Map::new();
            body.insert("error".into(), json!("invalid_token"));
            body.insert(
                "error_description".into(),
                json!("The access token is invalid or has expired"),
            );
            exit(
                401,
                &body,
                Some(self.www_authenticate(Some(("invalid_token", "The access token is invalid or has expired")))),
            )
        };
        let Some(access) = self.access_token(ctx).filter(|t| !t.is_empty()) else {
            let body = error("invalid_request", "The access token is missing");
            return Err(exit(401, &body, Some(self.www_authenticate(None))));
        };
        let token = tokens.token_by_access(&access).await.map_err(|e| unavailable(&e))?;
        let Some(token) = token else { return Err(invalid()) };
        if !self.global_credentials && token.service.is_none() {
            let body = error(
                "invalid_token",
                "The access token is global, but the current plugin is configured without 'global_credentials'",
            );
            return Err(exit(
                401,
                &body,
                Some(self.www_authenticate(Some(("invalid_token", "The access token is invalid or has expired")))),
            ));
        }
        if token.service.is_some() && token.service != ctx.service_id {
            return Err(invalid());
        }
        if token.expired(store::now()) {
            return Err(invalid());
        }
        let directory = ctx.directory;
        // A token of an application since deleted authenticates no one.
        let Some(client) = directory.oauth2_credential_by_id(token.credential) else {
            return Err(invalid());
        };
        let credential = AuthenticatedCredential::new(client.id, &client.client_id, "oauth2");
        accept_credential(ctx, client.consumer.id, credential).map_err(Flow::Respond)?;
        set_or_clear(ctx, SCOPE_HEADER, token.scope.as_deref());
        set_or_clear(ctx, USERID_HEADER, token.authenticated_userid.as_deref());
        Ok(())
    }

    async fn run(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let Some(tokens) = store::installed() else {
            tracing::error!("oauth2: this node has no token store");
            return Flow::Respond(PluginResponse::message(500, "An unexpected error occurred"));
        };
        let tokens: &dyn TokenStore = &**tokens;
        let path = ctx.path();
        let trimmed = path.strip_suffix('/').unwrap_or(path);
        let endpoint = if trimmed.ends_with("/oauth2/token") {
            Some(("token", true))
        } else if trimmed.ends_with("/oauth2/authorize") {
            Some(("authorization", false))
        } else {
            None
        };
        if let Some((name, token)) = endpoint {
            if *ctx.method != Method::POST {
                let description = format!("The HTTP method {} is invalid for the {name} endpoint", ctx.method);
                let body = error("invalid_method", description.clone());
                return exit(
                    405,
                    &body,
                    Some(self.www_authenticate(Some(("invalid_method", &description)))),
                );
            }
            return match token {
                true => self.issue_token(tokens, ctx).await,
                false => self.authorize(tokens, ctx).await,
            };
        }
        match &self.anonymous {
            Some(anonymous) => {
                if ctx.credential.is_some() {
                    set_or_clear(ctx, SCOPE_HEADER, None);
                    set_or_clear(ctx, USERID_HEADER, None);
                    return Flow::Continue;
                }
                match self.authenticate(tokens, ctx).await {
                    Ok(()) => Flow::Continue,
                    Err(_) => {
                        set_or_clear(ctx, SCOPE_HEADER, None);
                        set_or_clear(ctx, USERID_HEADER, None);
                        set_anonymous(ctx, anonymous)
                    }
                }
            }
            None => match self.authenticate(tokens, ctx).await {
                Ok(()) => Flow::Continue,
                Err(flow) => flow,
            },
        }
    }
}

impl Plugin for OAuth2 {
    fn name(&self) -> &'static str {
        "oauth2"
    }

    fn priority(&self) -> i32 {
        1400
    }

    /// The endpoints' parameters and a form's `access_token` may be in the
    /// body, as in Kong.
    fn reads_request_body(&self) -> bool {
        true
    }

    fn waits(&self) -> bool {
        true
    }

    fn access_async<'a>(&'a self, ctx: &'a mut RequestCtx<'_>) -> AccessFuture<'a> {
        Box::pin(self.run(ctx))
    }
}

#[cfg(test)]
mod tests;
