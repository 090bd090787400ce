//! decK's `_info` (select tags, defaults), `_workspace` and `_konnect`.

use serde_json::json;

use super::*;

fn errors_of(document: serde_json::Value) -> Vec<(String, String)> {
    match parse_json(document) {
        Ok(config) => panic!("expected errors, parsed {config:?}"),
        Err(error) => error.errors.into_iter().map(|e| (e.path, e.message)).collect(),
    }
}

#[test]
fn select_tags_are_added_to_every_entity_with_tags() {
    let config = parse_json(json!({
        "_format_version": "3.0",
        "_info": { "select_tags": ["team-a", "managed"] },
        "services": [{
            "name": "s", "url": "http://a.test", "tags": ["mine", "team-a"],
            "routes": [{ "name": "r", "paths": ["/r"], "plugins": [{ "name": "cors" }] }]
        }],
        "consumers": [{ "username": "u", "keyauth_credentials": [{ "key": "k" }] }]
    }))
    .unwrap();
    let tags = |tags: &Option<Vec<String>>| tags.clone().unwrap_or_default();
    assert_eq!(tags(&config.services[0].tags), ["mine", "team-a", "managed"]);
    assert_eq!(tags(&config.routes[0].tags), ["team-a", "managed"]);
    assert_eq!(tags(&config.plugins[0].tags), ["team-a", "managed"]);
    assert_eq!(tags(&config.consumers[0].tags), ["team-a", "managed"]);
    assert_eq!(tags(&config.keyauth_credentials[0].tags), ["team-a", "managed"]);
}

#[test]
fn defaults_fill_what_an_entity_leaves_out_and_the_file_wins() {
    let config = parse_json(json!({
        "_format_version": "3.0",
        "_info": { "defaults": {
            "service": { "read_timeout": 1000, "retries": 2 },
            "route": { "strip_path": false, "preserve_host": true },
            "upstream": { "slots": 100 },
            "target": { "weight": 7 }
        } },
        "services": [
            { "name": "plain", "url": "http://a.test" },
            { "name": "own", "url": "http://b.test", "read_timeout": 5000, "retries": null,
              "routes": [{ "name": "r", "paths": ["/r"], "strip_path": true }] }
        ],
        "upstreams": [{ "name": "u", "targets": [{ "target": "10.0.0.1:80" }] }]
    }))
    .unwrap();
    let service = |name: &str| {
        config
            .services
            .iter()
            .find(|s| s.name.as_deref() == Some(name))
            .unwrap()
    };
    assert_eq!((service("plain").read_timeout, service("plain").retries), (1000, 2));
    // A value in the file wins; a null is left out, so the default fills it.
    assert_eq!((service("own").read_timeout, service("own").retries), (5000, 2));
    assert!(config.routes[0].strip_path, "the file's value wins");
    assert!(
        config.routes[0].preserve_host,
        "the default beats Kong's schema default"
    );
    assert_eq!(config.upstreams[0].slots, 100);
    assert_eq!(config.targets[0].weight, 7);
}

#[test]
fn defaults_may_not_name_or_identify_an_entity() {
    let errors = errors_of(json!({
        "_format_version": "3.0",
        "_info": { "defaults": { "service": { "name": "x" }, "target": { "target": "a:1" }, "plugin": {} } },
    }));
    assert!(errors.contains(&(
        "_info.defaults.service.name".into(),
        "defaults cannot set an entity's id or name".into()
    )));
    assert!(errors.contains(&(
        "_info.defaults.target.target".into(),
        "defaults cannot set an entity's id or name".into()
    )));
    assert!(errors.contains(&("_info.defaults.plugin".into(), "unknown field".into())));
}

#[test]
fn workspace_konnect_and_unknown_info_keys_are_refused_by_name() {
    let errors = errors_of(json!({
        "_format_version": "3.0",
        "_workspace": "team-a",
        "_konnect": { "control_plane_name": "cp" },
        "_info": { "select_tags": ["a", 1], "unknown": true, "skip_hash_for_basic_auth": true },
    }));
    let paths: Vec<&str> = errors.iter().map(|(path, _)| path.as_str()).collect();
    for path in [
        "_workspace",
        "_konnect",
        "_info.select_tags[1]",
        "_info.unknown",
        "_info.skip_hash_for_basic_auth",
    ] {
        assert!(paths.contains(&path), "{path} missing from {errors:?}");
    }
    // What decK writes by default loads.
    parse_json(json!({
        "_format_version": "3.0",
        "_workspace": "default",
        "_info": { "defaults": {}, "select_tags": null, "default_lookup_tags": { "services": ["x"] } },
    }))
    .unwrap();
}
