use serde_json::json;

use super::*;

fn errors_of(result: Result<Config, ConfigError>) -> Vec<(String, String)> {
    match result {
        Ok(config) => panic!("unexpectedly valid: {config:?}"),
        Err(error) => error.errors.into_iter().map(|e| (e.path, e.message)).collect(),
    }
}

fn pair(path: &str, message: &str) -> (String, String) {
    (path.to_string(), message.to_string())
}

#[test]
fn malformed_yaml_and_json_name_line_and_column() {
    let yaml = errors_of(parse_declarative(b"a: [1,\n  b: c: d", DeclarativeFormat::Yaml, NOW));
    assert_eq!(yaml.len(), 1);
    assert_eq!(yaml[0].0, "");
    assert!(yaml[0].1.starts_with("failed parsing declarative configuration: "));
    assert!(yaml[0].1.contains("line"), "{}", yaml[0].1);
    let json = errors_of(parse_declarative(b"{\"a\": }", DeclarativeFormat::Json, NOW));
    assert!(json[0].1.contains("line 1 column 7"), "{}", json[0].1);
}

#[test]
fn non_utf8_and_non_object_documents_are_rejected() {
    let bytes = errors_of(parse_declarative(
        b"_format_version: \xff",
        DeclarativeFormat::Auto,
        NOW,
    ));
    assert_eq!(
        bytes,
        vec![pair(
            "",
            "failed parsing declarative configuration: invalid UTF-8 at byte 17"
        )]
    );
    let list = errors_of(parse_declarative(b"- 1\n- 2\n", DeclarativeFormat::Yaml, NOW));
    assert_eq!(
        list,
        vec![pair("", "failed parsing declarative configuration: expected an object")]
    );
}

#[test]
fn format_version_is_required_and_checked() {
    assert_eq!(
        errors_of(parse_json(json!({"services": []}))),
        vec![pair("_format_version", "required field missing")]
    );
    assert_eq!(
        errors_of(parse_json(json!({"_format_version": "0.1"}))),
        vec![pair("_format_version", "expected one of: 1.1, 2.1, 3.0")]
    );
    assert_eq!(
        errors_of(parse_declarative(
            b"_format_version: 3.0\n",
            DeclarativeFormat::Yaml,
            NOW
        )),
        vec![pair("_format_version", "expected a string")]
    );
}

#[test]
fn unknown_top_level_keys_and_bad_shapes() {
    assert_eq!(
        errors_of(parse_json(json!({
            "_format_version": "3.0", "apis": [], "services": {}, "consumers": [1],
        }))),
        vec![
            pair("apis", "unknown field"),
            pair("services", "expected an array"),
            pair("consumers[0]", "expected a record"),
        ]
    );
}

#[test]
fn nested_errors_carry_full_paths_and_are_all_collected() {
    let errors = errors_of(parse_json(json!({
        "_format_version": "3.0",
        "services": [
            {"name": "ok", "host": "a"},
            {"name": "bad", "host": "b", "port": "x", "routes": [
                {"paths": ["nope"]},
                {"paths": ["/fine"], "plugins": [{"name": "nope"}]},
            ]},
        ],
        "consumers": [{}],
    })));
    assert_eq!(
        errors,
        vec![
            pair("services[1].port", "expected an integer"),
            pair("services[1].routes[0].paths[0]", crate::schema::ROUTE_PATH_START),
            pair(
                "services[1].routes[1].plugins[0].name",
                "plugin 'nope' not enabled; add it to the 'plugins' configuration property"
            ),
            pair(
                "consumers[0]",
                "at least one of these fields must be non-empty: 'custom_id', 'username'"
            ),
        ]
    );
}

#[test]
fn duplicate_names_and_ids_are_reported_at_the_duplicate() {
    let id = "6b5e5e5e-1111-4222-8333-444455556666";
    let errors = errors_of(parse_json(json!({
        "_format_version": "3.0",
        "services": [
            {"name": "x", "host": "a"},
            {"name": "x", "host": "b"},
            {"id": id, "host": "c"},
            {"id": id, "host": "d"},
        ],
        "consumers": [{"username": "u", "custom_id": "c"}, {"username": "v", "custom_id": "c"}],
    })));
    assert_eq!(
        errors,
        vec![
            pair(
                "services[1]",
                "uniqueness violation: 'services' entity with name set to 'x' already declared"
            ),
            pair(
                "services[3]",
                &format!("uniqueness violation: 'services' entity with primary key set to '{id}' already declared")
            ),
            pair(
                "consumers[1]",
                "uniqueness violation: 'consumers' entity with custom_id set to 'c' already declared"
            ),
        ]
    );
}

#[test]
fn duplicate_plugins_in_one_scope_are_rejected() {
    let errors = errors_of(parse_json(json!({
        "_format_version": "3.0",
        "services": [{"name": "s", "host": "a", "plugins": [{"name": "cors"}]}],
        "plugins": [{"name": "cors", "service": "s"}, {"name": "cors"}],
    })));
    assert_eq!(
        errors,
        vec![pair(
            "plugins[0]",
            "uniqueness violation: 'plugins' entity with name set to 'cors' already declared for this scope"
        )]
    );
}

#[test]
fn dangling_references_are_reported_at_the_reference() {
    let errors = errors_of(parse_json(json!({
        "_format_version": "3.0",
        "routes": [{"paths": ["/"], "service": "ghost"}],
        "plugins": [{"name": "cors", "route": {"id": "6b5e5e5e-1111-4222-8333-444455556666"}}],
        "targets": [{"target": "h", "upstream": {"name": "nope"}}],
        "keyauth_credentials": [{"consumer": "nobody"}],
    })));
    assert_eq!(
        errors,
        vec![
            pair("routes[0].service", "invalid reference 'service: ghost' (no such entry in 'services')"),
            pair(
                "targets[0].upstream",
                "invalid reference 'upstream: {\"name\":\"nope\"}' (no such entry in 'upstreams')"
            ),
            pair(
                "keyauth_credentials[0].consumer",
                "invalid reference 'consumer: nobody' (no such entry in 'consumers')"
            ),
            pair(
                "plugins[0].route",
                "invalid reference 'route: {\"id\":\"6b5e5e5e-1111-4222-8333-444455556666\"}' (no such entry in 'routes')"
            ),
        ]
    );
}

#[test]
fn flattened_errors_describe_each_failing_entity() {
    let error = parse_json(json!({
        "_format_version": "3.0",
        "services": [{"name": "s", "tags": ["t"], "port": "x", "routes": [{"name": "r"}]}],
    }))
    .unwrap_err();
    let body = error.to_kong_body(true);
    assert_eq!(
        body["fields"],
        json!({"services": [{
            "host": "required field missing",
            "port": "expected an integer",
            "routes": [{"@entity": [crate::schema::ROUTE_HTTPS_NEEDS_MATCHER]}],
        }]})
    );
    let flat = &body["flattened_errors"];
    assert_eq!(flat.as_array().unwrap().len(), 2);
    assert_eq!(flat[0]["entity_type"], "service");
    assert_eq!(flat[0]["entity_name"], "s");
    assert_eq!(flat[0]["entity_tags"], json!(["t"]));
    assert_eq!(flat[0]["entity"]["port"], "x");
    // Each entity as written: the service with its nested route.
    assert_eq!(flat[0]["entity"]["routes"], json!([{"name": "r"}]));
    assert_eq!(flat[1]["entity"], json!({"name": "r"}));
    assert_eq!(
        flat[0]["errors"],
        json!([
            {"field": "host", "type": "field", "message": "required field missing"},
            {"field": "port", "type": "field", "message": "expected an integer"},
        ])
    );
    assert_eq!(flat[1]["entity_type"], "route");
    assert_eq!(
        flat[1]["errors"],
        json!([{"type": "entity", "message": crate::schema::ROUTE_HTTPS_NEEDS_MATCHER}])
    );
}

#[test]
fn items_are_found_by_their_document_path() {
    let document = json!({
        "services": [{"name": "a"}, {"name": "b", "routes": [{"name": "r0"}, {"name": "r1"}]}],
        "certificates": [{"cert": "c", "snis": ["one.test", {"name": "two.test"}]}],
    });
    let document = document.as_object().unwrap();
    let at = |path: &str| super::super::collect::item_at(document, path);
    assert_eq!(at("services[1].routes[1]"), Some(json!({"name": "r1"})));
    assert_eq!(at("services[0]"), Some(json!({"name": "a"})));
    assert_eq!(at("certificates[0].snis[0]"), Some(json!({"name": "one.test"})));
    assert_eq!(at("certificates[0].snis[1]"), Some(json!({"name": "two.test"})));
    assert_eq!(at("services[2]"), None);
    assert_eq!(at("services"), None);
}
