//! Kong's `filter_chains` schema (`filter_chains.lua`, `wasm_filter.lua`)
//! and the proxy-wasm filters it may name.
//!
//! Which filters exist is only known once the binary has looked at
//! `wasm_filters_path`, so it is the one piece of process state here: the
//! binary calls [`set_wasm_filters`] once at start-up, before any
//! configuration is validated; until then Wasm is off and every filter
//! chain is refused, as Kong refuses them with `wasm = off`. Validation
//! itself stays a function of its input and that list.

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use serde_json::{json, Map, Value};

use super::field::Field;
use super::{auto_fields, formats, tags_field, EntityDef};
use crate::error::FieldError;

/// A filter's own check of its `config` (built from the `config_schema` of
/// its `<filter>.meta.json`): `Err(message)` when the value is refused.
/// It is given `null` when the config is absent, as Kong validates it.
pub type FilterConfigCheck = Arc<dyn Fn(&Value) -> Result<(), String> + Send + Sync>;

/// One installed filter, as the Wasm host found it.
#[derive(Clone)]
pub struct WasmFilterInfo {
    /// The module's file name without `.wasm`.
    pub name: String,
    /// The `config_schema` of its metadata file, as `GET
    /// /schemas/filters/{name}` shows it; `None` when it has none.
    pub config_schema: Option<Value>,
    /// The check of its `config`; `None` for Kong's default, which takes a
    /// string or nothing.
    pub check: Option<FilterConfigCheck>,
}

impl fmt::Debug for WasmFilterInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WasmFilterInfo")
            .field("name", &self.name)
            .field("config_schema", &self.config_schema)
            .field("check", &self.check.as_ref().map(|_| "registered"))
            .finish()
    }
}

/// What `set_wasm_filters` was told.
#[derive(Default)]
struct WasmFilters {
    enabled: bool,
    filters: Vec<WasmFilterInfo>,
}

static WASM: RwLock<Option<Arc<WasmFilters>>> = RwLock::new(None);

/// Called once at start-up; before it is called wasm is off. `filters` are
/// the installed filters (ignored when `enabled` is false).
pub fn set_wasm_filters(enabled: bool, filters: Vec<WasmFilterInfo>) {
    let filters = match enabled {
        true => filters,
        false => Vec::new(),
    };
    let state = Arc::new(WasmFilters { enabled, filters });
    *WASM.write().unwrap_or_else(PoisonError::into_inner) = Some(state);
}

/// Whether the node runs proxy-wasm filters (`wasm = on`).
pub fn wasm_enabled() -> bool {
    current().enabled
}

/// The installed filters' names, sorted (Kong's `filter_names`).
pub fn wasm_filter_names() -> Vec<String> {
    let mut names: Vec<String> = current().filters.iter().map(|f| f.name.clone()).collect();
    names.sort();
    names
}

/// `GET /schemas/filters/{name}`: the filter's config schema, or Kong's
/// default (a string or null) when it has none; `None` when no such filter
/// is installed. Kong pins every filter schema to draft 4.
pub fn filter_config_schema(name: &str) -> Option<Value> {
    let state = current();
    let filter = state.filters.iter().find(|f| f.name == name)?;
    Some(match &filter.config_schema {
        Some(Value::Object(schema)) => {
            let mut schema = schema.clone();
            schema.insert("$schema".into(), json!(JSON_SCHEMA_DRAFT_4));
            Value::Object(schema)
        }
        Some(other) => other.clone(),
        None => default_config_schema(),
    })
}

fn current() -> Arc<WasmFilters> {
    WASM.read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .unwrap_or_default()
}

/// Kong's name for JSON Schema draft 4 (`json_schema.DRAFT_4`).
const JSON_SCHEMA_DRAFT_4: &str = "http://json-schema.org/draft-04/schema#";

/// Kong's namespace of filter config schemas.
const FILTER_SCHEMA_NAMESPACE: &str = "proxy-wasm-filters";

/// Kong's entity error when `wasm = off`.
pub const WASM_DISABLED: &str = "wasm support is not enabled";
/// Kong's entity error when Wasm is on but no filter is installed.
pub const NO_WASM_FILTERS: &str = "no wasm filters are available";
/// Kong's error on a filter name that is not installed.
pub const NO_SUCH_FILTER: &str = "no such filter";

/// The schema of a filter without `config_schema`: a string or nothing.
fn default_config_schema() -> Value {
    json!({ "$schema": JSON_SCHEMA_DRAFT_4, "type": ["string", "null"] })
}

pub(crate) fn filter_chain() -> EntityDef {
    let mut fields = auto_fields(false);
    fields.extend([
        ("name", Field::string().unique().check(formats::utf8_name)),
        ("enabled", Field::boolean().required().default(json!(true))),
        ("route", Field::foreign("routes").unique()),
        ("service", Field::foreign("services").unique()),
        ("filters", Field::array(wasm_filter()).required().len_min(1)),
        ("tags", tags_field()),
    ]);
    EntityDef {
        fields,
        endpoint_key: Some("name"),
        shorthand: |_, _| {},
        finish: filter_chain_checks,
        entity_checks: json!([
            { "mutually_exclusive": ["service", "route"] },
            { "at_least_one_of": ["service", "route"] },
            { "custom_entity_check": { "field_sources": ["filters"], "run_with_invalid_fields": true } },
        ]),
    }
}

/// One element of `filters` (Kong's `wasm_filter` record).
fn wasm_filter() -> Field {
    Field::record(vec![
        ("name", Field::string().required().check(installed_filter)),
        ("enabled", Field::boolean().required().default(json!(true))),
        ("config", Field::json()),
    ])
}

fn installed_filter(name: &str) -> Result<(), String> {
    match current().filters.iter().any(|f| f.name == name) {
        true => Ok(()),
        false => Err(NO_SUCH_FILTER.to_string()),
    }
}

/// Kong's entity checks: exactly one of `service` and `route` (each only
/// when that field itself is valid), every filter's `config` as its filter
/// accepts it, and Wasm's status, which Kong reports even beside field
/// errors (`run_with_invalid_fields`).
fn filter_chain_checks(out: &mut Map<String, Value>, given: &Map<String, Value>, errors: &mut Vec<FieldError>) {
    let failed = |errors: &[FieldError], field: &str| {
        errors
            .iter()
            .any(|e| e.path == field || e.path.strip_prefix(field).is_some_and(|rest| rest.starts_with('.')))
    };
    let set = |field: &str| out.get(field).is_some_and(|v| !v.is_null());
    let scope_valid = !failed(errors, "route") && !failed(errors, "service");
    match (set("route"), set("service")) {
        (true, true) => errors.push(FieldError::new(
            "",
            "only one or none of these fields must be set: 'service', 'route'",
        )),
        (false, false) if scope_valid => errors.push(FieldError::new(
            "",
            "at least one of these fields must be non-empty: 'service', 'route'",
        )),
        _ => {}
    }
    let state = current();
    check_filter_configs(&state, given, errors);
    if !state.enabled {
        errors.push(FieldError::new("", WASM_DISABLED));
    } else if state.filters.is_empty() {
        errors.push(FieldError::new("", NO_WASM_FILTERS));
    }
}

/// Each filter's `config` checked by its filter, read from the input as
/// given so that one bad filter does not hide another's errors. A filter
/// named but not installed gets Kong's default check, as in Kong.
fn check_filter_configs(state: &WasmFilters, given: &Map<String, Value>, errors: &mut Vec<FieldError>) {
    let Some(Value::Array(filters)) = given.get("filters") else {
        return;
    };
    for (index, filter) in filters.iter().enumerate() {
        let Some(name) = filter.get("name").and_then(Value::as_str) else {
            continue;
        };
        let config = filter.get("config").unwrap_or(&Value::Null);
        let check = state
            .filters
            .iter()
            .find(|f| f.name == name)
            .and_then(|f| f.check.as_ref());
        let outcome = match check {
            Some(check) => check(config),
            None => string_or_null(config),
        };
        if let Err(message) = outcome {
            errors.push(FieldError::new(format!("filters[{index}].config"), message));
        }
    }
}

/// Kong's default filter config check (`{type: ["string", "null"]}`),
/// worded as Kong's JSON schema validator words it.
fn string_or_null(config: &Value) -> Result<(), String> {
    let got = match config {
        Value::String(_) | Value::Null => return Ok(()),
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    Err(format!("wrong type: expected one of string, null, got {got}"))
}

/// What `/schemas/filter_chains` adds to the static description: the
/// filter names installed now (Kong's `one_of` with its error) and how a
/// filter's `config` is validated (Kong's `json_schema`).
pub(crate) fn describe_filter_chain(schema: &mut Value) {
    let Some(fields) = schema
        .get_mut("fields")
        .and_then(Value::as_array_mut)
        .and_then(|fields| fields.iter_mut().find_map(|f| f.get_mut("filters")))
        .and_then(|filters| filters.get_mut("elements"))
        .and_then(|elements| elements.get_mut("fields"))
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    // No filter installed: no `one_of` (an empty list would describe a
    // field no value fits, which generated clients take literally).
    let names = wasm_filter_names();
    for field in fields.iter_mut() {
        if let Some(name) = field.get_mut("name").and_then(Value::as_object_mut) {
            if !names.is_empty() {
                name.insert("one_of".into(), json!(names));
            }
            name.insert("err".into(), json!(NO_SUCH_FILTER));
        }
        if let Some(config) = field.get_mut("config").and_then(Value::as_object_mut) {
            config.insert("required".into(), json!(false));
            config.insert(
                "json_schema".into(),
                json!({
                    "parent_subschema_key": "name",
                    "namespace": FILTER_SCHEMA_NAMESPACE,
                    "optional": true,
                    "default": default_config_schema(),
                }),
            );
        }
    }
}

/// Tests that change the installed filters hold this, so that tests
/// running in parallel see the list they set.
#[cfg(test)]
pub(crate) fn test_guard() -> std::sync::MutexGuard<'static, ()> {
    static GUARD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    GUARD.lock().unwrap_or_else(PoisonError::into_inner)
}
