//! `session` (Kong priority 1900): keeps a consumer logged in with an
//! encrypted cookie (lua-resty-session 4's format, [`cookie`]). Access
//! opens the session from the cookie (with `storage = kong` the cookie
//! holds only the header and the runtime store the rest, [`store`]), logs
//! out on request, renews or touches it, sets the `Session-*` headers and
//! authenticates as the session's consumer. The header filter saves a new
//! session when another auth plugin authenticated the request with a
//! credential the session does not hold yet.

mod cookie;
mod schema;
pub mod store;

/// `session` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "session",
    priority: 1900,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(Session::from_config(config)?)),
};

use http::header::SET_COOKIE;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{json, Map, Value};

use self::cookie::{Meta, Timeouts, HEADER_ENCODED_SIZE};
use self::store::{Old, SessionRow};
use crate::config::ConfigReader;
use crate::context::{AuthenticatedCredential, RequestCtx, ResponseCtx};
use crate::identity::IdentityField;
use crate::phase::{AccessFuture, Flow, Plugin, PluginResponse};
use crate::PluginError;

/// The `Session-*` headers (`request_headers` / `response_headers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prop {
    Id,
    Audience,
    Subject,
    Timeout,
    Idling,
    Rolling,
    Absolute,
}

impl Prop {
    fn parse(name: &str) -> Option<Prop> {
        Some(match name {
            "id" => Prop::Id,
            "audience" => Prop::Audience,
            "subject" => Prop::Subject,
            "timeout" => Prop::Timeout,
            "idling-timeout" => Prop::Idling,
            "rolling-timeout" => Prop::Rolling,
            "absolute-timeout" => Prop::Absolute,
            _ => return None,
        })
    }

    fn header(self) -> HeaderName {
        HeaderName::from_static(match self {
            Prop::Id => "session-id",
            Prop::Audience => "session-audience",
            Prop::Subject => "session-subject",
            Prop::Timeout => "session-timeout",
            Prop::Idling => "session-idling-timeout",
            Prop::Rolling => "session-rolling-timeout",
            Prop::Absolute => "session-absolute-timeout",
        })
    }
}

/// What remains of an expired cookie (lua-resty-session's expire flags).
const EXPIRED: &str = "; Expires=Thu, 01 Jan 1970 00:00:01 GMT; Max-Age=0";
/// A touch refreshes the idling offset at most once a minute.
const TOUCH_THRESHOLD: i64 = 60;

#[derive(Debug)]
pub struct Session {
    ikm: [u8; 32],
    kong_storage: bool,
    audience: String,
    limits: Timeouts,
    remember_limits: Timeouts,
    stale_ttl: i64,
    cookie_name: String,
    remember_cookie_name: String,
    /// `; Domain=...; Path=...; SameSite=...[; Secure][; HttpOnly]`.
    attributes: String,
    remember: bool,
    request_headers: Vec<Prop>,
    response_headers: Vec<Prop>,
    read_body_for_logout: bool,
    logout_methods: Vec<String>,
    logout_query_arg: String,
    logout_post_arg: String,
}

/// The session access opened (Kong's `kong.ctx.shared.authenticated_session`).
#[derive(Debug)]
struct Opened {
    meta: Meta,
    /// `[[data, audience, subject], ...]`, every audience's.
    entries: Vec<Value>,
    index: usize,
    /// Cookie storage: the ciphertext's first piece, which a touch sends again.
    initial_chunk: String,
    /// `storage = kong`: the stored row.
    row: Option<SessionRow>,
}

impl Opened {
    fn data(&self) -> Option<&Value> {
        self.entries.get(self.index)?.get(0)
    }

    fn consumer_id(&self) -> Option<&str> {
        self.data()?.get(0)?.as_str()
    }

    fn credential_id(&self) -> Option<&str> {
        self.data()?.get(1)?.as_str()
    }

    fn groups(&self) -> Option<Vec<String>> {
        let groups = self.data()?.get(2)?.as_array()?;
        Some(groups.iter().filter_map(|g| g.as_str().map(str::to_string)).collect())
    }

    fn subject(&self) -> Option<&str> {
        self.entries.get(self.index)?.get(2)?.as_str()
    }
}

fn now() -> i64 {
    strait_runtime::kv::now()
}

fn seconds(value: f64) -> i64 {
    if value.is_finite() {
        value.max(0.0) as i64
    } else {
        0
    }
}

/// The first value of cookie `name` in the request's `Cookie` headers.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            (key.trim() == name).then(|| value.trim())
        })
}

impl Session {
    pub fn from_config(config: &Map<String, Value>) -> Result<Session, PluginError> {
        let c = ConfigReader::new(config);
        let text = |field: &str, default: &str| -> Result<String, PluginError> {
            Ok(c.string(field)?.unwrap_or_else(|| default.to_string()))
        };
        let props = |field: &str| -> Result<Vec<Prop>, PluginError> {
            Ok(c.strings(field)?.iter().filter_map(|p| Prop::parse(p)).collect())
        };
        let secret = c
            .string("secret")?
            .ok_or_else(|| PluginError::invalid("secret", "required field missing"))?;
        let same_site = text("cookie_same_site", "Strict")?;
        let domain = c.string("cookie_domain")?.filter(|d| !d.is_empty() && d != "localhost");
        let mut attributes = String::new();
        if let Some(domain) = domain {
            attributes.push_str("; Domain=");
            attributes.push_str(&domain);
        }
        attributes.push_str("; Path=");
        attributes.push_str(&text("cookie_path", "/")?);
        attributes.push_str("; SameSite=");
        attributes.push_str(&same_site);
        // lua-resty-session: SameSite=None forces Secure.
        if c.bool("cookie_secure", true)? || same_site == "None" {
            attributes.push_str("; Secure");
        }
        if c.bool("cookie_http_only", true)? {
            attributes.push_str("; HttpOnly");
        }
        Ok(Session {
            ikm: cookie::ikm(&secret),
            kong_storage: text("storage", "cookie")? == "kong",
            audience: text("audience", "default")?,
            limits: Timeouts {
                idling: seconds(c.number("idling_timeout", 900.0)?),
                rolling: seconds(c.number("rolling_timeout", 3600.0)?),
                absolute: seconds(c.number("absolute_timeout", 86400.0)?),
            },
            remember_limits: Timeouts {
                idling: 0,
                rolling: seconds(c.number("remember_rolling_timeout", 604800.0)?),
                absolute: seconds(c.number("remember_absolute_timeout", 2592000.0)?),
            },
            stale_ttl: seconds(c.number("stale_ttl", 10.0)?),
            cookie_name: text("cookie_name", "session")?,
            remember_cookie_name: text("remember_cookie_name", "remember")?,
            attributes,
            remember: c.bool("remember", false)?,
            request_headers: props("request_headers")?,
            response_headers: props("response_headers")?,
            read_body_for_logout: c.bool("read_body_for_logout", false)?,
            logout_methods: match config.get("logout_methods") {
                Some(Value::Null) => Vec::new(),
                _ => {
                    let methods = c.strings("logout_methods")?;
                    if methods.is_empty() && !config.contains_key("logout_methods") {
                        vec!["POST".into(), "DELETE".into()]
                    } else {
                        methods
                    }
                }
            },
            logout_query_arg: text("logout_query_arg", "session_logout")?,
            logout_post_arg: text("logout_post_arg", "session_logout")?,
        })
    }

    fn name(&self, remember: bool) -> &str {
        if remember {
            &self.remember_cookie_name
        } else {
            &self.cookie_name
        }
    }

    /// The row's TTL of a save (lua-resty-session: the rolling timeout,
    /// capped at 400 days).
    fn ttl(&self, remember: bool) -> i64 {
        let ttl = if remember {
            self.remember_limits.rolling
        } else {
            self.limits.rolling
        };
        if ttl == 0 || ttl > cookie::MAX_TTL {
            cookie::MAX_TTL
        } else {
            ttl
        }
    }

    /// Open the session of cookie `remember` or `session`; why not.
    async fn open_one(&self, headers: &HeaderMap, remember: bool, now: i64) -> Result<Opened, String> {
        let name = self.name(remember);
        let value = cookie(headers, name).ok_or("missing session cookie")?;
        let limits = if remember { self.remember_limits } else { self.limits };
        let meta = cookie::read_header(value, &self.ikm, self.kong_storage, limits, remember, now)?;
        let (payload, initial_chunk, row) = if self.kong_storage {
            let row = store::load(&cookie::storage_key(&meta.sid))
                .await
                .map_err(|e| format!("unable to load session ({e})"))?
                .ok_or("unable to load session")?;
            let stored: Value = serde_json::from_str(&row.data).map_err(|_| "unable to json decode session")?;
            let payload = stored.get(0).and_then(Value::as_str).unwrap_or_default().to_string();
            (payload, String::new(), Some(row))
        } else {
            let count = cookie::chunks(name.len(), meta.data_size).ok_or("cookie size limit exceeded")?;
            if count == 1 {
                let start = value.len().saturating_sub(meta.data_size).max(HEADER_ENCODED_SIZE);
                let payload = value.get(start..).unwrap_or_default().to_string();
                (payload.clone(), payload, None)
            } else {
                let first = value.get(HEADER_ENCODED_SIZE..).unwrap_or_default().to_string();
                let mut payload = first.clone();
                for i in 2..=count {
                    let chunk = cookie(headers, &format!("{name}{i}")).ok_or("missing session cookie chunk")?;
                    payload.push_str(chunk);
                }
                (payload, first, None)
            }
        };
        let plain = cookie::decrypt(&meta, &self.ikm, &payload, remember)?;
        let entries: Vec<Value> = serde_json::from_slice(&plain).map_err(|_| "unable to json decode session data")?;
        let index = entries
            .iter()
            .position(|e| e.get(1).and_then(Value::as_str) == Some(self.audience.as_str()))
            .ok_or("missing session audience")?;
        Ok(Opened {
            meta,
            entries,
            index,
            initial_chunk,
            row,
        })
    }

    /// lua-resty-session's `open`: the session cookie, else (with
    /// `remember`) the persistent one, both then issued again.
    async fn open(&self, ctx: &mut RequestCtx<'_>, now: i64) -> Result<Opened, String> {
        let error = match self.open_one(ctx.headers, false, now).await {
            Ok(opened) => return Ok(opened),
            Err(error) => error,
        };
        if !self.remember || error == "missing session audience" {
            return Err(error);
        }
        let remembered = self.open_one(ctx.headers, true, now).await.map_err(|_| error)?;
        let mut cookies = Vec::new();
        if let Err(why) = self.save(&remembered, remembered.entries.clone(), true, &mut cookies, now).await {
            tracing::warn!(%why, "session: the persistent cookie was not renewed");
        }
        // A new session (created now) from the persistent one's data.
        let fresh = Opened {
            meta: Meta {
                creation_time: now,
                data_size: 0,
                flags: remembered.meta.flags & cookie::FLAG_FORGET,
                ..remembered.meta.clone()
            },
            entries: Vec::new(),
            index: remembered.index,
            initial_chunk: String::new(),
            row: None,
        };
        let opened = self.save(&fresh, remembered.entries, false, &mut cookies, now).await;
        for line in cookies {
            push_cookie(&mut ctx.response_headers, &line);
        }
        opened
    }

    /// Seal `entries` as a new session id (a renewal keeps `from`'s
    /// creation time), its cookie lines pushed on `cookies`; with
    /// `storage = kong` the row is written (the one it replaces kept
    /// `stale_ttl` seconds, or removed for a persistent session).
    async fn save(
        &self,
        from: &Opened,
        entries: Vec<Value>,
        remember: bool,
        cookies: &mut Vec<String>,
        now: i64,
    ) -> Result<Opened, String> {
        let (sealed, initial_chunk) = self.seal(Some(from), &entries, remember, cookies, now)?;
        let mut row = None;
        if self.kong_storage {
            let old = from.row.clone().map(|r| match remember {
                true => Old::Gone(r),
                false => Old::Stale(r, self.stale_ttl),
            });
            let session_id = cookie::storage_key(&sealed.sid);
            let data = json!([initial_chunk]).to_string();
            store::insert(session_id.clone(), data, self.ttl(remember), now, old)
                .await
                .map_err(|e| format!("unable to store session data ({e})"))?;
            row = store::load(&session_id).await.ok().flatten();
        }
        Ok(Opened {
            meta: sealed,
            entries,
            index: from.index,
            initial_chunk: if self.kong_storage { String::new() } else { initial_chunk },
            row,
        })
    }

    /// The cookie lines of a new session id for `entries`; the sealed
    /// header and the ciphertext (base64url).
    fn seal(
        &self,
        from: Option<&Opened>,
        entries: &[Value],
        remember: bool,
        cookies: &mut Vec<String>,
        now: i64,
    ) -> Result<(Meta, String), String> {
        let name = self.name(remember);
        let mut flags = if self.kong_storage { cookie::FLAG_STORAGE } else { 0 };
        if from.is_some_and(|f| f.meta.flags & cookie::FLAG_FORGET != 0) {
            flags |= cookie::FLAG_FORGET;
        }
        let plaintext = serde_json::to_vec(entries).map_err(|e| e.to_string())?;
        let creation = from.map(|f| f.meta.creation_time);
        let sealed = cookie::seal(&self.ikm, &plaintext, flags, creation, remember, now)?;
        let mut suffix = self.attributes.clone();
        if remember {
            let max_age = self.ttl(true);
            let expires = std::time::UNIX_EPOCH + std::time::Duration::from_secs((sealed.meta.creation_time + max_age).max(0) as u64);
            suffix.push_str(&format!("; Expires={}; Max-Age={max_age}", httpdate::fmt_http_date(expires)));
        }
        if self.kong_storage {
            cookies.push(format!("{name}={}{suffix}", sealed.header));
            return Ok((sealed.meta, sealed.payload));
        }
        let count = cookie::chunks(name.len(), sealed.payload.len()).ok_or("cookie size limit exceeded")?;
        let first_size = 4096 - HEADER_ENCODED_SIZE - name.len() - 1;
        let (first, mut rest) = if count == 1 {
            (sealed.payload.as_str(), "")
        } else {
            sealed.payload.split_at(first_size.min(sealed.payload.len()))
        };
        cookies.push(format!("{name}={}{first}{suffix}", sealed.header));
        for i in 2..=count {
            let (chunk, left) = rest.split_at((4096 - name.len() - 2).min(rest.len()));
            cookies.push(format!("{name}{i}={chunk}{suffix}"));
            rest = left;
        }
        // Chunks an earlier, bigger session used are expired.
        if let Some(old) = from.and_then(|f| cookie::chunks(name.len(), f.meta.data_size)) {
            for i in count + 1..=old {
                cookies.push(format!("{name}{i}={}{EXPIRED}", self.attributes));
            }
        }
        let first = first.to_string();
        Ok((sealed.meta, first))
    }

    /// lua-resty-session's `destroy`: expire the cookies (every chunk) and,
    /// with `storage = kong`, remove the row.
    async fn destroy(&self, opened: &Opened, ctx_headers: &HeaderMap) -> Vec<String> {
        let mut lines = Vec::new();
        let chunks = if self.kong_storage {
            1
        } else {
            cookie::chunks(self.cookie_name.len(), opened.meta.data_size).unwrap_or(1)
        };
        lines.push(format!("{}={}{EXPIRED}", self.cookie_name, self.attributes));
        for i in 2..=chunks {
            lines.push(format!("{}{i}={}{EXPIRED}", self.cookie_name, self.attributes));
        }
        if let Some(row) = &opened.row {
            if let Err(error) = store::delete(row).await {
                tracing::warn!(%error, "session: logout could not remove the stored session");
            }
        }
        if self.remember && cookie(ctx_headers, &self.remember_cookie_name).is_some() {
            lines.push(format!("{}={}{EXPIRED}", self.remember_cookie_name, self.attributes));
        }
        lines
    }

    /// Kong's `logout`: a logout method with the query argument (or, when
    /// told to read it, the body argument).
    fn wants_logout(&self, ctx: &RequestCtx<'_>) -> bool {
        let method = ctx.method.as_str();
        if !self.logout_methods.iter().any(|m| m == method) {
            return false;
        }
        if ctx.query_arg(&self.logout_query_arg).is_some() {
            return true;
        }
        if !self.read_body_for_logout || !matches!(method, "POST" | "PUT" | "PATCH" | "DELETE") {
            return false;
        }
        let Some(body) = ctx.body.as_deref() else { return false };
        let content_type = ctx.header("content-type").unwrap_or_default().to_ascii_lowercase();
        if content_type.starts_with("application/json") {
            return serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|v| v.get(&self.logout_post_arg).cloned())
                .is_some_and(|v| !matches!(v, Value::Null | Value::Bool(false)));
        }
        if content_type.starts_with("application/x-www-form-urlencoded") {
            let text = String::from_utf8_lossy(body);
            return crate::form::pairs(&text).any(|(k, _)| k == self.logout_post_arg);
        }
        false
    }

    /// A `Session-*` header's value, as lua-resty-session's `get_property`.
    fn property(&self, opened: &Opened, prop: Prop) -> Option<String> {
        let m = &opened.meta;
        let idling = (self.limits.idling > 0)
            .then(|| self.limits.idling - (m.timestamp - m.creation_time - m.rolling_offset - m.idling_offset));
        let rolling =
            (self.limits.rolling > 0).then(|| self.limits.rolling - (m.timestamp - m.creation_time - m.rolling_offset));
        let absolute = (self.limits.absolute > 0).then(|| self.limits.absolute - (m.timestamp - m.creation_time));
        Some(match prop {
            Prop::Id => cookie::storage_key(&m.sid),
            Prop::Audience => opened.entries.get(opened.index)?.get(1)?.as_str()?.to_string(),
            Prop::Subject => opened.subject()?.to_string(),
            Prop::Timeout => [idling, rolling, absolute].into_iter().flatten().min()?.to_string(),
            Prop::Idling => idling?.to_string(),
            Prop::Rolling => rolling?.to_string(),
            Prop::Absolute => absolute?.to_string(),
        })
    }

    fn property_headers<'p>(
        &'p self,
        opened: &'p Opened,
        props: &'p [Prop],
    ) -> impl Iterator<Item = (HeaderName, HeaderValue)> + 'p {
        props.iter().filter_map(move |prop| {
            let value = self.property(opened, *prop)?;
            Some((prop.header(), HeaderValue::from_str(&value).ok()?))
        })
    }

    async fn run(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let now = now();
        let mut opened = match self.open(ctx, now).await {
            Ok(opened) => opened,
            Err(why) => {
                tracing::debug!(%why, "session not present");
                return Flow::Continue;
            }
        };
        if self.wants_logout(ctx) {
            let mut response = PluginResponse {
                status: 200,
                headers: Vec::new(),
                body: bytes::Bytes::new(),
            };
            for line in self.destroy(&opened, ctx.headers).await {
                response = response.with_header("set-cookie", line);
            }
            return Flow::Respond(response);
        }
        let consumer_id = opened.consumer_id().and_then(|id| uuid::Uuid::parse_str(id).ok());
        let Some(consumer) = consumer_id.and_then(|id| ctx.directory.consumer(id)) else {
            tracing::debug!("session: its consumer is gone, destroying the session");
            for line in self.destroy(&opened, ctx.headers).await {
                push_cookie(&mut ctx.response_headers, &line);
            }
            return Flow::Continue;
        };
        // lua-resty-session's `refresh`: renewed past 3/4 of the rolling
        // timeout, else touched past the threshold.
        let m = &opened.meta;
        let rolling_elapsed = m.timestamp - m.creation_time - m.rolling_offset;
        if self.limits.rolling > 0 && rolling_elapsed > self.limits.rolling * 3 / 4 {
            let mut cookies = Vec::new();
            match self.save(&opened, opened.entries.clone(), false, &mut cookies, now).await {
                Ok(renewed) => opened = renewed,
                Err(why) => tracing::warn!(%why, "session refresh failed"),
            }
            for line in cookies {
                push_cookie(&mut ctx.response_headers, &line);
            }
        } else if self.limits.idling > 0 && rolling_elapsed - m.idling_offset > TOUCH_THRESHOLD {
            let header = cookie::touch(&mut opened.meta, &self.ikm, now);
            let line = format!("{}={header}{}{}", self.cookie_name, opened.initial_chunk, self.attributes);
            push_cookie(&mut ctx.response_headers, &line);
        }
        let request: Vec<_> = self.property_headers(&opened, &self.request_headers).collect();
        for (name, value) in request {
            ctx.headers.insert(name, value);
        }
        let response: Vec<_> = self.property_headers(&opened, &self.response_headers).collect();
        for (name, value) in response {
            ctx.response_headers.push(&name, &value);
        }
        self.authenticate(ctx, consumer, &opened);
        ctx.shared.insert(opened);
        Flow::Continue
    }

    /// Kong's session `authenticate`: the consumer, its credential (when
    /// the session holds one) and groups.
    fn authenticate<'a>(&self, ctx: &mut RequestCtx<'a>, consumer: &'a strait_core::Consumer, opened: &Opened) {
        let credential = opened
            .credential_id()
            .and_then(|id| uuid::Uuid::parse_str(id).ok())
            .map(|id| AuthenticatedCredential::new(id, &id.to_string(), "session"));
        crate::auth::set_consumer(ctx, Some(consumer), credential);
        let groups = opened.groups();
        let joined = groups.as_ref().and_then(|g| HeaderValue::from_str(&g.join(", ")).ok());
        ctx.set_identity(IdentityField::AuthenticatedGroups, joined);
        ctx.authenticated_groups = groups;
    }

    /// Kong's session header filter: a request another plugin
    /// authenticated with a credential gets a session (saved, `Set-Cookie`).
    fn save_login(&self, ctx: &mut ResponseCtx<'_>) {
        let (Some(credential), Some(consumer_id)) = (&ctx.request.credential, ctx.request.consumer_id) else {
            return;
        };
        let credential_id = credential.id.to_string();
        let consumer_id = consumer_id.to_string();
        let opened = ctx.shared.get::<Opened>();
        if opened.is_some_and(|o| {
            o.consumer_id() == Some(consumer_id.as_str()) && o.credential_id() == Some(credential_id.as_str())
        }) {
            return;
        }
        let identity = ctx.request.authenticated.as_ref();
        let subject = identity.map_or_else(|| consumer_id.clone(), |i| i.subject.clone());
        let mut data = vec![json!(consumer_id), json!(credential_id)];
        if let Some(groups) = identity.and_then(|i| i.groups.as_ref()) {
            data.push(json!(groups));
        }
        let entry = json!([data, self.audience, subject]);
        let (entries, index) = match opened {
            Some(o) => {
                let mut entries = o.entries.clone();
                entries[o.index] = entry;
                (entries, o.index)
            }
            None => (vec![entry], 0),
        };
        let now = now();
        let mut cookies = Vec::new();
        let main = match self.seal(opened, &entries, false, &mut cookies, now) {
            Ok(sealed) => sealed,
            Err(why) => {
                tracing::error!(%why, "session save failed");
                return;
            }
        };
        let mut writes = Vec::new();
        if self.kong_storage {
            let old = opened.and_then(|o| o.row.clone()).map(|r| Old::Stale(r, self.stale_ttl));
            writes.push((cookie::storage_key(&main.0.sid), main.1.clone(), self.ttl(false), old));
        }
        if self.remember {
            match self.seal(None, &entries, true, &mut cookies, now) {
                Ok((meta, payload)) if self.kong_storage => {
                    writes.push((cookie::storage_key(&meta.sid), payload, self.ttl(true), None));
                }
                Ok(_) => {}
                Err(why) => tracing::warn!(%why, "session: the persistent cookie was not saved"),
            }
        }
        for (session_id, payload, ttl, old) in writes {
            let data = json!([payload]).to_string();
            strait_runtime::kv::spawn_write("session save", async move {
                store::insert(session_id, data, ttl, now, old).await
            });
        }
        for line in cookies {
            if let Ok(value) = HeaderValue::from_str(&line) {
                ctx.headers.append(SET_COOKIE, value);
            }
        }
        let saved = Opened {
            meta: main.0,
            entries,
            index,
            initial_chunk: String::new(),
            row: None,
        };
        let headers: Vec<_> = self.property_headers(&saved, &self.response_headers).collect();
        for (name, value) in headers {
            ctx.headers.insert(name, value);
        }
    }
}

fn push_cookie(headers: &mut crate::AddedHeaders, line: &str) {
    if let Ok(value) = HeaderValue::from_str(line) {
        headers.push(&SET_COOKIE, &value);
    }
}

impl Plugin for Session {
    fn name(&self) -> &'static str {
        "session"
    }

    fn priority(&self) -> i32 {
        1900
    }

    fn waits(&self) -> bool {
        true
    }

    fn access_async<'a>(&'a self, ctx: &'a mut RequestCtx<'_>) -> AccessFuture<'a> {
        Box::pin(self.run(ctx))
    }

    fn reads_request_body(&self) -> bool {
        self.read_body_for_logout
    }

    fn filters_headers(&self) -> bool {
        true
    }

    fn reads_consumer_in_response(&self) -> bool {
        true
    }

    fn header_filter(&self, ctx: &mut ResponseCtx<'_>) {
        self.save_login(ctx);
    }
}

#[cfg(test)]
mod tests;
