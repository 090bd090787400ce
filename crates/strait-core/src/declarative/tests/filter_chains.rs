//! Filter chains in declarative files: nested under their route or
//! service like plugins, one per route and per service, and refused
//! outright while Wasm is off.

use serde_json::json;

use super::*;
use crate::schema::{set_wasm_filters, wasm_test_guard, WasmFilterInfo, WASM_DISABLED};

fn install(names: &[&str]) {
    let filters = names
        .iter()
        .map(|name| WasmFilterInfo {
            name: name.to_string(),
            config_schema: None,
            check: None,
        })
        .collect();
    set_wasm_filters(true, filters);
}

fn nested_document() -> serde_json::Value {
    json!({
        "_format_version": "3.0",
        "services": [{
            "name": "s",
            "url": "http://backend.test",
            "filter_chains": [{ "name": "on-service", "filters": [{ "name": "add-header", "config": "x-a: 1" }] }],
            "routes": [{
                "name": "r",
                "paths": ["/"],
                "filter_chains": [{ "filters": [{ "name": "add-header", "enabled": false }] }],
            }],
        }],
    })
}

#[test]
fn chains_nest_under_their_service_and_route() {
    let _guard = wasm_test_guard();
    install(&["add-header"]);
    let config = parse_json(nested_document()).unwrap();
    let service = config.services[0].id;
    let route = config.routes[0].id;
    assert_eq!(config.filter_chains.len(), 2);
    let on_service = config.filter_chains.iter().find(|c| c.service.is_some()).unwrap();
    assert_eq!(on_service.service.map(|s| s.id), Some(service));
    assert_eq!(on_service.route, None);
    assert_eq!(on_service.filters[0].config, Some(json!("x-a: 1")));
    assert_eq!(on_service.id, entity_id_for_key(EntityKind::FilterChains, "on-service"));
    let on_route = config.filter_chains.iter().find(|c| c.route.is_some()).unwrap();
    assert_eq!(on_route.route.map(|r| r.id), Some(route));
    assert!(!on_route.filters[0].enabled);
    // The same file gives the same ids, an unnamed chain's included.
    assert_eq!(parse_json(nested_document()).unwrap(), config);
    // Written flat, a chain names its route by name.
    let flat = parse_json(json!({
        "_format_version": "3.0",
        "routes": [{ "name": "r", "paths": ["/"] }],
        "filter_chains": [{ "route": "r", "filters": [{ "name": "add-header" }] }],
    }))
    .unwrap();
    assert_eq!(flat.filter_chains[0].route.map(|r| r.id), Some(flat.routes[0].id));
}

#[test]
fn a_route_takes_one_chain() {
    let _guard = wasm_test_guard();
    install(&["add-header"]);
    let error = parse_json(json!({
        "_format_version": "3.0",
        "routes": [{ "name": "r", "paths": ["/"], "filter_chains": [{ "filters": [{ "name": "add-header" }] }] }],
        "filter_chains": [{ "route": "r", "filters": [{ "name": "add-header", "config": "other" }] }],
    }))
    .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("uniqueness violation: 'filter_chains' entity with route set to"),
        "{text}"
    );
}

#[test]
fn with_wasm_off_a_chain_is_refused_with_kongs_entity_error() {
    let _guard = wasm_test_guard();
    set_wasm_filters(false, Vec::new());
    let error = parse_json(json!({
        "_format_version": "3.0",
        "services": [{
            "name": "test",
            "url": "http://wasm.test/",
            "filter_chains": [{ "name": "test", "filters": [{ "name": "i_do_not_exist", "config": {"a": 1} }] }],
        }],
    }))
    .unwrap_err();
    let body = error.to_kong_body(true);
    assert_eq!(
        body["fields"],
        json!({"services": [{"filter_chains": [{
            "@entity": [WASM_DISABLED],
            "filters": [{"name": "no such filter", "config": "wrong type: expected one of string, null, got object"}],
        }]}]})
    );
    let flat = &body["flattened_errors"][0];
    assert_eq!(flat["entity_type"], "filter_chain");
    assert_eq!(flat["entity_name"], "test");
    assert_eq!(
        flat["errors"],
        json!([
            {"field": "filters.1.name", "type": "field", "message": "no such filter"},
            {"field": "filters.1.config", "type": "field", "message": "wrong type: expected one of string, null, got object"},
            {"type": "entity", "message": WASM_DISABLED},
        ])
    );
}
