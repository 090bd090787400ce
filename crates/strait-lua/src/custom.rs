//! Custom Lua plugins as Kong loads them: every name in the `plugins`
//! setting other than `bundled` is a folder `kong/plugins/<name>/` found
//! through `lua_package_path`, with `handler.lua` (`PRIORITY`, `VERSION`,
//! phase methods) and `schema.lua` (Kong's schema DSL). At start-up each is
//! loaded once in a loader state, its schema translated into a Strait
//! schema (so every write path validates its config) and its entry added
//! to the registry; the workers require the handler in their own states on
//! first use (worker.rs).

use std::sync::Arc;

use mlua::{Lua, Table, Value};
use serde_json::{Map, Value as Json};
use strait_core::schema::{kong_dsl, PluginSchema};
use strait_plugins::{BodyChunk, Flow, LogRecord, Plugin, RequestCtx, ResponseCtx, SharedStore};

use crate::functions;
use crate::pdk::{Call, Phase};
use crate::settings::LuaSettings;
use crate::worker::{self, InstanceId, Store};

/// Handler methods a custom plugin may have that this version does not
/// run: the plugin is refused at start-up rather than loaded and skipped.
const NOT_YET: [&str; 3] = ["certificate", "response", "preread"];

/// A custom plugin's definition, from its handler and schema.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Definition {
    pub name: &'static str,
    pub priority: i32,
    /// The handler's `VERSION`.
    pub version: &'static str,
    pub rewrite: bool,
    pub access: bool,
    pub header_filter: bool,
    pub body_filter: bool,
    pub log: bool,
    /// The handler's source reads the request body through the PDK.
    pub reads_body: bool,
    /// The handler's source reads `kong.router` (noted in access for the
    /// response phases).
    pub reads_router: bool,
}

/// The module paths of plugin `name`.
pub(crate) fn module(name: &str, part: &str) -> String {
    format!("kong.plugins.{name}.{part}")
}

/// Sets `package.path` (the setting first, then LuaJIT's own) and preloads
/// the Kong modules plugins require.
pub(crate) fn prepare(lua: &Lua, settings: &LuaSettings) -> mlua::Result<()> {
    let package: Table = lua.globals().get("package")?;
    let default: String = package.get("path")?;
    let path = settings.package_path.trim_end_matches(';');
    if !path.is_empty() {
        package.set("path", format!("{path};{default}"))?;
    }
    lua.load(include_str!("shims.lua")).set_name("=strait/shims.lua").exec()
}

/// Loads every custom plugin the settings name and adds it to the
/// registry. The error is Kong's: `error loading plugin schemas: on plugin
/// '<name>': <why>`.
pub fn load(settings: &LuaSettings) -> Result<(), String> {
    if settings.custom_plugins.is_empty() {
        return Ok(());
    }
    let lua = Lua::new();
    let prepared = crate::pdk::install(&lua).and_then(|tables| {
        lua.globals().set("kong", tables.kong)?;
        lua.globals().set("ngx", tables.ngx)?;
        prepare(&lua, settings)
    });
    prepared.map_err(|e| format!("preparing the loader: {e}"))?;
    for name in &settings.custom_plugins {
        let (definition, schema) =
            load_one(&lua, name).map_err(|why| format!("error loading plugin schemas: on plugin '{name}': {why}"))?;
        strait_plugins::add_versioned(
            definition.name,
            definition.priority,
            Some(definition.version),
            schema,
            Arc::new(move |config: &Map<String, Json>, _| {
                Ok(Arc::new(CustomPlugin {
                    definition,
                    id: InstanceId::new(),
                    config: Arc::new(config.clone()),
                }) as Arc<dyn Plugin>)
            }),
        );
    }
    Ok(())
}

fn load_one(lua: &Lua, name: &str) -> Result<(Definition, PluginSchema), String> {
    if strait_plugins::priority_of(name).is_some() {
        return Err("a plugin of that name is already bundled".into());
    }
    let require: mlua::Function = lua.globals().get("require").map_err(|e| e.to_string())?;
    let handler: Table = require
        .call(module(name, "handler"))
        .map_err(|e| format!("the handler did not load: {e}"))?;
    let schema: Table = require
        .call(module(name, "schema"))
        .map_err(|e| format!("the schema did not load: {e}"))?;
    let priority = match handler.get::<Value>("PRIORITY").map_err(|e| e.to_string())? {
        Value::Integer(n) => i32::try_from(n).map_err(|_| "PRIORITY is out of range".to_string())?,
        Value::Number(n) if n.fract() == 0.0 && n.abs() < 2e9 => n as i32,
        _ => return Err("handler.PRIORITY must be an integer".into()),
    };
    let version = match handler.get::<Value>("VERSION") {
        Ok(Value::String(version)) => version.to_string_lossy(),
        _ => return Err("handler.VERSION must be a string".into()),
    };
    let has = |method: &str| matches!(handler.get::<Value>(method), Ok(Value::Function(_)));
    if let Some(method) = NOT_YET.iter().find(|method| has(method)) {
        return Err(format!(
            "the handler has a {method} method: Strait runs init_worker, rewrite, access, header_filter, body_filter and log in this version"
        ));
    }
    let source = handler_source(lua, name);
    let definition = Definition {
        name: Box::leak(name.to_string().into_boxed_str()),
        priority,
        version: Box::leak(version.into_boxed_str()),
        rewrite: has("rewrite"),
        access: has("access"),
        header_filter: has("header_filter"),
        body_filter: has("body_filter"),
        log: has("log"),
        reads_body: source.as_deref().is_some_and(functions::mentions_body),
        reads_router: source.as_deref().is_some_and(functions::mentions_router),
    };
    Ok((definition, plugin_schema(&schema)?))
}

/// The handler module's source, found as `require` found it.
fn handler_source(lua: &Lua, name: &str) -> Option<String> {
    let package: Table = lua.globals().get("package").ok()?;
    let search: mlua::Function = package.get("searchpath").ok()?;
    let path: String = package.get("path").ok()?;
    let file: Option<String> = search.call((module(name, "handler"), path)).ok()?;
    std::fs::read_to_string(file?).ok()
}

/// Kong's plugin schema table as Strait's (strait-core's `kong_dsl`): the
/// table read as JSON, keeping a function's key (a `custom_validator`) so
/// the translator names what it does not support.
fn plugin_schema(schema: &Table) -> Result<PluginSchema, String> {
    kong_dsl::plugin_schema(&schema_json(&Value::Table(schema.clone()), 0)?)
}

/// A schema value as JSON: a table with only the keys 1..n is an array,
/// any other table an object; a function is `"function"`.
fn schema_json(value: &Value, depth: usize) -> Result<Json, String> {
    if depth > 32 {
        return Err("the schema nests too deep".into());
    }
    Ok(match value {
        Value::Nil => Json::Null,
        Value::Boolean(b) => Json::Bool(*b),
        Value::Integer(n) => Json::from(*n),
        Value::Number(n) => serde_json::Number::from_f64(*n).map_or(Json::Null, Json::Number),
        Value::String(text) => Json::String(text.to_string_lossy()),
        Value::Function(_) => Json::String("function".into()),
        Value::Table(table) => {
            let length = table.raw_len();
            let pairs: Vec<(Value, Value)> = table.pairs().collect::<mlua::Result<_>>().map_err(|e| e.to_string())?;
            if length > 0 && pairs.len() == length {
                let mut items = Vec::with_capacity(length);
                for at in 1..=length {
                    let item: Value = table.raw_get(at).map_err(|e| e.to_string())?;
                    items.push(schema_json(&item, depth + 1)?);
                }
                Json::Array(items)
            } else {
                let mut object = Map::new();
                for (key, item) in &pairs {
                    let key = match key {
                        Value::String(text) => text.to_string_lossy(),
                        Value::Integer(n) => n.to_string(),
                        _ => return Err("a schema table has a key that is not a string".into()),
                    };
                    object.insert(key, schema_json(item, depth + 1)?);
                }
                Json::Object(object)
            }
        }
        other => return Err(format!("a schema holds a {} value", other.type_name())),
    })
}

/// One custom plugin instance: its definition and validated config; the
/// workers hold its handler and config table.
#[derive(Debug)]
pub(crate) struct CustomPlugin {
    pub definition: Definition,
    pub id: InstanceId,
    pub config: Arc<Map<String, Json>>,
}

impl CustomPlugin {
    fn call(&self, phase: Phase, store: Store<'_>, call: Box<Call>) -> (Result<(), String>, Box<Call>) {
        worker::run_custom(self, phase, store, call)
    }
}

impl Plugin for CustomPlugin {
    fn name(&self) -> &'static str {
        self.definition.name
    }

    fn priority(&self) -> i32 {
        self.definition.priority
    }

    fn rewrites(&self) -> bool {
        self.definition.rewrite
    }

    /// Runs for a global instance only, as Kong runs rewrite handlers.
    fn rewrite(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        if !self.definition.rewrite {
            return Flow::Continue;
        }
        let call = functions::access_call(ctx, self.definition.name, Phase::Rewrite);
        let (result, call) =
            crate::scoped::with_request(ctx, |shared| self.call(Phase::Rewrite, Store::Write(shared), call));
        functions::finish_access(ctx, self.definition.name, result, call)
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let definition = &self.definition;
        let later = definition.header_filter || definition.body_filter || definition.log;
        functions::note_request(ctx, later, definition.body_filter);
        if later && definition.reads_router {
            functions::note_router(ctx);
        }
        if !definition.access {
            return Flow::Continue;
        }
        let call = functions::access_call(ctx, definition.name, Phase::Access);
        let (result, call) =
            crate::scoped::with_request(ctx, |shared| self.call(Phase::Access, Store::Write(shared), call));
        functions::finish_access(ctx, definition.name, result, call)
    }

    fn reads_request_body(&self) -> bool {
        self.definition.access && self.definition.reads_body
    }

    fn filters_headers(&self) -> bool {
        self.definition.header_filter || self.definition.body_filter
    }

    fn reads_request_headers_in_response(&self) -> bool {
        self.definition.header_filter || self.definition.body_filter || self.definition.log
    }

    fn header_filter(&self, ctx: &mut ResponseCtx<'_>) {
        functions::header_filter(
            self.definition.name,
            ctx,
            self.definition.header_filter,
            self.definition.body_filter,
            |store, call| self.call(Phase::HeaderFilter, store, call),
        );
    }

    fn filters_body(&self) -> bool {
        self.definition.body_filter
    }

    fn body_filter(&self, shared: &mut SharedStore, chunk: &mut BodyChunk) {
        functions::body_filter(self.definition.name, shared, chunk, |store, call| {
            self.call(Phase::BodyFilter, store, call)
        });
    }

    fn logs(&self) -> bool {
        self.definition.log
    }

    fn serializes(&self) -> bool {
        self.definition.log
    }

    fn log(&self, record: &LogRecord, shared: &SharedStore) {
        if !self.definition.log {
            return;
        }
        let mut call = functions::later_call(self.definition.name, Phase::Log, shared, Some(record.request));
        call.status = Some(record.status);
        call.source = Some(record.source.name());
        call.response_headers = record
            .details
            .as_ref()
            .map(|d| d.response_headers.clone())
            .unwrap_or_default();
        let (result, call) = self.call(Phase::Log, Store::Read(shared), call);
        crate::pdk::Call::put_back(call);
        if let Err(error) = result {
            functions::failed(self.definition.name, Phase::Log, &error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn translated(schema: &str) -> Result<PluginSchema, String> {
        let lua = Lua::new();
        prepare(&lua, &LuaSettings::default()).unwrap();
        let table: Table = lua.load(schema).eval().map_err(|e| e.to_string())?;
        plugin_schema(&table)
    }

    #[test]
    fn kongs_schema_dsl_becomes_strait_fields() {
        let schema = translated(
            r#"
            local typedefs = require "kong.db.schema.typedefs"
            return { name = "x", fields = {
              { consumer = typedefs.no_consumer },
              { protocols = typedefs.protocols_http },
              { config = { type = "record", fields = {
                  { header = typedefs.header_name { required = true, default = "x-a" } },
                  { mode = { type = "string", one_of = { "fast", "slow" }, default = "fast" } },
                  { tries = { type = "integer", between = { 1, 5 } } },
                  { tags = { type = "array", elements = { type = "string" }, default = {} } },
                  { limits = { type = "map", keys = { type = "string" }, values = { type = "number" } } },
                  { inner = { type = "record", fields = { { on = { type = "boolean", default = true } } } } },
              } } },
            } }
            "#,
        )
        .unwrap();
        assert!(schema.no_consumer && schema.http_only);
        let names: Vec<&str> = schema.config.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["header", "mode", "tries", "tags", "limits", "inner"]);
        let json = strait_core::schema::field::Field::record(schema.config.clone()).to_json();
        let text = json.to_string();
        for expected in [
            r#""default":"x-a""#,
            r#""one_of":["fast","slow"]"#,
            r#""between":[1,5]"#,
        ] {
            assert!(text.contains(expected), "{expected} in {text}");
        }
    }

    #[test]
    fn what_strait_cannot_check_is_refused_by_name() {
        let error = translated(
            r#"return { name = "x", fields = { { config = { type = "record", fields = {
                { code = { type = "string", custom_validator = function() return true end } },
            } } } } }"#,
        )
        .err()
        .unwrap();
        assert_eq!(error, "config.code: 'custom_validator' is not supported by Strait yet");
        let error = translated(
            r#"local typedefs = require "kong.db.schema.typedefs"
               return { name = "x", fields = { { config = typedefs.nope } } }"#,
        )
        .err()
        .unwrap();
        assert!(
            error.contains("schema typedef error: definition nope does not exist"),
            "{error}"
        );
    }
}
