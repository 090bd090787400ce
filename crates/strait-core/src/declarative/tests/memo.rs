//! Parsing as changes to a memorized document gives what the whole parse
//! gives: the same configuration, or the whole parse's errors.

use serde_json::{json, Value};

use super::*;
use crate::delta::ConfigChange;

fn bytes(document: &Value) -> Vec<u8> {
    serde_json::to_vec(document).unwrap()
}

/// The whole parse of `document` with its memo.
fn whole(document: &Value) -> (Config, Memo) {
    match parse_declarative_memo(
        &bytes(document),
        DeclarativeFormat::Json,
        NOW,
        RouterFlavor::Expressions,
        None,
    ) {
        Ok(Parsed::Whole(config, Some(memo))) => (config, memo),
        Ok(Parsed::Whole(_, None)) => panic!("a JSON document is memorized"),
        Ok(Parsed::Changes(_)) => panic!("no memo, no changes"),
        Err(error) => panic!("unexpected errors:\n{error}"),
    }
}

/// Every entity as JSON text, sorted: two configurations with the same
/// entities compare equal whatever their order.
fn canonical(config: &Config) -> Vec<String> {
    let mut all: Vec<String> = EntityKind::ALL
        .iter()
        .flat_map(|kind| config.entities_json(*kind))
        .map(|entity| entity.to_string())
        .collect();
    all.sort();
    all
}

fn applied(base: &Config, changes: &Changes) -> Config {
    let mut config = base.clone();
    let mut list: Vec<ConfigChange> = changes
        .gone
        .iter()
        .map(|(kind, id)| ConfigChange::Delete { kind: *kind, id: *id })
        .collect();
    for kind in EntityKind::ALL {
        for value in changes.part.entities_json(kind) {
            let tagged = json!({ "kind": kind.singular(), "entity": value });
            list.push(ConfigChange::Upsert {
                entity: serde_json::from_value(tagged).unwrap(),
            });
        }
    }
    config.apply_changes(&list);
    config
}

/// How `new` was taken given `base`'s memo.
#[derive(Debug, PartialEq)]
enum Taken {
    Changes { upserts: usize, gone: usize },
    Whole,
    Invalid,
}

/// Parses `new` against `base`'s memo and checks the result against the
/// whole parse of `new`.
fn check(base: &Value, new: &Value) -> Taken {
    let (base_config, memo) = whole(base);
    let expected = parse_declarative(&bytes(new), DeclarativeFormat::Json, NOW);
    let got = parse_declarative_memo(
        &bytes(new),
        DeclarativeFormat::Json,
        NOW,
        RouterFlavor::Expressions,
        Some(&memo),
    );
    match (got, expected) {
        (Ok(Parsed::Changes(changes)), Ok(expected)) => {
            assert_eq!(
                canonical(&applied(&base_config, &changes)),
                canonical(&expected),
                "changes differ from the whole parse for\n{new}"
            );
            Taken::Changes {
                upserts: changes.part.entity_count(),
                gone: changes.gone.len(),
            }
        }
        (Ok(Parsed::Whole(config, _)), Ok(expected)) => {
            assert_eq!(canonical(&config), canonical(&expected));
            Taken::Whole
        }
        (Err(got), Err(expected)) => {
            assert_eq!(got.to_string(), expected.to_string());
            Taken::Invalid
        }
        (Ok(_), Err(expected)) => panic!("accepted what the whole parse rejects:\n{expected}\n{new}"),
        (Err(got), Ok(_)) => panic!("rejected what the whole parse accepts:\n{got}\n{new}"),
    }
}

/// A document with most shapes: nested and flat entities, references by
/// name, plugins without ids or names (content-derived ids), SNIs by name.
fn base() -> Value {
    let mut routes: Vec<Value> = (0..12)
        .map(|n| {
            json!({
                "name": format!("route-{n}"),
                "paths": [format!("/r{n}")],
                "plugins": [{"name": "request-termination", "config": {"status_code": 200, "message": "ok"}}]
            })
        })
        .collect();
    routes.push(json!({"name": "keyed", "paths": ["/keyed"], "plugins": [{"name": "key-auth"}]}));
    let consumers: Vec<Value> = (0..8)
        .map(|n| {
            json!({
                "username": format!("user-{n}"),
                "keyauth_credentials": [{"key": format!("key-{n}")}],
                "acls": [{"group": "staff"}]
            })
        })
        .collect();
    json!({
        "_format_version": "3.0",
        "services": [
            {"name": "origin", "url": "http://127.0.0.1:9000", "routes": routes},
            {"name": "other", "url": "http://127.0.0.1:9001"}
        ],
        "routes": [{"name": "flat", "service": "other", "paths": ["/flat"]}],
        "consumers": consumers,
        "plugins": [
            {"name": "cors", "route": "flat"},
            {"name": "correlation-id", "service": "origin"}
        ],
        "upstreams": [{"name": "pool", "targets": [{"target": "127.0.0.1:9000"}, {"target": "127.0.0.1:9001"}]}],
        "certificates": [{"cert": CERT, "key": KEY, "snis": ["a.example.com", "b.example.com"]}]
    })
}

fn route(document: &mut Value, at: usize) -> &mut Value {
    &mut document["services"][0]["routes"][at]
}

#[test]
fn the_same_document_is_no_change() {
    let document = base();
    assert_eq!(check(&document, &document), Taken::Changes { upserts: 0, gone: 0 });
}

#[test]
fn one_route_changed_is_that_route_and_its_nested_plugin() {
    let mut new = base();
    route(&mut new, 3)["paths"] = json!(["/changed"]);
    assert_eq!(check(&base(), &new), Taken::Changes { upserts: 2, gone: 0 });
}

#[test]
fn added_and_removed_items_are_upserts_and_deletes() {
    let mut new = base();
    let routes = new["services"][0]["routes"].as_array_mut().unwrap();
    routes.remove(5);
    routes.push(json!({"name": "fresh", "paths": ["/fresh"]}));
    new["consumers"].as_array_mut().unwrap().remove(2);
    // Route 5 and its plugin; the consumer, its credential and its ACL.
    assert_eq!(check(&base(), &new), Taken::Changes { upserts: 1, gone: 5 });
}

#[test]
fn an_edited_item_keeps_its_id_and_is_no_delete() {
    let mut new = base();
    new["consumers"][1]["custom_id"] = json!("c-1");
    assert_eq!(check(&base(), &new), Taken::Changes { upserts: 3, gone: 0 });
}

#[test]
fn a_change_that_breaks_a_rule_gets_the_whole_parse_errors() {
    let base = base();
    // A duplicate name.
    let mut new = base.clone();
    route(&mut new, 2)["name"] = json!("route-7");
    assert_eq!(check(&base, &new), Taken::Invalid);
    // A duplicate key-auth key.
    let mut new = base.clone();
    new["consumers"][0]["keyauth_credentials"][0]["key"] = json!("key-1");
    assert_eq!(check(&base, &new), Taken::Invalid);
    // A second plugin of a name in one scope.
    let mut new = base.clone();
    new["plugins"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "cors", "route": "flat"}));
    assert_eq!(check(&base, &new), Taken::Invalid);
    // A field the schema rejects.
    let mut new = base.clone();
    route(&mut new, 1)["paths"] = json!(["no-slash"]);
    assert_eq!(check(&base, &new), Taken::Invalid);
}

#[test]
fn renaming_what_kept_items_refer_to_is_decided_whole() {
    let base = base();
    // The flat plugin refers to the route named "flat".
    let mut new = base.clone();
    new["routes"][0]["name"] = json!("renamed");
    assert_eq!(check(&base, &new), Taken::Invalid);
    // The flat route refers to the service "other", which gets a new id.
    let mut new = base.clone();
    new["services"][1]["id"] = json!("7b0a1c52-93a5-4a36-9b1d-8f8b1c1f6a01");
    assert_eq!(check(&base, &new), Taken::Whole);
}

#[test]
fn content_derived_ids_that_would_shift_are_decided_whole() {
    let base = base();
    let mut new = base.clone();
    // The same nameless target twice: the second gets the next count.
    new["upstreams"][0]["targets"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"target": "127.0.0.1:9001"}));
    let taken = check(&base, &new);
    assert!(matches!(taken, Taken::Whole | Taken::Invalid), "{taken:?}");
}

#[test]
fn documents_the_scan_cannot_follow_are_parsed_whole() {
    let base = base();
    // Meta changed.
    let mut new = base.clone();
    new["_transform"] = json!(false);
    assert_eq!(check(&base, &new), Taken::Whole);
    // Nested lists in another order than the whole parse takes them.
    let text = bytes(&base);
    let (_, memo) = whole(&base);
    let reordered = String::from_utf8(text).unwrap().replace(
        r#""name":"other","url":"http://127.0.0.1:9001""#,
        r#""plugins":[],"routes":[],"name":"other","url":"http://127.0.0.1:9001""#,
    );
    let parsed = parse_declarative_memo(
        reordered.as_bytes(),
        DeclarativeFormat::Json,
        NOW,
        RouterFlavor::Expressions,
        Some(&memo),
    );
    assert!(matches!(parsed, Ok(Parsed::Whole(_, None))));
    // YAML has no memo.
    let yaml = serde_yaml::to_string(&base).unwrap();
    let parsed = parse_declarative_memo(
        yaml.as_bytes(),
        DeclarativeFormat::Yaml,
        NOW,
        RouterFlavor::Expressions,
        Some(&memo),
    );
    assert!(matches!(parsed, Ok(Parsed::Whole(_, None))));
}

#[test]
fn malformed_json_is_never_taken_as_changes() {
    let base = base();
    let (_, memo) = whole(&base);
    let text = String::from_utf8(bytes(&base)).unwrap();
    for broken in [
        text.replacen(',', ",,", 1),
        text.replacen("}]", "}", 1),
        format!("{text} trailing"),
        text.replacen(":", " ", 1),
        text.replacen("[", "{", 1),
    ] {
        let parsed = parse_declarative_memo(
            broken.as_bytes(),
            DeclarativeFormat::Json,
            NOW,
            RouterFlavor::Expressions,
            Some(&memo),
        );
        assert!(parsed.is_err(), "accepted {broken}");
    }
}

#[test]
fn an_advanced_memo_describes_the_new_document() {
    let base = base();
    let (_, memo) = whole(&base);
    let mut next = base.clone();
    route(&mut next, 0)["paths"] = json!(["/first"]);
    let Ok(Parsed::Changes(changes)) = parse_declarative_memo(
        &bytes(&next),
        DeclarativeFormat::Json,
        NOW,
        RouterFlavor::Expressions,
        Some(&memo),
    ) else {
        panic!("expected changes");
    };
    let memo = memo.advance(changes.plan, 7);
    assert_eq!(memo.version(), 7);
    assert_eq!(memo.items(), whole(&next).1.items());
    // Against the advanced memo, the new document is no change and the
    // old one is one route (with its plugin) again.
    for (document, upserts) in [(&next, 0), (&base, 2)] {
        let Ok(Parsed::Changes(changes)) = parse_declarative_memo(
            &bytes(document),
            DeclarativeFormat::Json,
            NOW,
            RouterFlavor::Expressions,
            Some(&memo),
        ) else {
            panic!("expected changes");
        };
        assert_eq!(changes.part.entity_count(), upserts);
        assert!(changes.gone.is_empty());
    }
}

/// Random edits of the base document, each checked against the whole parse.
#[test]
fn random_edits_match_the_whole_parse() {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound as u64) as usize
    };
    let base = base();
    let (mut changes, mut whole, mut invalid) = (0, 0, 0);
    for _ in 0..400 {
        let mut new = base.clone();
        for _ in 0..1 + next(3) {
            edit(&mut new, &mut next);
        }
        match check(&base, &new) {
            Taken::Changes { .. } => changes += 1,
            Taken::Whole => whole += 1,
            Taken::Invalid => invalid += 1,
        }
    }
    // Every way is exercised, and most valid edits go the changes path.
    assert!(
        changes > 100 && whole > 0 && invalid > 0 && changes > whole,
        "changes {changes}, whole {whole}, invalid {invalid}"
    );
}

fn edit(document: &mut Value, next: &mut impl FnMut(usize) -> usize) {
    let routes_len = document["services"][0]["routes"].as_array().unwrap().len();
    let consumers_len = document["consumers"].as_array().unwrap().len();
    match next(14) {
        12 => {
            // The parent of many nested items edited: none of them may be
            // taken as nested under the old one.
            document["services"][0]["url"] = json!(format!("http://127.0.0.1:{}", 9100 + next(3)));
        }
        13 if routes_len > 0 => {
            // A route moved, bytes unchanged, under another service.
            let moved = document["services"][0]["routes"]
                .as_array_mut()
                .unwrap()
                .remove(next(routes_len));
            document["services"][1]["routes"] = json!([moved]);
        }
        0 if routes_len > 0 => {
            let at = next(routes_len);
            route(document, at)["paths"] = json!([format!("/edit{}", next(1000))]);
        }
        1 if routes_len > 0 => {
            let at = next(routes_len);
            document["services"][0]["routes"].as_array_mut().unwrap().remove(at);
        }
        2 => {
            let n = next(30);
            document["services"][0]["routes"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": format!("new-{n}"), "paths": [format!("/new{n}")]}));
        }
        3 if routes_len > 0 => {
            // Maybe a duplicate name.
            let at = next(routes_len);
            route(document, at)["name"] = json!(format!("route-{}", next(14)));
        }
        4 if consumers_len > 0 => {
            let at = next(consumers_len);
            document["consumers"][at]["keyauth_credentials"][0]["key"] = json!(format!("key-{}", next(10)));
        }
        5 if consumers_len > 0 => {
            document["consumers"]
                .as_array_mut()
                .unwrap()
                .remove(next(consumers_len));
        }
        6 if routes_len > 0 => {
            let at = next(routes_len);
            let message = format!("m{}", next(5));
            if let Some(plugin) = route(document, at)["plugins"].get_mut(0) {
                plugin["config"]["message"] = json!(message);
            }
        }
        7 if routes_len > 0 => {
            // A nameless plugin repeated or moved: content-derived ids.
            let at = next(routes_len);
            let Some(plugin) = route(document, at)["plugins"].get(0).cloned() else {
                return;
            };
            let to = next(routes_len);
            match route(document, to)["plugins"].as_array_mut() {
                Some(plugins) => plugins.insert(0, plugin),
                None => route(document, to)["plugins"] = json!([plugin]),
            }
        }
        8 => {
            let names = ["flat", "route-1", "renamed", "keyed"];
            document["plugins"][0]["route"] = json!(names[next(names.len())]);
        }
        9 => {
            let name = ["flat", "other-flat", "route-2"][next(3)];
            document["routes"][0]["name"] = json!(name);
        }
        10 if consumers_len > 0 => {
            let at = next(consumers_len);
            let group = ["staff", "ops"][next(2)];
            document["consumers"][at]["acls"]
                .as_array_mut()
                .unwrap()
                .push(json!({ "group": group }));
        }
        _ => {
            let targets = document["upstreams"][0]["targets"].as_array_mut().unwrap();
            targets.push(json!({"target": format!("127.0.0.1:{}", 9000 + next(3))}));
        }
    }
}

#[test]
fn a_top_level_member_is_found_without_decoding() {
    let find = |text: &str| top_level_member(text.as_bytes(), "config");
    let wrapped = r#"{"a": [1, {"config": 2}], "config": {"x": "}"}, "b": null}"#;
    let Member::At(start, end) = find(wrapped) else {
        panic!("not found");
    };
    assert_eq!(&wrapped[start..end], r#"{"x": "}"}"#);
    assert_eq!(find(r#"{"_format_version": "3.0", "services": []}"#), Member::Absent);
    // The last of repeated members, as serde_json keeps it.
    let repeated = r#"{"config": 1, "config": "two"}"#;
    let Member::At(start, end) = find(repeated) else {
        panic!("not found");
    };
    assert_eq!(&repeated[start..end], r#""two""#);
    // What the scan cannot follow is left to a decoder.
    for unclear in [r#"{"conf\u0069g": 1}"#, r#"{"config": 1"#, "[1]", r#"{"a": 1} x"#, ""] {
        assert_eq!(find(unclear), Member::Unclear, "{unclear}");
    }
}
