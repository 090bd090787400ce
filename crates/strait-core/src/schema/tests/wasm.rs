use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::schema::wasm_test_guard as test_guard;

const ROUTE: &str = "6b5e5e5e-1111-4222-8333-444455556666";
const SERVICE: &str = "6b5e5e5e-1111-4222-8333-777788889999";

/// Filters `plain` (no config check) and `checked` (its config must be an
/// object with a string `header`), with wasm on.
fn install_filters() {
    let check: FilterConfigCheck = Arc::new(|config: &Value| match config.get("header") {
        Some(Value::String(_)) => Ok(()),
        _ => Err("property header is required".to_string()),
    });
    set_wasm_filters(
        true,
        vec![
            WasmFilterInfo {
                name: "plain".into(),
                config_schema: None,
                check: None,
            },
            WasmFilterInfo {
                name: "checked".into(),
                config_schema: Some(json!({"type": "object", "required": ["header"]})),
                check: Some(check),
            },
        ],
    );
}

#[test]
fn a_chain_gets_kongs_defaults_and_keeps_its_filters_config_as_given() {
    let _guard = test_guard();
    install_filters();
    let out = valid(
        EntityKind::FilterChains,
        json!({
            "name": "chain",
            "route": {"id": ROUTE},
            "filters": [
                {"name": "plain"},
                {"name": "plain", "config": "raw text", "enabled": false},
                {"name": "checked", "config": {"header": "x-a", "nested": [1, {"b": null}]}},
            ],
        }),
    );
    assert_eq!(out["enabled"], json!(true));
    assert_eq!(out["service"], Value::Null);
    assert_eq!(out["route"], json!({"id": ROUTE}));
    assert_eq!(
        out["filters"],
        json!([
            {"name": "plain", "config": null, "enabled": true},
            {"name": "plain", "config": "raw text", "enabled": false},
            {"name": "checked", "config": {"header": "x-a", "nested": [1, {"b": null}]}, "enabled": true},
        ])
    );
    assert_eq!(out["id"], json!(entity_id_for_key(EntityKind::FilterChains, "chain")));
    assert_eq!(
        (out["created_at"].as_i64(), out["updated_at"].as_i64()),
        (Some(NOW), Some(NOW))
    );
}

#[test]
fn a_chain_is_on_exactly_one_of_a_route_and_a_service() {
    let _guard = test_guard();
    install_filters();
    let filters = json!([{"name": "plain"}]);
    assert_eq!(
        invalid(
            EntityKind::FilterChains,
            json!({"route": {"id": ROUTE}, "service": {"id": SERVICE}, "filters": filters})
        ),
        vec![pair(
            "",
            "only one or none of these fields must be set: 'service', 'route'"
        )]
    );
    assert_eq!(
        invalid(EntityKind::FilterChains, json!({"filters": filters})),
        vec![pair(
            "",
            "at least one of these fields must be non-empty: 'service', 'route'"
        )]
    );
    // A scope that is itself invalid is reported as such, not as missing.
    assert_eq!(
        invalid(
            EntityKind::FilterChains,
            json!({"service": {"id": "x"}, "filters": filters})
        ),
        vec![pair("service.id", "expected a valid UUID")]
    );
    valid(
        EntityKind::FilterChains,
        json!({"service": {"id": SERVICE}, "filters": filters}),
    );
}

#[test]
fn filters_are_required_and_each_names_an_installed_filter() {
    let _guard = test_guard();
    install_filters();
    let on_route = |filters: Value| json!({"route": {"id": ROUTE}, "filters": filters});
    assert_eq!(
        invalid(EntityKind::FilterChains, json!({"route": {"id": ROUTE}})),
        vec![pair("filters", "required field missing")]
    );
    assert_eq!(
        invalid(EntityKind::FilterChains, on_route(json!([]))),
        vec![pair("filters", "length must be at least 1")]
    );
    assert_eq!(
        invalid(
            EntityKind::FilterChains,
            on_route(json!([{"name": "plain"}, {"name": "missing"}, {}, {"name": "plain", "enabled": "yes"}]))
        ),
        vec![
            pair("filters[1].name", NO_SUCH_FILTER),
            pair("filters[2].name", "required field missing"),
            pair("filters[3].enabled", "expected a boolean"),
        ]
    );
}

#[test]
fn a_filter_without_a_check_takes_a_string_or_nothing() {
    let _guard = test_guard();
    install_filters();
    let with_config = |config: Value| json!({"route": {"id": ROUTE}, "filters": [{"name": "plain", "config": config}]});
    valid(EntityKind::FilterChains, with_config(json!("{\"a\": 1}")));
    valid(EntityKind::FilterChains, with_config(Value::Null));
    for (config, got) in [
        (json!({"add": {"headers": 1234}}), "object"),
        (json!([1]), "array"),
        (json!(12), "number"),
        (json!(true), "boolean"),
    ] {
        assert_eq!(
            invalid(EntityKind::FilterChains, with_config(config)),
            vec![pair(
                "filters[0].config",
                &format!("wrong type: expected one of string, null, got {got}")
            )]
        );
    }
}

#[test]
fn a_registered_check_decides_its_filters_config_even_when_absent() {
    let _guard = test_guard();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let check: FilterConfigCheck = Arc::new(move |config: &Value| {
        seen.fetch_add(1, Ordering::SeqCst);
        match config {
            Value::Object(_) => Ok(()),
            other => Err(format!(
                "expected object, got {}",
                if other.is_null() { "null" } else { "other" }
            )),
        }
    });
    let filter = |name: &str| WasmFilterInfo {
        name: name.into(),
        config_schema: None,
        check: Some(check.clone()),
    };
    set_wasm_filters(true, vec![filter("objects")]);
    valid(
        EntityKind::FilterChains,
        json!({"service": {"id": SERVICE}, "filters": [{"name": "objects", "config": {"a": 1}}]}),
    );
    assert_eq!(
        invalid(
            EntityKind::FilterChains,
            json!({"service": {"id": SERVICE}, "filters": [{"name": "objects", "config": {}}, {"name": "objects"}]})
        ),
        vec![pair("filters[1].config", "expected object, got null")]
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[test]
fn with_wasm_off_or_no_filters_every_chain_is_refused() {
    let _guard = test_guard();
    let chain = json!({"route": {"id": ROUTE}, "filters": [{"name": "plain"}]});
    set_wasm_filters(false, Vec::new());
    assert!(!wasm_enabled());
    assert_eq!(
        invalid(EntityKind::FilterChains, chain.clone()),
        vec![pair("filters[0].name", NO_SUCH_FILTER), pair("", WASM_DISABLED)]
    );
    // Filters handed over with wasm off are not installed.
    set_wasm_filters(
        false,
        vec![WasmFilterInfo {
            name: "plain".into(),
            config_schema: None,
            check: None,
        }],
    );
    assert!(wasm_filter_names().is_empty());
    assert_eq!(
        invalid(EntityKind::FilterChains, chain.clone()),
        vec![pair("filters[0].name", NO_SUCH_FILTER), pair("", WASM_DISABLED)]
    );
    set_wasm_filters(true, Vec::new());
    assert!(wasm_enabled());
    assert_eq!(
        invalid(EntityKind::FilterChains, chain),
        vec![pair("filters[0].name", NO_SUCH_FILTER), pair("", NO_WASM_FILTERS)]
    );
}

#[test]
fn schemas_describe_the_installed_filters_and_their_config() {
    let _guard = test_guard();
    install_filters();
    let field = |name: &str| schema_field(EntityKind::FilterChains, name);
    assert_eq!(
        field("route"),
        json!({"type": "foreign", "reference": "routes", "unique": true})
    );
    let filters = field("filters");
    assert_eq!(
        (filters["required"].clone(), filters["len_min"].clone()),
        (json!(true), json!(1))
    );
    let elements = &filters["elements"]["fields"];
    assert_eq!(elements[0]["name"]["one_of"], json!(["checked", "plain"]));
    assert_eq!(elements[0]["name"]["err"], json!(NO_SUCH_FILTER));
    assert_eq!(elements[2]["config"]["type"], json!("json"));
    assert_eq!(
        elements[2]["config"]["json_schema"]["default"],
        json!({"$schema": "http://json-schema.org/draft-04/schema#", "type": ["string", "null"]})
    );
    assert_eq!(
        entity_schema_json(EntityKind::FilterChains)["entity_checks"][0],
        json!({"mutually_exclusive": ["service", "route"]})
    );
    assert_eq!(
        filter_config_schema("checked"),
        Some(json!({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object", "required": ["header"]}))
    );
    assert_eq!(
        filter_config_schema("plain"),
        Some(json!({"$schema": "http://json-schema.org/draft-04/schema#", "type": ["string", "null"]}))
    );
    assert_eq!(filter_config_schema("missing"), None);
}
