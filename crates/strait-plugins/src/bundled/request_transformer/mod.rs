//! `request-transformer` (Kong priority 801): remove, rename, replace, add
//! and append headers, query arguments and form or JSON body fields, in that
//! order; change the method and the path. Values may use
//! [`Template`] lookups.

mod schema;

/// `request-transformer` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "request-transformer",
    priority: 801,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(RequestTransformer::from_config(config)?)),
};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};
use serde_json::{Map, Value};

use crate::transform::template::Template;
use crate::body::{self, BodyKind, ParsedBody};
use crate::config::ConfigReader;
use crate::context::RequestCtx;
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::PluginError;

/// A header entry prepared when the plugin is built, so a request never
/// parses a header name or a literal value.
#[derive(Debug)]
struct HeaderEntry {
    /// None when the configured name is not a valid header name.
    name: Option<HeaderName>,
    is_host: bool,
    /// The value, when it has no template lookups.
    literal: Option<HeaderValue>,
}

impl HeaderEntry {
    fn new(name: &str, template: &Template) -> HeaderEntry {
        HeaderEntry {
            name: HeaderName::from_bytes(name.as_bytes()).ok(),
            is_host: name.eq_ignore_ascii_case("host"),
            literal: template
                .literal_text()
                .and_then(|text| HeaderValue::from_maybe_shared(Bytes::from(text)).ok()),
        }
    }

    fn value(&self, template: &Template, ctx: &RequestCtx<'_>) -> Option<HeaderValue> {
        match &self.literal {
            Some(value) => Some(value.clone()),
            None => HeaderValue::from_maybe_shared(Bytes::from(template.render(ctx))).ok(),
        }
    }
}

/// A query argument to add or append, encoded when the plugin is built.
#[derive(Debug)]
struct QueryEntry {
    /// The name, percent-encoded.
    name: String,
    /// `name=value` encoded, when the value has no template lookups.
    literal_pair: Option<String>,
}

impl QueryEntry {
    fn new(name: &str, template: &Template) -> QueryEntry {
        let encoded = crate::form::encode(name).into_owned();
        QueryEntry {
            literal_pair: template
                .literal_text()
                .map(|text| format!("{encoded}={}", crate::form::encode(&text))),
            name: encoded,
        }
    }

    /// Appends `name=value` to the query part of `joined` (from `start`).
    fn push(&self, joined: &mut String, start: usize, template: &Template, ctx: &RequestCtx<'_>) {
        if joined.len() > start && !joined.ends_with('&') {
            joined.push('&');
        }
        match &self.literal_pair {
            Some(pair) => joined.push_str(pair),
            None => {
                joined.push_str(&self.name);
                joined.push('=');
                joined.push_str(&crate::form::encode(&template.render(ctx)));
            }
        }
    }
}

/// One list of a kind (headers, querystring or body) for one operation.
#[derive(Debug, Default)]
struct Lists {
    headers: Vec<(String, Template)>,
    /// `headers`, prepared (same order).
    header_entries: Vec<HeaderEntry>,
    querystring: Vec<(String, Template)>,
    /// `querystring`, prepared (same order).
    query_entries: Vec<QueryEntry>,
    body: Vec<(String, Template)>,
}

#[derive(Debug)]
pub struct RequestTransformer {
    http_method: Option<Method>,
    remove: Lists,
    rename: Lists,
    replace: Lists,
    add: Lists,
    append: Lists,
    replace_uri: Option<Template>,
    needs_body: bool,
    /// A header it changes is named like an identity field, or a value is
    /// a template (which may read any header).
    reads_identity: bool,
}

fn entries(c: &ConfigReader<'_>, field: &str, with_value: bool) -> Result<Vec<(String, Template)>, PluginError> {
    c.strings(field)?
        .into_iter()
        .map(|entry| {
            let (name, value) = match entry.split_once(':') {
                Some((name, value)) => (name.to_string(), value.trim_start_matches(':').to_string()),
                None => (entry.clone(), String::new()),
            };
            if with_value && value.is_empty() {
                return Err(PluginError::invalid(field, format!("key '{name}' has no value")));
            }
            let template = Template::parse(&value).map_err(|m| PluginError::invalid(field, m))?;
            Ok((name, template))
        })
        .collect()
}

fn lists(config: &ConfigReader<'_>, operation: &str, with_value: bool) -> Result<Lists, PluginError> {
    let c = config.record(operation)?;
    let headers = entries(&c, "headers", with_value)?;
    let querystring = entries(&c, "querystring", with_value)?;
    Ok(Lists {
        header_entries: headers.iter().map(|(n, t)| HeaderEntry::new(n, t)).collect(),
        headers,
        query_entries: querystring.iter().map(|(n, t)| QueryEntry::new(n, t)).collect(),
        querystring,
        body: entries(&c, "body", with_value)?,
    })
}

/// Ordered key/value pairs (query strings and form bodies).
type Pairs = Vec<(String, String)>;

impl RequestTransformer {
    pub fn from_config(config: &Map<String, Value>) -> Result<RequestTransformer, PluginError> {
        let c = ConfigReader::new(config);
        let http_method = match c.string("http_method")? {
            Some(m) => Some(
                Method::from_bytes(m.to_ascii_uppercase().as_bytes())
                    .map_err(|_| PluginError::invalid("http_method", "invalid method"))?,
            ),
            None => None,
        };
        let replace_uri = match c.record("replace")?.string("uri")? {
            Some(uri) => Some(Template::parse(&uri).map_err(|m| PluginError::invalid("replace.uri", m))?),
            None => None,
        };
        let mut plugin = RequestTransformer {
            http_method,
            remove: lists(&c, "remove", false)?,
            rename: lists(&c, "rename", true)?,
            replace: lists(&c, "replace", true)?,
            add: lists(&c, "add", true)?,
            append: lists(&c, "append", true)?,
            replace_uri,
            needs_body: false,
            reads_identity: false,
        };
        let body_ops = [
            &plugin.remove,
            &plugin.rename,
            &plugin.replace,
            &plugin.add,
            &plugin.append,
        ]
        .iter()
        .any(|l| !l.body.is_empty());
        let method_moves_form = matches!(
            plugin.http_method,
            Some(Method::GET) | Some(Method::HEAD) | Some(Method::TRACE)
        );
        plugin.needs_body = body_ops || method_moves_form;
        let lists = [&plugin.remove, &plugin.rename, &plugin.replace, &plugin.add, &plugin.append];
        plugin.reads_identity = plugin.replace_uri.as_ref().is_some_and(|t| !t.is_literal())
            || lists.iter().any(|list| {
                list.headers
                    .iter()
                    .any(|(name, value)| crate::is_identity_name(name) || !value.is_literal() || value.literal_text().is_some_and(|v| crate::is_identity_name(&v)))
                    || list.querystring.iter().chain(&list.body).any(|(_, value)| !value.is_literal())
            });
        Ok(plugin)
    }

    fn transform_headers(&self, ctx: &mut RequestCtx<'_>) {
        for entry in &self.remove.header_entries {
            if let Some(name) = &entry.name {
                ctx.headers.remove(name);
            }
        }
        for (old, new) in &self.rename.headers {
            let new_name = new.render(ctx);
            let (Ok(old_name), Ok(new_name)) = (
                HeaderName::from_bytes(old.as_bytes()),
                HeaderName::from_bytes(new_name.as_bytes()),
            ) else {
                continue;
            };
            if old_name == new_name {
                continue;
            }
            let values: Vec<HeaderValue> = ctx.headers.get_all(&old_name).iter().cloned().collect();
            if values.is_empty() {
                continue;
            }
            ctx.headers.remove(&old_name);
            for value in values {
                ctx.headers.append(new_name.clone(), value);
            }
        }
        for (entry, (_, template)) in self.replace.header_entries.iter().zip(&self.replace.headers) {
            let Some(value) = entry.value(template, ctx) else {
                continue;
            };
            if entry.is_host {
                ctx.upstream_host = Some(value);
                continue;
            }
            if let Some(name) = &entry.name {
                if ctx.headers.contains_key(name) {
                    ctx.headers.insert(name.clone(), value);
                }
            }
        }
        for (entry, (_, template)) in self.add.header_entries.iter().zip(&self.add.headers) {
            let Some(name) = entry.name.as_ref().filter(|_| !entry.is_host) else {
                continue;
            };
            if let Some(literal) = &entry.literal {
                // One hash lookup: insert only when absent.
                if let http::header::Entry::Vacant(vacant) = ctx.headers.entry(name) {
                    vacant.insert(literal.clone());
                }
            } else if !ctx.headers.contains_key(name) {
                if let Some(value) = entry.value(template, ctx) {
                    ctx.headers.insert(name.clone(), value);
                }
            }
        }
        for (entry, (_, template)) in self.append.header_entries.iter().zip(&self.append.headers) {
            if let (Some(name), Some(value)) = (&entry.name, entry.value(template, ctx)) {
                ctx.headers.append(name.clone(), value);
            }
        }
    }

    /// Applies the five operations of one kind to ordered pairs; returns
    /// whether anything changed.
    fn apply(&self, ctx: &RequestCtx<'_>, pairs: &mut Pairs, pick: fn(&Lists) -> &Vec<(String, Template)>) -> bool {
        let mut changed = false;
        for (name, _) in pick(&self.remove) {
            let before = pairs.len();
            pairs.retain(|(k, _)| k != name);
            changed |= pairs.len() != before;
        }
        for (old, new) in pick(&self.rename) {
            let new = new.render(ctx);
            if *old == new {
                continue;
            }
            for pair in pairs.iter_mut().filter(|(k, _)| k == old) {
                pair.0 = new.clone();
                changed = true;
            }
        }
        for (name, template) in pick(&self.replace) {
            if let Some(first) = pairs.iter().position(|(k, _)| k == name) {
                pairs[first].1 = template.render(ctx);
                let mut index = 0;
                pairs.retain(|(k, _)| {
                    index += 1;
                    index - 1 == first || k != name
                });
                changed = true;
            }
        }
        for (name, template) in pick(&self.add) {
            if !pairs.iter().any(|(k, _)| k == name) {
                pairs.push((name.clone(), template.render(ctx)));
                changed = true;
            }
        }
        for (name, template) in pick(&self.append) {
            pairs.push((name.clone(), template.render(ctx)));
            changed = true;
        }
        changed
    }

    fn query_pairs(ctx: &RequestCtx<'_>) -> Pairs {
        crate::form::pairs(ctx.query())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    }

    fn set_query(ctx: &mut RequestCtx<'_>, pairs: &Pairs) {
        let query = crate::form::serialize(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let path = ctx.path().to_string();
        let _ = ctx.set_path_and_query(&path, &query);
    }

    fn transform_query(&self, ctx: &mut RequestCtx<'_>) {
        let lists = [&self.remove, &self.rename, &self.replace, &self.add, &self.append];
        if lists.iter().all(|l| l.querystring.is_empty()) {
            return;
        }
        let only_additions = [&self.remove, &self.rename, &self.replace]
            .iter()
            .all(|l| l.querystring.is_empty());
        if only_additions {
            // Add and append leave the arguments already there as sent:
            // the new path and query is built in one string.
            let (path, query) = (ctx.path(), ctx.query());
            let mut joined = String::with_capacity(path.len() + query.len() + 64);
            joined.push_str(path);
            joined.push('?');
            let start = joined.len();
            joined.push_str(query);
            let before = joined.len();
            let entries = self.add.querystring.iter().zip(&self.add.query_entries);
            for ((name, template), entry) in entries {
                if !crate::form::pairs(&joined[start..]).any(|(k, _)| k == name.as_str()) {
                    entry.push(&mut joined, start, template, ctx);
                }
            }
            for ((_, template), entry) in self.append.querystring.iter().zip(&self.append.query_entries) {
                entry.push(&mut joined, start, template, ctx);
            }
            if joined.len() != before {
                let _ = ctx.set_joined_path_and_query(joined);
            }
            return;
        }
        let mut pairs = Self::query_pairs(ctx);
        if self.apply(ctx, &mut pairs, |l| &l.querystring) {
            Self::set_query(ctx, &pairs);
        }
    }

    /// JSON objects take string values; a field appended to a string
    /// becomes an array, as in Kong.
    fn transform_json(&self, ctx: &RequestCtx<'_>, map: &mut Map<String, Value>, had_body: bool) -> bool {
        let mut changed = false;
        if had_body {
            for (name, _) in &self.remove.body {
                changed |= map.shift_remove(name).is_some();
            }
            for (old, new) in &self.rename.body {
                let new = new.render(ctx);
                if *old != new {
                    if let Some(value) = map.shift_remove(old) {
                        map.insert(new, value);
                        changed = true;
                    }
                }
            }
            for (name, template) in &self.replace.body {
                if map.get(name).is_some_and(|v| !v.is_null()) {
                    map.insert(name.clone(), Value::String(template.render(ctx)));
                    changed = true;
                }
            }
        }
        for (name, template) in &self.add.body {
            if map.get(name).is_none_or(Value::is_null) {
                map.insert(name.clone(), Value::String(template.render(ctx)));
                changed = true;
            }
        }
        for (name, template) in &self.append.body {
            let value = Value::String(template.render(ctx));
            let slot = map.entry(name.clone()).or_insert(Value::Null);
            *slot = match slot.take() {
                Value::Null => Value::Array(vec![value]),
                Value::Array(mut items) => {
                    items.push(value);
                    Value::Array(items)
                }
                other => Value::Array(vec![other, value]),
            };
            changed = true;
        }
        changed
    }

    fn transform_body(&self, ctx: &mut RequestCtx<'_>) -> Result<(), PluginResponse> {
        let lists = [&self.remove, &self.rename, &self.replace, &self.add, &self.append];
        if lists.iter().all(|l| l.body.is_empty()) {
            return Ok(());
        }
        let kind = body::kind_of(ctx.header("content-type"));
        let raw = ctx.body.clone().unwrap_or_default();
        let had_body = !raw.is_empty();
        let new_body = match kind {
            BodyKind::Other => return Ok(()),
            BodyKind::Json => {
                let Some(ParsedBody::Json(mut map)) = body::parse(kind, &raw) else {
                    return Err(PluginResponse::message(400, "request body is not a valid JSON object"));
                };
                self.transform_json(ctx, &mut map, had_body)
                    .then(|| Bytes::from(serde_json::to_vec(&map).unwrap_or_default()))
            }
            BodyKind::Form => {
                let Some(ParsedBody::Form(mut pairs)) = body::parse(kind, &raw) else {
                    return Err(PluginResponse::message(400, "request body is not valid form data"));
                };
                self.apply(ctx, &mut pairs, |l| &l.body).then(|| {
                    Bytes::from(crate::form::serialize(
                        pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                    ))
                })
            }
        };
        if let Some(new_body) = new_body {
            ctx.body = Some(new_body);
        }
        Ok(())
    }

    /// With the method turned into GET, HEAD or TRACE a form body moves into
    /// the query string.
    fn move_form_to_query(&self, ctx: &mut RequestCtx<'_>) {
        if body::kind_of(ctx.header("content-type")) != BodyKind::Form {
            return;
        }
        let Some(ParsedBody::Form(fields)) = ctx.body.as_deref().and_then(|b| body::parse(BodyKind::Form, b)) else {
            return;
        };
        if fields.is_empty() {
            return;
        }
        let mut pairs = Self::query_pairs(ctx);
        pairs.extend(fields);
        Self::set_query(ctx, &pairs);
    }
}

impl Plugin for RequestTransformer {
    fn name(&self) -> &'static str {
        "request-transformer"
    }

    fn priority(&self) -> i32 {
        801
    }

    fn reads_identity_fields(&self) -> bool {
        self.reads_identity
    }

    fn reads_request_body(&self) -> bool {
        self.needs_body
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        if let Some(method) = &self.http_method {
            *ctx.method = method.clone();
            if matches!(*method, Method::GET | Method::HEAD | Method::TRACE) {
                self.move_form_to_query(ctx);
            }
        }
        self.transform_headers(ctx);
        self.transform_query(ctx);
        if let Err(response) = self.transform_body(ctx) {
            return Flow::Respond(response);
        }
        if let Some(uri) = &self.replace_uri {
            let path = uri.render(ctx);
            let query = ctx.query().to_string();
            if ctx.set_path_and_query(&path, &query).is_err() {
                return Flow::Respond(PluginResponse::message(400, "transformed path is not a valid URI path"));
            }
        }
        Flow::Continue
    }
}
