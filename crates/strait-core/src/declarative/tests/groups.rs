//! Consumer groups and secrets entities in declarative files.

use serde_json::json;
use uuid::Uuid;

use super::*;

#[test]
fn memberships_nest_under_either_side_and_flat() {
    let config = parse_json(json!({
        "_format_version": "3.0",
        "consumer_groups": [
            { "name": "gold", "consumers": [{ "username": "carol" }, "dave"],
              "plugins": [{ "name": "request-termination" }] },
            { "name": "silver" }
        ],
        "consumers": [
            { "username": "alice", "groups": [{ "name": "gold" }, "silver"] },
            { "username": "bob", "groups": [{ "id": entity_id_for_key(EntityKind::ConsumerGroups, "silver"), "name": "ignored" }] },
            { "username": "carol" },
            { "username": "dave" }
        ],
        "consumer_group_consumers": [{ "consumer_group": "silver", "consumer": "carol" }],
        "plugins": [{ "name": "request-termination" }]
    }))
    .unwrap();
    let group = |name: &str| config.consumer_groups.iter().find(|g| g.name == name).unwrap().id;
    let consumer = |name: &str| {
        config
            .consumers
            .iter()
            .find(|c| c.username.as_deref() == Some(name))
            .unwrap()
            .id
    };
    let mut pairs: Vec<(Uuid, Uuid)> = config
        .consumer_group_consumers
        .iter()
        .map(|m| (m.consumer_group.id, m.consumer.id))
        .collect();
    pairs.sort();
    let mut expected = vec![
        (group("gold"), consumer("alice")),
        (group("silver"), consumer("alice")),
        (group("silver"), consumer("bob")),
        (group("gold"), consumer("carol")),
        (group("gold"), consumer("dave")),
        (group("silver"), consumer("carol")),
    ];
    expected.sort();
    assert_eq!(pairs, expected);
    // A global plugin and a group plugin of the same name are two scopes.
    let scoped: Vec<_> = config.plugins.iter().map(|p| p.consumer_group.map(|g| g.id)).collect();
    assert!(
        scoped.contains(&Some(group("gold"))) && scoped.contains(&None),
        "{scoped:?}"
    );
}

#[test]
fn membership_errors_name_their_place() {
    let error = parse_json(json!({
        "_format_version": "3.0",
        "consumer_groups": [{ "name": "gold", "consumers": ["alice"] }],
        "consumers": [{ "username": "alice", "groups": ["gold", "platinum", 7] }]
    }))
    .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("consumers[0].groups[2]: expected a record or a name"),
        "{text}"
    );
    assert!(text.contains("platinum"), "{text}");
    assert!(text.contains("already a member of this consumer group"), "{text}");
    let scoped = parse_json(json!({
        "_format_version": "3.0",
        "consumer_groups": [{ "name": "gold" }],
        "consumers": [{ "username": "alice" }],
        "plugins": [{ "name": "request-termination", "consumer": "alice", "consumer_group": "gold" }]
    }))
    .unwrap_err();
    assert!(
        scoped
            .to_string()
            .contains("only one of these fields must be non-empty: 'consumer', 'consumer_group'"),
        "{scoped}"
    );
}

#[test]
fn keys_nest_under_their_set() {
    let jwk = json!({ "kty": "oct", "kid": "k1", "k": "c2VjcmV0" }).to_string();
    let config = parse_json(json!({
        "_format_version": "3.0",
        "vaults": [{ "prefix": "my-env", "name": "env" }],
        "key_sets": [{ "name": "signing", "keys": [{ "name": "k1", "kid": "k1", "jwk": jwk }] }]
    }))
    .unwrap();
    assert_eq!(config.keys[0].set.map(|s| s.id), Some(config.key_sets[0].id));
    assert_eq!(
        config.vaults[0].config,
        json!({ "prefix": null }).as_object().cloned().unwrap()
    );
}
