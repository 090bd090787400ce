use serde_json::json;

use super::*;

fn errors(list: &[(&str, &str)]) -> ConfigError {
    ConfigError::new(list.iter().map(|(p, m)| FieldError::new(*p, *m)).collect())
}

#[test]
fn parse_path_splits_names_and_indexes() {
    use PathSegment::*;
    assert_eq!(
        parse_path("services[1].routes[0].paths[0]"),
        vec![
            Name("services".into()),
            Index(1),
            Name("routes".into()),
            Index(0),
            Name("paths".into()),
            Index(0)
        ]
    );
    assert_eq!(parse_path(""), vec![]);
    assert_eq!(
        parse_path("headers.x-a"),
        vec![Name("headers".into()), Name("x-a".into())]
    );
}

#[test]
fn join_path_handles_empty_sides_and_indexes() {
    assert_eq!(join_path("", "name"), "name");
    assert_eq!(join_path("services[0]", ""), "services[0]");
    assert_eq!(join_path("services[0]", "name"), "services[0].name");
    assert_eq!(join_path("paths", "[1]"), "paths[1]");
}

#[test]
fn display_lists_every_error_one_per_line() {
    let error = errors(&[("services[0].host", "required field missing"), ("", "whole")]);
    assert_eq!(error.to_string(), "services[0].host: required field missing\nwhole");
}

#[test]
fn fields_tree_mirrors_the_input() {
    let error = errors(&[
        ("services[1].routes[0].paths[0]", "bad path"),
        ("services[1].routes[0]", "entity problem"),
        ("services[1].name", "bad name"),
        ("_format_version", "required field missing"),
    ]);
    assert_eq!(
        error.fields_tree(),
        json!({
            "services": [null, {
                "routes": [{ "paths": ["bad path"], "@entity": ["entity problem"] }],
                "name": "bad name",
            }],
            "_format_version": "required field missing",
        })
    );
}

#[test]
fn repeated_messages_at_one_path_become_an_array() {
    let error = errors(&[("consumers[0].username", "a"), ("consumers[0].username", "b")]);
    assert_eq!(
        error.fields_tree(),
        json!({ "consumers": [{ "username": ["a", "b"] }] })
    );
}

#[test]
fn document_level_error_goes_under_error() {
    let error = errors(&[("", "failed parsing declarative configuration: x")]);
    assert_eq!(
        error.fields_tree(),
        json!({ "error": "failed parsing declarative configuration: x" })
    );
}

#[test]
fn kong_body_has_code_name_message_fields_and_optional_flattened() {
    let mut error = errors(&[("services[0].port", "expected an integer")]);
    error.flattened.push(FlattenedEntityError {
        entity_type: "service".into(),
        entity_name: Some("s".into()),
        entity_id: None,
        entity_tags: None,
        entity: json!({ "name": "s", "port": "x" }),
        errors: vec![FlattenedFieldError {
            field: Some("port".into()),
            kind: "field".into(),
            message: "expected an integer".into(),
        }],
    });
    let body = error.to_kong_body(false);
    assert_eq!(body["code"], 14);
    assert_eq!(body["name"], "invalid declarative configuration");
    assert!(body["message"]
        .as_str()
        .unwrap()
        .starts_with("declarative config is invalid: "));
    assert_eq!(
        body["fields"],
        json!({ "services": [{ "port": "expected an integer" }] })
    );
    assert!(body.get("flattened_errors").is_none());

    let flat = error.to_kong_body(true);
    assert_eq!(
        flat["flattened_errors"],
        json!([{
            "entity_type": "service",
            "entity_name": "s",
            "entity": { "name": "s", "port": "x" },
            "errors": [{ "field": "port", "type": "field", "message": "expected an integer" }],
        }])
    );
}

#[test]
fn kong_paths_are_dotted_and_one_based() {
    assert_eq!(kong_path("protocols[0]"), "protocols.1");
    assert_eq!(kong_path("a.b[2].c"), "a.b.3.c");
    assert_eq!(kong_path("filters[0].config"), "filters.1.config");
    assert_eq!(kong_path("name"), "name");
}
